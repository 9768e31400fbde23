"""The walk over one partition's fetched record batches, shared by both decoders.

``walk`` applies the batch rules of ``decode_partition`` and
``decode_partition_columns``: batch length and magic checks, v2 header, CRC32C,
decompression, control batches, read_committed aborted transactions, the
fetch offset, legacy (magic v0/v1) batches, a partial trailing batch (left for
the next fetch) and ``RecordTooLargeError`` when not one batch is complete.
The per-record loops stay with the decoders (tuples or column positions):
``walk`` calls them once per batch through callbacks. Bad data never raises:
what the callbacks added for the failing batch is truncated and the error
returned with where to fetch next.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from crc32c import crc32c

from . import _compression
from ._decode_v2 import (
    CODEC_MASK,
    CONTROL_ABORT,
    CONTROL_MASK,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    control_type,
)
from ._errors import CorruptRecordError, RecordError, RecordTooLargeError

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"

_LENGTH = struct.Struct(">qi")
_MAGIC_OFFSET = 16  # base offset, length, then v2 leader epoch / legacy CRC
# Smallest possible batch length: a magic v0 message with null key and value.
_MIN_LENGTH = 14


class Walked(NamedTuple):
    """Where a walk ended: as ``DecodedPartition`` without the records."""

    next_offset: int
    bytes: int
    error: RecordError | None
    leader_epoch: int


def read_committed(isolation_level: str) -> bool:
    """Whether ``isolation_level`` is read_committed; ValueError if it is neither level."""
    if isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise ValueError(f"isolation_level must be {READ_UNCOMMITTED!r} or {READ_COMMITTED!r}")
    return isolation_level == READ_COMMITTED


def walk(
    topic: str,
    partition: int,
    records: bytes | memoryview | None,
    fetch_offset: int,
    committed: bool,
    aborted_transactions: Iterable[Any] | None,
    check_crcs: bool,
    out: Any,
    v2: Callable[..., None],
    check: Callable[[Any, Any, int, int, int], None],
    legacy: Callable[[memoryview, int, int], int],
    mark: Callable[[], Any],
    truncate: Callable[[Any], None],
    after: Callable[[Any], RecordError | None] | None = None,
    views: bool = False,
    max_batch_bytes: int = _compression.DEFAULT_LIMIT,
) -> Walked:
    """Walk the batches of ``records`` fetched from ``fetch_offset``; the decoders' callbacks add the records
    to ``out``.

    ``v2(payload, count, base_offset, base_timestamp, log_append_time, min_offset, topic,
    partition, leader_epoch, out)`` (``decode_records``' signature, so the tuple decoder passes it
    as is: no extra call per batch) decodes the ``count`` records of a v2 batch's decompressed
    ``payload`` (not called for control, aborted or empty batches), dropping those before
    ``min_offset``; ``log_append_time`` is the batch max timestamp with LogAppendTime, else None.
    With ``check_crcs`` off, ``check(out, mark, base_offset, last_offset, min_offset)`` then checks
    the offsets of the batch's records (those from ``mark``) rise within the batch.
    ``legacy(batch, magic, min_offset)`` decodes a magic v0/v1 batch and returns the offset after
    it. All three raise on bad data. ``mark()`` notes what ``out`` holds, ``truncate(mark)`` drops
    what was added since. ``after(mark)``, if given, runs after each batch decoded; a
    ``RecordError`` it returns (having dropped its failing records) stops the walk at its offset.
    With ``views``, an uncompressed payload is a memoryview into ``records`` instead of a copy.
    No compressed payload is decompressed past ``max_batch_bytes`` (the consumer's ``receive_buffer_max``):
    such a batch is a ``RecordTooLargeError`` at its base offset.
    """
    if records is None:
        records = b""
    view = memoryview(records)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    size = len(view)

    aborted = _aborted_queue(aborted_transactions) if committed else []
    aborted_index = 0
    aborted_pids: set[int] = set()

    next_offset = fetch_offset
    leader_epoch = -1
    error: RecordError | None = None
    pos = 0
    while size - pos >= LOG_OVERHEAD:
        base_offset, length = _LENGTH.unpack_from(view, pos)
        end = pos + LOG_OVERHEAD + length
        if length < _MIN_LENGTH:
            error = CorruptRecordError(
                topic, partition, base_offset, f"batch length {length} is below the minimum {_MIN_LENGTH}"
            )
            break
        if end > size:
            break  # the broker cut the last batch at the fetch size: fetch it next time
        batch_mark = mark()
        try:
            magic = view[pos + _MAGIC_OFFSET]
            if magic == 2:
                if length < HEADER_SIZE - LOG_OVERHEAD:
                    raise ValueError(f"batch length {length} is shorter than the v2 batch header")
                (
                    _,
                    _,
                    epoch,
                    _,
                    crc,
                    attributes,
                    last_offset_delta,
                    base_timestamp,
                    max_timestamp,
                    producer_id,
                    _,
                    _,
                    count,
                ) = HEADER.unpack_from(view, pos)
                if check_crcs and crc32c(view[pos + CRC_START : end]) != crc:
                    raise ValueError("CRC mismatch")
                if count < 0:
                    raise ValueError(f"negative record count {count}")
                last_offset = base_offset + last_offset_delta
                codec = attributes & CODEC_MASK
                skip = attributes & CONTROL_MASK  # transaction markers are not records
                if committed and producer_id >= 0:
                    # Java's CompletedFetch: transactions that began at or before this
                    # batch's last offset are aborted from here on for their producer,
                    # until that producer's ABORT marker.
                    while aborted_index < len(aborted) and aborted[aborted_index][0] <= last_offset:
                        aborted_pids.add(aborted[aborted_index][1])
                        aborted_index += 1
                    if skip:
                        if (
                            count
                            and control_type(payload(view, pos, end, codec, False, max_batch_bytes)) == CONTROL_ABORT
                        ):
                            aborted_pids.discard(producer_id)
                    elif attributes & TRANSACTIONAL_MASK and producer_id in aborted_pids:
                        skip = True  # still advances next_offset past it
                if count and not skip:
                    v2(
                        payload(view, pos, end, codec, views, max_batch_bytes),
                        count,
                        base_offset,
                        base_timestamp,
                        max_timestamp if attributes & TIMESTAMP_TYPE_MASK else None,
                        next_offset,
                        topic,
                        partition,
                        epoch,
                        out,
                    )
                    if not check_crcs:
                        check(out, batch_mark, base_offset, last_offset, next_offset)
                batch_next = last_offset + 1
                leader_epoch = epoch
            elif magic == 0 or magic == 1:
                batch_next = legacy(view[pos:end], magic, next_offset)
            else:
                raise ValueError(f"unknown magic {magic}")
        except _compression.TooLarge as exc:
            truncate(batch_mark)
            error = RecordTooLargeError(topic, partition, base_offset, f"the batch {exc}")
            break
        except Exception as exc:  # noqa: BLE001 - bad data must not escape (MemoryError too); the cause is kept
            truncate(batch_mark)
            error = CorruptRecordError(topic, partition, base_offset, f"corrupt batch: {_reason(exc)}")
            # the cause without its traceback, whose frames hold the batch's payload (up to
            # max_batch_bytes decompressed) for as long as the error is kept
            error.__cause__ = exc.with_traceback(None)
            break
        if after is not None:
            failed = after(batch_mark)
            if failed is not None:
                error = failed
                next_offset = failed.offset
                break
        if batch_next > next_offset:
            next_offset = batch_next
        pos = end

    if error is None and pos == 0 and size:
        error = RecordTooLargeError(
            topic,
            partition,
            fetch_offset,
            f"the fetch returned {size} bytes without one complete batch: the batch is larger than "
            "the partition fetch size (raise max_partition_fetch_bytes)",
        )
    return Walked(next_offset, pos, error, leader_epoch)


def payload(
    view: memoryview, pos: int, end: int, codec: int, views: bool = False, limit: int = _compression.DEFAULT_LIMIT
) -> bytes | memoryview:
    """The records part of the v2 batch at ``pos``, decompressed (to at most ``limit`` bytes); bytes, whose
    slices are bytes (with ``views``, uncompressed data stays a memoryview)."""
    data = view[pos + HEADER_SIZE : end]
    if codec == 0:
        return data if views else bytes(data)
    return _compression.decompress(codec, data, limit)


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
