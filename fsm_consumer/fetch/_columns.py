"""Fetched record data to Arrow columns, without a Python object per record.

``decode_partition_columns`` walks a Fetch response partition exactly like
``decode_partition`` (same CRC checks, codecs, control batches, read_committed,
fetch offset filtering, typed errors never raised) but its per-record loop only
appends integers: offset, timestamp and the start and end of key and value
inside the batch's (decompressed) records. Per record there is no bytes object
and no tuple, so nothing for the garbage collector to track either. The
columns are then made in C++:

* the decompressed batch payloads are joined into one buffer ``data``;
* the positions ``[key start, key end, value start, value end]`` of every record,
  in order, rise monotonically, so they are the offsets of one ``large_binary``
  "skeleton" array over ``data`` whose element ``4i`` is key ``i`` and ``4i + 2``
  value ``i`` (the odd elements are the bytes between them); one ``take`` per
  column gathers them into a contiguous ``binary`` array;
* null is told from empty without a flag: a null key or value has start == end
  and its length varint, the byte before it, is ``0x01`` (zigzag -1); an empty
  one has ``0x00`` there.

Headers (rare) are decoded to Python tuples and become a
``list<struct<key: string, value: binary>>`` column. Legacy (magic v0/v1) batches
go through the record decoder and are laid out the same way (a marker byte
before each key and value). Keys and values are the raw bytes: deserializers do
not apply here.

``assemble`` joins slices of several partitions into the RecordBatch that
``Consumer.poll_batch`` returns (``SCHEMA``).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from . import _decode_legacy
from ._decode_v2 import _ZIGZAG, _headers, varint
from ._errors import RecordError
from ._walk import READ_UNCOMMITTED, read_committed, walk
from ._records import TopicPartition

_FIELDS = 6  # ints per record in _Columns.ints
HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
# one partition's decoded columns; topic and partition are added by assemble()
PARTITION_SCHEMA = pa.schema([
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("ms")),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_TYPE),
])
SCHEMA = pa.schema([
    pa.field("topic", pa.dictionary(pa.int32(), pa.string()), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    *PARTITION_SCHEMA,
])
EMPTY_PARTITION = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in PARTITION_SCHEMA],
                                             schema=PARTITION_SCHEMA)


class DecodedColumns(NamedTuple):
    """Like ``DecodedPartition``, with ``columns`` (PARTITION_SCHEMA) instead of records."""

    columns: pa.RecordBatch
    next_offset: int
    bytes: int
    error: RecordError | None
    leader_epoch: int = -1


class _Columns:
    """What the per-record loops append to; truncated back to a mark when a batch fails."""

    __slots__ = ("ints", "headers", "payloads", "size", "bases", "filters", "log_append", "no_timestamp")

    def __init__(self) -> None:
        # per record: offset, timestamp, key start, key end, value start, value end (the
        # positions relative to the record's payload); one ``+=`` of a tuple per record costs a
        # sixth of six appends
        self.ints = array("q")
        self.headers: list[tuple[int, tuple]] = []   # (record index, headers) for records that have any
        self.payloads: list[bytes] = []
        self.size = 0                # bytes in payloads
        self.bases: list[tuple[int, int]] = []       # (first record, payload start) per payload
        self.filters: list[tuple[int, int]] = []     # (first record, min offset): batches starting before it
        self.log_append: list[tuple[int, int]] = []  # (first record, batch max timestamp)
        self.no_timestamp = False    # magic v0 data: timestamp -1 becomes null

    def __len__(self) -> int:
        return len(self.ints) // _FIELDS

    def mark(self) -> tuple:
        return (len(self), len(self.payloads), self.size, len(self.headers), len(self.bases),
                len(self.filters), len(self.log_append))

    def truncate(self, mark: tuple) -> None:
        n, p, size, h, b, f, la = mark
        del self.ints[_FIELDS * n:]
        del self.payloads[p:], self.headers[h:], self.bases[b:], self.filters[f:], self.log_append[la:]
        self.size = size

    def add_payload(self, payload: bytes, first: int | None = None) -> None:
        """``payload`` holds the records from ``first`` (default: the next one to be appended) on."""
        self.bases.append((len(self) if first is None else first, self.size))
        self.payloads.append(payload)
        self.size += len(payload)


def decode_partition_columns(
    topic: str,
    partition: int,
    records: bytes | memoryview | None,
    *,
    fetch_offset: int,
    isolation_level: str = READ_UNCOMMITTED,
    aborted_transactions: Iterable[Any] | None = None,
    check_crcs: bool = True,
) -> DecodedColumns:
    """``decode_partition`` to columns: the same records, ``next_offset``, ``bytes``, ``error``."""
    committed = read_committed(isolation_level)
    cols = _Columns()

    def legacy(batch: memoryview, magic: int, min_offset: int) -> int:
        records: list = []
        batch_next = _decode_legacy.decode_batch(batch, magic, check_crcs, min_offset, topic, partition,
                                                 records.append)
        _add_records(cols, records)
        if magic == 0 and records:
            cols.no_timestamp = True
        return batch_next

    walked = walk(topic, partition, records, fetch_offset, committed, aborted_transactions, check_crcs,
                  cols, _batch_v2, _check_offsets, legacy, cols.mark, cols.truncate)
    return DecodedColumns(_build(cols), *walked)


def _batch_v2(payload: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None,
              min_offset: int, _topic: str, _partition: int, _epoch: int, cols: _Columns) -> None:
    """The v2 batch callback of ``walk``: decode_records' signature, to columns."""
    first = len(cols)
    cols.add_payload(payload)
    _records_v2(payload, count, base_offset, base_timestamp, cols)
    if log_append_time is not None:
        cols.log_append.append((first, log_append_time))
    if base_offset < min_offset:
        cols.filters.append((first, min_offset))


def _check_offsets(cols: _Columns, mark: tuple, base_offset: int, last_offset: int, min_offset: int) -> None:
    """As decode_partition's: the batch's records it keeps must rise within the batch's range."""
    got = cols.ints[_FIELDS * mark[0]::_FIELDS]
    if base_offset < min_offset:
        got = [o for o in got if o >= min_offset]
    if got and (got[0] < base_offset or got[-1] > last_offset
                or any(b <= a for a, b in zip(got, got[1:]))):
        raise ValueError("record offsets are out of order or outside the batch's range")


def _records_v2(buf: bytes, count: int, base_offset: int, base_timestamp: int, cols: _Columns, *,
                _varint=varint, _zz=_ZIGZAG) -> None:
    """decode_records' loop, appending positions instead of building records."""
    ints: list[int] = []
    index = len(cols)
    pos = 0
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
        u = buf[pos + 1]  # after attributes
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
        u = buf[pos]
        if u == 1:  # null key: an empty span after 0x01
            pos += 1
            key_start = pos
        else:
            if u < 0x80:
                size = _zz[u]
                pos += 1
            else:
                size, pos = _varint(buf, pos)
            if size < 0:
                raise ValueError(f"negative key length {size} at offset {offset}")
            key_start = pos
            pos += size
        key_end = pos
        u = buf[pos]
        if u < 0x80:
            size = _zz[u]
            pos += 1
        else:
            v = buf[pos + 1]
            if v < 0x80:
                size = _zz[u + v * 128]
                pos += 2
            else:
                size, pos = _varint(buf, pos)
        value_start = pos
        if size >= 0:
            pos += size
        elif size != -1:
            raise ValueError(f"negative value length {size} at offset {offset}")
        ints += (offset, timestamp, key_start, key_end, value_start, pos)
        if buf[pos] == 0 and pos + 1 == end:
            pos = end
        else:
            if buf[pos] == 0:
                pos += 1
            else:
                headers, _, pos = _headers(buf, pos)
                if headers:
                    cols.headers.append((index, headers))
            if pos != end:
                raise ValueError(f"record at offset {offset} does not end where its length says")
        index += 1
    if pos != len(buf):
        raise ValueError(f"{len(buf) - pos} bytes left after the batch's {count} records")
    cols.ints += array("q", ints)


def _add_records(cols: _Columns, records: Sequence) -> None:
    """ConsumerRecords with bytes keys and values (legacy batches, or records already decoded) to columns."""
    if not records:
        return
    parts = []
    pos = 0
    ints = cols.ints
    first = index = len(cols)
    for r in records:
        ints += array("q", (r[3], r[4]))
        span = ints.append
        for field in (r[6], r[7]):
            if field is None:
                parts.append(b"\x01")
                pos += 1
                span(pos)
                span(pos)
            else:
                if not isinstance(field, (bytes, bytearray, memoryview)):
                    raise TypeError(f"columns hold bytes keys and values, got {type(field).__name__}")
                parts.append(b"\x00")
                parts.append(field)
                span(pos + 1)
                pos += 1 + len(field)
                span(pos)
        if r[8]:
            cols.headers.append((index, tuple(r[8])))
        index += 1
    cols.add_payload(b"".join(parts), first)


def _build(cols: _Columns) -> pa.RecordBatch:
    n = len(cols)
    if n == 0:
        return EMPTY_PARTITION
    data = cols.payloads[0] if len(cols.payloads) == 1 else b"".join(cols.payloads)
    ints = np.frombuffer(cols.ints, dtype=np.int64).reshape(n, _FIELDS)
    spans = ints[:, 2:].ravel()  # a contiguous copy
    if len(cols.bases) > 1 or cols.bases[0][1]:
        bounds = [b[0] for b in cols.bases[1:]] + [n]
        for (first, base), stop in zip(cols.bases, bounds):
            if base:
                spans[4 * first:4 * stop] += base
    skeleton = pa.Array.from_buffers(pa.large_binary(), 4 * n - 1, [None, pa.py_buffer(spans), pa.py_buffer(data)])
    raw = np.frombuffer(data, dtype=np.uint8)
    starts = np.arange(0, 4 * n, 4, dtype=np.int64)
    keys = _gather(skeleton, raw, spans, starts, n)
    values = _gather(skeleton, raw, spans, starts + 2, n)

    offsets = np.ascontiguousarray(ints[:, 0])
    timestamps = np.ascontiguousarray(ints[:, 1])
    if cols.log_append:
        for first, ts in cols.log_append:  # to the end of that batch: its records are contiguous
            stop = next((b[0] for b in cols.bases if b[0] > first), n)
            timestamps[first:stop] = ts
    ts_mask = (timestamps == -1) if cols.no_timestamp else None
    batch = pa.RecordBatch.from_arrays([
        pa.array(offsets),
        pa.array(timestamps, pa.timestamp("ms"), mask=ts_mask),
        keys,
        values,
        _header_column(cols.headers, n),
    ], schema=PARTITION_SCHEMA)
    if cols.filters:
        keep = np.ones(n, dtype=bool)
        bounds = [b[0] for b in cols.bases]
        for first, min_offset in cols.filters:
            stop = next((b for b in bounds if b > first), n)
            keep[first:stop] = offsets[first:stop] >= min_offset
        if not keep.all():
            batch = batch.filter(pa.array(keep))
    return batch


def _gather(skeleton: pa.Array, raw: np.ndarray, spans: np.ndarray, index: np.ndarray, n: int) -> pa.Array:
    """Elements ``index`` of the skeleton as a binary array; null where the span is empty after 0x01."""
    start = spans[index]
    null = (start == spans[index + 1]) & (raw[start - 1] == 1)
    if null.all():
        return pa.nulls(n, pa.binary())
    taken = pc.take(skeleton, pa.array(index, mask=null if null.any() else None))
    return taken.cast(pa.binary())


def _header_column(headers: list[tuple[int, tuple]], n: int) -> pa.Array:
    counts = np.zeros(n + 1, dtype=np.int32)
    keys: list[str] = []
    values: list[bytes | None] = []
    for index, pairs in headers:
        counts[index + 1] = len(pairs)
        for k, v in pairs:
            keys.append(k)
            values.append(v)
    items = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.binary())],
                                       fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(np.cumsum(counts, dtype=np.int32)), items, type=HEADER_TYPE)


def from_records(records: Sequence) -> pa.RecordBatch:
    """Columns (PARTITION_SCHEMA) of decoded ``ConsumerRecord``s with bytes keys and values."""
    cols = _Columns()
    _add_records(cols, records)
    return _build(cols)


def assemble(pieces: Sequence[tuple[TopicPartition, pa.RecordBatch]]) -> pa.RecordBatch:
    """One RecordBatch (SCHEMA) of partition slices, in the order given."""
    pieces = [(tp, b) for tp, b in pieces if b.num_rows]
    if not pieces:
        return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in SCHEMA], schema=SCHEMA)
    names: dict[str, int] = {}
    for tp, _ in pieces:
        names.setdefault(tp.topic, len(names))
    lengths = [b.num_rows for _, b in pieces]
    topic = pa.DictionaryArray.from_arrays(
        pa.array(np.repeat(np.array([names[tp.topic] for tp, _ in pieces], dtype=np.int32), lengths)),
        pa.array(list(names), pa.string()))
    partition = pa.array(np.repeat(np.array([tp.partition for tp, _ in pieces], dtype=np.int32), lengths))
    if len(pieces) == 1:
        rest = list(pieces[0][1].columns)
    else:
        rest = [pa.concat_arrays([b.column(i) for _, b in pieces]) for i in range(len(PARTITION_SCHEMA))]
    return pa.RecordBatch.from_arrays([topic, partition, *rest], schema=SCHEMA)
