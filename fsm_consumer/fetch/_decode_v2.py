"""Hand-written decoder of magic v2 records: the consumer's per-record hot path.

kafka-python's ``DefaultRecordBatch`` copies each batch, builds a
``DefaultRecord`` object and calls ``decode_varint`` 7 times per record, then
its fetcher copies that into a ``ConsumerRecord``. This loop reads varints
inline (one or two bytes cover nearly every field of real records), builds
the ``ConsumerRecord`` tuple directly and keeps rare cases (headers,
LogAppendTime, records before the fetch offset) out of the loop: about 4x
kafka-python's fetcher (tools/bench-decode). What remains is mostly the
record itself: a value slice plus a 13-field tuple cost ~0.65 us on the
2-core dev machine, so pure Python tops out near 1.4 M records/s there.

Record layout (KIP-98), all varints zigzag-encoded::

    length varint | attributes int8 | timestamp_delta varlong | offset_delta varint
    | key_length varint | key | value_length varint | value
    | header_count varint | [key_length varint | key utf-8 | value_length varint | value]

Corruption surfaces as ``ValueError`` or ``IndexError`` (reading past the
buffer); the caller turns either into a ``CorruptRecordError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

from ..structs import ConsumerRecord

# BaseOffset q, Length i, PartitionLeaderEpoch i, Magic b, CRC I, Attributes h,
# LastOffsetDelta i, BaseTimestamp q, MaxTimestamp q, ProducerId q,
# ProducerEpoch h, BaseSequence i, RecordCount i
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
CRC_START = 21  # the CRC covers attributes to the end of the batch
LOG_OVERHEAD = 12  # base offset + length: the part of a batch outside ``Length``

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

CONTROL_ABORT = 0

# The fewest bytes a record's length can claim: attributes, timestamp delta, offset delta, key length, value
# length and header count, a byte each. With the length's own byte a record takes at least MIN_RECORD_SIZE
# bytes, so a batch of n bytes holds at most n // MIN_RECORD_SIZE records: a larger count is corrupt.
MIN_RECORD_LENGTH = 6
MIN_RECORD_SIZE = MIN_RECORD_LENGTH + 1


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def check_count(count: int, size: int) -> None:
    """ValueError if ``count`` records cannot fit in ``size`` bytes: corrupt at once, in every scan, before
    anything is decoded or sized for a claim that large."""
    if count > size // MIN_RECORD_SIZE:
        raise ValueError(f"{count} records cannot fit in {size} bytes")


def varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Zigzag varint at ``pos`` (any length up to 64 bits): (value, next position)."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >> 64:  # a tenth byte's bits past the 64th: Java's reader drops them, so none is kept
                raise ValueError("varint wider than 64 bits")
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


# Zigzag values of one- and two-byte varints, so the hot loop does a list
# lookup (a specialised bytecode) instead of shifts and xors (generic ones):
# a one-byte varint u < 0x80 is _ZIGZAG[u]; a two-byte one (u >= 0x80, then
# v < 0x80) is _ZIGZAG[u + v * 128], which lands at 128 + its 14-bit value.
_ZIGZAG = [(i >> 1) ^ -(i & 1) for i in range(128)] + [(i >> 1) ^ -(i & 1) for i in range(128 * 128)]


def decode_records(
    buf: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    min_offset: int,
    topic: str,
    partition: int,
    leader_epoch: int,
    out: list,
    *,
    _new=tuple.__new__,
    _record=ConsumerRecord,
    _varint=varint,
    _zz=_ZIGZAG,
    _no_headers=(),
) -> None:
    """Decode ``count`` records filling ``buf`` exactly onto ``out``, dropping those before ``min_offset``.

    ``log_append_time`` is the batch max timestamp when the batch has
    LogAppendTime (it then stamps every record), else None.
    """
    check_count(count, len(buf))
    mark = len(out)
    append = out.append
    pos = 0
    wide = False  # a delta of three bytes or more: it may take a record's offset or timestamp past int64
    for _ in range(count):
        u = buf[pos]
        if u < 0x80:
            end = pos + 1 + _zz[u]
            pos += 1
        else:
            v = buf[pos + 1]
            if v < 0x80:
                end = pos + 2 + _zz[u + v * 128]
                pos += 2
            else:
                end, pos = _varint(buf, pos)
                end += pos
        u = buf[pos + 1]  # after attributes: int8, no bits defined for records
        if u < 0x80:
            timestamp = base_timestamp + _zz[u]
            pos += 2
        else:
            v = buf[pos + 2]
            if v < 0x80:
                timestamp = base_timestamp + _zz[u + v * 128]
                pos += 3
            else:
                timestamp, pos = _varint(buf, pos + 1)
                timestamp += base_timestamp
                wide = True
        u = buf[pos]
        if u < 0x80:
            offset = base_offset + _zz[u]
            pos += 1
        else:
            v = buf[pos + 1]
            if v < 0x80:
                offset = base_offset + _zz[u + v * 128]
                pos += 2
            else:
                offset, pos = _varint(buf, pos)
                offset += base_offset
                wide = True
        u = buf[pos]
        if u == 1:  # -1: null key, the common case
            pos += 1
            key = None
            key_size = -1
        else:
            if u < 0x80:
                key_size = _zz[u]
                pos += 1
            else:
                key_size, pos = _varint(buf, pos)
            if key_size >= 0:
                key = buf[pos : pos + key_size]
                pos += key_size
            elif key_size == -1:  # in more than one byte: still null, as Java's consumer reads it
                key = None
            else:
                raise ValueError(f"negative key length {key_size} at offset {offset}")
        u = buf[pos]
        if u < 0x80:
            value_size = _zz[u]
            pos += 1
        else:
            v = buf[pos + 1]
            if v < 0x80:
                value_size = _zz[u + v * 128]
                pos += 2
            else:
                value_size, pos = _varint(buf, pos)
        if value_size >= 0:
            value = buf[pos : pos + value_size]
            pos += value_size
        elif value_size == -1:
            value = None
        else:
            raise ValueError(f"negative value length {value_size} at offset {offset}")
        if buf[pos] == 0 and pos + 1 == end:
            pos = end
            append(
                _new(
                    _record,
                    (
                        topic,
                        partition,
                        leader_epoch,
                        offset,
                        timestamp,
                        0,
                        key,
                        value,
                        _no_headers,
                        None,
                        key_size,
                        value_size,
                        -1,
                    ),
                )
            )
        else:
            if buf[pos] == 0:
                pos += 1
                headers = _no_headers
                header_size = -1
            else:
                headers, header_size, pos = _headers(buf, pos)
            if pos != end:
                raise ValueError(f"record at offset {offset} does not end where its length says")
            append(
                _new(
                    _record,
                    (
                        topic,
                        partition,
                        leader_epoch,
                        offset,
                        timestamp,
                        0,
                        key,
                        value,
                        headers,
                        None,
                        key_size,
                        value_size,
                        header_size,
                    ),
                )
            )
    if pos != len(buf):
        raise ValueError(f"{len(buf) - pos} bytes left after the batch's {count} records")
    # Rare cases, fixed after the loop to keep them out of it.
    if wide or not _SAFE < base_offset < -_SAFE or not _SAFE < base_timestamp < -_SAFE:
        # near the int64 limits even a delta of one or two bytes may pass them
        check_int64(((r[3], r[4]) for r in out[mark:]), log_append_time is None)
    if log_append_time is not None:
        out[mark:] = [_new(_record, r[:4] + (log_append_time, 1) + r[6:]) for r in out[mark:]]
    if base_offset < min_offset:
        out[mark:] = [r for r in out[mark:] if r[3] >= min_offset]


# Below this far from the int64 limits a base plus a one- or two-byte delta (under 2**13) stays inside
_SAFE = INT64_MIN + (1 << 14)


def check_int64(records: Iterable[tuple[int, int]], timestamps: bool) -> None:
    """ValueError at the first of a batch's records (offset, timestamp) with an offset (or, with
    ``timestamps``, a timestamp: not with LogAppendTime, which replaces them) outside int64; checked after the
    batch's records are read, the same in every decoder, so all find the same fault first."""
    for offset, timestamp in records:
        if not INT64_MIN <= offset <= INT64_MAX:
            raise ValueError(f"record offset {offset} is outside int64")
        if timestamps and not INT64_MIN <= timestamp <= INT64_MAX:
            raise ValueError(f"record timestamp {timestamp} is outside int64")


def _headers(buf: bytes, pos: int) -> tuple[tuple, int, int]:
    count, pos = varint(buf, pos)
    if count < 0:
        raise ValueError(f"negative header count {count}")
    headers = []
    size = 0  # kafka-python's serialized_header_size: key and value bytes, no lengths
    for _ in range(count):
        key_size, pos = varint(buf, pos)
        if key_size < 0:
            raise ValueError(f"negative header key length {key_size}")
        key = buf[pos : pos + key_size]
        pos += key_size
        if pos > len(buf):
            raise ValueError("header key runs past the batch")
        value_size, pos = varint(buf, pos)
        if value_size >= 0:
            value = buf[pos : pos + value_size]
            pos += value_size
            size += key_size + value_size
        elif value_size == -1:
            value = None
            size += key_size
        else:
            raise ValueError(f"negative header value length {value_size}")
        try:
            headers.append((key.decode(), value))
        except UnicodeDecodeError:
            raise ValueError("header key is not UTF-8") from None
    return tuple(headers), size, pos


def control_type(buf: bytes | memoryview) -> int:
    """The type of a control batch's (first) record: its key is int16 version, int16 type."""
    length, pos = varint(buf, 0)
    end = pos + length
    _, pos = varint(buf, pos + 1)  # timestamp delta, after attributes
    _, pos = varint(buf, pos)  # offset delta
    key_size, pos = varint(buf, pos)
    if key_size < 4 or pos + key_size > end:
        raise ValueError(f"control record key is {key_size} bytes, needs 4")
    return struct.unpack_from(">h", buf, pos + 2)[0]


# The compiled decoder (fetch/_cdecode.c, built when the package is installed with a C compiler at hand):
# the common records (no headers) of a batch, 3-4x the loop above; it declines the rest (headers, any
# fault) and the loop then decodes the batch, wording any error, so the records and errors are the same.
_compiled: Callable[..., Any] | None
try:
    from ._cdecode import decode_records as _compiled
except ImportError:  # no compiler at install time: the loop decodes every record
    _compiled = None


def decode_records_compiled(buf: bytes | memoryview, *args: Any) -> None:
    """``decode_records(buf, *args)`` (its arguments, in its order) through the compiled decoder, the loop
    where it declines. ``buf`` may be a view of the fetched data (the compiled decoder copies each key and
    value out); the loop gets bytes, whose slices are bytes."""
    assert _compiled is not None
    if _compiled(buf, *args, ConsumerRecord) is NotImplemented:
        decode_records(bytes(buf), *args)


#: what decode_partition uses
best_decode_records = decode_records if _compiled is None else decode_records_compiled
