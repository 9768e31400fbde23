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

import struct
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from crc32c import crc32c

from . import _compression, _decode_legacy
from ._decode_v2 import (
    CONTROL_ABORT,
    CONTROL_MASK,
    CODEC_MASK,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    control_type,
    decode_records,
)
from ._errors import CorruptRecordError, DeserializationError, RecordError, RecordTooLargeError
from ._records import ConsumerRecord

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"

_LENGTH = struct.Struct(">qi")
_MAGIC_OFFSET = 16  # base offset, length, then v2 leader epoch / legacy CRC
# Smallest possible batch length: a magic v0 message with null key and value.
_MIN_LENGTH = 14


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
) -> DecodedPartition:
    """Decode the ``records`` of a fetch response partition fetched from ``fetch_offset``.

    ``aborted_transactions``: kafka-python ``AbortedTransaction`` objects or
    ``(producer_id, first_offset)`` pairs; used with read_committed only.
    Deserializers are kafka-python ``Deserializer`` objects
    (``deserialize(topic, headers, data)``) or plain callables taking the
    bytes; both are called for null keys and values too, like Java does.
    """
    if isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise ValueError(f"isolation_level must be {READ_UNCOMMITTED!r} or {READ_COMMITTED!r}")
    if records is None:
        records = b""
    view = memoryview(records)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    size = len(view)
    key_fn = _deserializer(key_deserializer)
    value_fn = _deserializer(value_deserializer)

    read_committed = isolation_level == READ_COMMITTED
    aborted = _aborted_queue(aborted_transactions) if read_committed else []
    aborted_index = 0
    aborted_pids: set[int] = set()

    out: list[ConsumerRecord] = []
    append = out.append
    next_offset = fetch_offset
    leader_epoch = -1
    error: RecordError | None = None
    pos = 0
    while size - pos >= LOG_OVERHEAD:
        base_offset, length = _LENGTH.unpack_from(view, pos)
        end = pos + LOG_OVERHEAD + length
        if length < _MIN_LENGTH:
            error = CorruptRecordError(topic, partition, base_offset,
                                       f"batch length {length} is below the minimum {_MIN_LENGTH}")
            break
        if end > size:
            break  # the broker cut the last batch at the fetch size: fetch it next time
        mark = len(out)
        try:
            magic = view[pos + _MAGIC_OFFSET]
            if magic == 2:
                if length < HEADER_SIZE - LOG_OVERHEAD:
                    raise ValueError(f"batch length {length} is shorter than the v2 batch header")
                (_, _, epoch, _, crc, attributes, last_offset_delta, base_timestamp, max_timestamp,
                 producer_id, _, _, count) = HEADER.unpack_from(view, pos)
                if check_crcs and crc32c(view[pos + CRC_START:end]) != crc:
                    raise ValueError("CRC mismatch")
                if count < 0:
                    raise ValueError(f"negative record count {count}")
                last_offset = base_offset + last_offset_delta
                codec = attributes & CODEC_MASK
                skip = attributes & CONTROL_MASK  # transaction markers are not records
                if read_committed and producer_id >= 0:
                    # Java's CompletedFetch: transactions that began at or before this
                    # batch's last offset are aborted from here on for their producer,
                    # until that producer's ABORT marker.
                    while aborted_index < len(aborted) and aborted[aborted_index][0] <= last_offset:
                        aborted_pids.add(aborted[aborted_index][1])
                        aborted_index += 1
                    if skip:
                        if count and control_type(_payload(view, pos, end, codec)) == CONTROL_ABORT:
                            aborted_pids.discard(producer_id)
                    elif attributes & TRANSACTIONAL_MASK and producer_id in aborted_pids:
                        skip = True  # still advances next_offset past it
                if count and not skip:
                    decode_records(
                        _payload(view, pos, end, codec), count, base_offset, base_timestamp,
                        max_timestamp if attributes & TIMESTAMP_TYPE_MASK else None,
                        next_offset, topic, partition, epoch, out)
                    if not check_crcs:
                        _check_offsets(out, mark, base_offset, last_offset)
                batch_next = last_offset + 1
                leader_epoch = epoch
            elif magic == 0 or magic == 1:
                batch_next = _decode_legacy.decode_batch(
                    view[pos:end], magic, check_crcs, next_offset, topic, partition, append)
            else:
                raise ValueError(f"unknown magic {magic}")
        except Exception as exc:  # noqa: BLE001 - bad data must not escape; the cause is kept
            del out[mark:]
            error = CorruptRecordError(topic, partition, base_offset, f"corrupt batch: {_reason(exc)}")
            error.__cause__ = exc
            break
        if key_fn is not None or value_fn is not None:
            failed = _deserialize(out, mark, topic, partition, key_fn, value_fn)
            if failed is not None:
                error = failed
                next_offset = failed.offset
                break
        if batch_next > next_offset:
            next_offset = batch_next
        pos = end

    if error is None and pos == 0 and size:
        error = RecordTooLargeError(
            topic, partition, fetch_offset,
            f"the fetch returned {size} bytes without one complete batch: the batch is larger than "
            "the partition fetch size (raise max_partition_fetch_bytes)")
    return DecodedPartition(out, next_offset, pos, error, leader_epoch)


def _payload(view: memoryview, pos: int, end: int, codec: int) -> bytes:
    """The records part of the v2 batch at ``pos``, decompressed; bytes, whose slices are bytes."""
    payload = view[pos + HEADER_SIZE:end]
    return bytes(payload) if codec == 0 else _compression.decompress(codec, payload)


def _check_offsets(out: list, mark: int, base_offset: int, last_offset: int) -> None:
    """Offsets of a batch's records must rise within the batch's range.

    Brokers validate this when they append, and the CRC covers the deltas;
    unchecked data is checked here instead, so a corrupt delta cannot send
    the consumer back before the fetch offset.
    """
    offsets = [r[3] for r in out[mark:]]
    if offsets and (offsets[0] < base_offset or offsets[-1] > last_offset
                    or any(b <= a for a, b in zip(offsets, offsets[1:]))):
        raise ValueError("record offsets are out of order or outside the batch's range")


def _reason(exc: Exception) -> str:
    if type(exc) is ValueError:  # ours, worded for the reader
        return str(exc)
    if isinstance(exc, IndexError):
        return "a length or varint runs past the end of the batch"
    return f"{type(exc).__name__}: {exc}"


def _aborted_queue(transactions: Iterable[Any] | None) -> list[tuple[int, int]]:
    """Aborted transactions as (first_offset, producer_id), by first offset."""
    queue = []
    for txn in transactions or ():
        if hasattr(txn, "producer_id"):
            queue.append((txn.first_offset, txn.producer_id))
        else:
            producer_id, first_offset = txn
            queue.append((first_offset, producer_id))
    queue.sort()
    return queue


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
    error returned.
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
            error = DeserializationError(
                topic, partition, record[3], f"{origin} deserializer failed: {exc!r}", origin=origin)
            error.__cause__ = exc
            return error
        out[i] = new(ConsumerRecord, record[:6] + (key, value) + record[8:])
    return None
