"""Turn one partition's fetched record data into ``ConsumerRecord``s.

``decode_partition`` walks the batches of a Fetch response partition in
order: it checks CRCs, decompresses, drops control batches and (with
read_committed) aborted transactional batches, decodes records and applies
deserializers. It never raises on bad data: what decoded before the problem
is returned with ``error`` set, and ``next_offset`` says where to fetch next
(at the bad batch or record, so the consumer raises the error when it gets
there, as Java's consumer does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Any, NamedTuple

from crc32c import crc32c

from ..structs import ConsumerRecord
from . import _decode_legacy
from ._compression import DEFAULT_LIMIT
from ._decode_v2 import best_decode_records as decode_records
from ._decode_v2 import decode_records as _loop
from ._errors import DeserializationError, RecordError
from ._walk import READ_COMMITTED, READ_UNCOMMITTED, read_committed, walk

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "DecodedPartition", "decode_partition"]

_walk_records: Callable[..., Any] | None
try:  # fetch/_cwalk.c: the walk of a whole fetch in one call, no Python per batch (the walk below where it declines)
    from ._cwalk import walk_records as _walk_records
except ImportError:  # installed without a C compiler
    _walk_records = None


class DecodedPartition(NamedTuple):
    """The outcome of decoding one partition's fetched data.

    ``records``: records at or past the fetch offset, in offset order.
    ``next_offset``: where the next fetch starts; past every batch walked,
    including control and aborted ones, or at the record or batch that
    failed when ``error`` is set.
    ``bytes``: bytes of the complete batches walked (a partial trailing batch
    and a failing batch are not counted).
    ``error``: None, or the ``RecordError`` that stopped decoding.
    ``leader_epoch``: partition leader epoch of the last v2 batch walked, -1
    if none.
    """

    records: list[ConsumerRecord]
    next_offset: int
    bytes: int
    error: RecordError | None
    leader_epoch: int = -1


def decode_partition(
    topic: str,
    partition: int,
    records: bytes | memoryview | None,
    *,
    fetch_offset: int,
    isolation_level: str = READ_UNCOMMITTED,
    aborted_transactions: Iterable[Any] | None = None,
    check_crcs: bool = True,
    key_deserializer: Any = None,
    value_deserializer: Any = None,
    max_batch_bytes: int = DEFAULT_LIMIT,
) -> DecodedPartition:
    """Decode the ``records`` of a fetch response partition fetched from ``fetch_offset``.

    ``aborted_transactions``: kafka-python ``AbortedTransaction`` objects or
    ``(producer_id, first_offset)`` pairs; used with read_committed only.
    Deserializers are kafka-python ``Deserializer`` objects
    (``deserialize(topic, headers, data)``) or plain callables taking the
    bytes; both are called for null keys and values too, like Java does.
    A compressed batch decompressing past ``max_batch_bytes`` is a ``RecordTooLargeError``.
    """
    committed = read_committed(isolation_level)
    key_fn = _deserializer(key_deserializer)
    value_fn = _deserializer(value_deserializer)
    out: list[ConsumerRecord] = []
    if (
        _walk_records is not None
        and decode_records is not _loop
        and records is not None
        and key_fn is None
        and value_fn is None
        and not (committed and aborted_transactions)
    ):
        got = _walk_records(records, fetch_offset, committed, check_crcs, crc32c, topic, partition, out, ConsumerRecord)
        if got is not NotImplemented:
            return DecodedPartition(out, *got)
    append = out.append

    def legacy(batch: memoryview, magic: int, min_offset: int) -> int:
        return _decode_legacy.decode_batch(batch, magic, check_crcs, min_offset, topic, partition, append)

    def truncate(mark: int) -> None:
        del out[mark:]

    after = None
    if key_fn is not None or value_fn is not None:

        def after(mark: int) -> DeserializationError | None:
            return _deserialize(out, mark, topic, partition, key_fn, value_fn)

    walked = walk(
        topic,
        partition,
        records,
        fetch_offset,
        committed,
        aborted_transactions,
        check_crcs,
        out,
        decode_records,
        _check_offsets,
        legacy,
        out.__len__,
        truncate,
        after,
        # the compiled decoder copies out what it keeps: it reads the fetched data in place; the loop's
        # slices must be bytes, so it gets each batch copied
        views=decode_records is not _loop,
        max_batch_bytes=max_batch_bytes,
    )
    return DecodedPartition(out, *walked)


def _check_offsets(out: list, mark: int, base_offset: int, last_offset: int, _min_offset: int) -> None:
    """Offsets of a batch's records must rise within the batch's range.

    Brokers validate this when they append, and the CRC covers the deltas;
    unchecked data is checked here instead, so a corrupt delta cannot send
    the consumer back before the fetch offset.
    """
    offsets = [r[3] for r in out[mark:]]
    if offsets and (offsets[0] < base_offset or offsets[-1] > last_offset or any(b <= a for a, b in pairwise(offsets))):
        raise ValueError("record offsets are out of order or outside the batch's range")


def _deserializer(deserializer: Any) -> Callable[[str, list, Any], Any] | None:
    if deserializer is None:
        return None
    if hasattr(deserializer, "deserialize"):
        return deserializer.deserialize
    if callable(deserializer):
        return lambda _topic, _headers, data: deserializer(data)
    raise TypeError(f"deserializer must have deserialize(topic, headers, data) or be callable: {deserializer!r}")


def _deserialize(out: list, start: int, topic: str, partition: int, key_fn, value_fn) -> DeserializationError | None:
    """Deserialize keys and values of ``out[start:]`` in place.

    On failure the failing record and those after it are dropped and the
    error returned; the deserializer's exception (its ``__cause__``, which the
    consumer raises as it is) gets a note saying where it happened.
    """
    new = tuple.__new__
    for i in range(start, len(out)):
        record = out[i]
        origin = "key"
        try:
            key = record[6] if key_fn is None else key_fn(topic, record[8], record[6])
            origin = "value"
            value = record[7] if value_fn is None else value_fn(topic, record[8], record[7])
        except Exception as exc:  # noqa: BLE001 - any deserializer failure is the user's to see
            del out[i:]
            return deserializer_failed(exc, topic, partition, record[3], origin)
        out[i] = new(ConsumerRecord, record[:6] + (key, value) + record[8:])
    return None


def deserializer_failed(exc: Exception, topic: str, partition: int, offset: int, origin: str) -> DeserializationError:
    """The partition's error for the deserializer's exception ``exc`` at ``offset`` (its ``__cause__``, which the
    consumer raises as it is), the exception noted with where it happened (records and typed columns alike)."""
    note = (
        f"fsm_consumer: the {origin} deserializer failed on the record at offset {offset} of "
        f"{topic}-{partition}; the partition's position stays there (it fails again when read), "
        f"seek(TopicPartition({topic!r}, {partition}), {offset + 1}) skips the record"
    )
    if note not in getattr(exc, "__notes__", ()):  # a deserializer may raise one instance again and again
        exc.add_note(note)
    error = DeserializationError(topic, partition, offset, f"{origin} deserializer failed: {exc!r}", origin=origin)
    error.__cause__ = exc
    return error
