"""One partition's decoded columns as plain buffers, and ``assemble``: the RecordBatch ``poll_batch()``
hands out (``SCHEMA``), made of slices of several partitions' columns.

A partition's columns (``PartitionColumns``) are numpy arrays and, where the compiled module is built,
the buffers of binary views over the fetched data: no Arrow object. A ``poll_batch()`` hands out slices
of a few fetches, and making Arrow arrays of every fetch, then again of every call, cost more than
decoding (py-spy, B on Apache Kafka: 40% of the application thread's samples in pyarrow's constructors
and validation); the Arrow arrays are now made once per call, by ``assemble``, for the rows it hands
out. Keys and values are copied there into plain ``binary`` arrays (``to_binary``): the one copy of
their bytes, after which nothing holds the fetched data.

Timestamps are int64 with -1 for none (null in the batch); ``timestamp_type`` (0 create time, 1 log
append time, a batch attribute) is kept as the offset ranges of LogAppendTime batches and made a column
by ``assemble``. Headers are ``HeaderViews`` where the compiled walk read them (spans over the fetched data,
as keys and values: a tracing header on every record is common, and Python pairs per record cost more than
the rest of the fetch), else ``(row, pairs)`` of the rows that have any.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from ..structs import TopicPartition
from . import _arrow

_to_binary: Any
try:  # fetch/_cdecode.c: binary_view buffers and binary arrays joined into one binary array
    from ._cdecode import to_binary as _to_binary
except ImportError:  # installed without a C compiler: keys and values are binary arrays, joined by Arrow
    _to_binary = None

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
# one partition's columns as PartitionColumns.to_batch gives them; assemble adds topic and partition
PARTITION_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("ms")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
    ]
)
SCHEMA = pa.schema(
    [
        pa.field("topic", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        *list(PARTITION_SCHEMA)[:2],
        pa.field("timestamp_type", pa.int32(), nullable=False),  # 0 create time, 1 log append time
        *list(PARTITION_SCHEMA)[2:],
    ]
)
_EMPTY = _arrow.empty(SCHEMA)
_NO_HEADERS = pa.StructArray.from_arrays(
    [_arrow.binary([], pa.string()), _arrow.binary([])], fields=list(HEADER_TYPE.value_type)
)


class Views(NamedTuple):
    """Keys or values as the buffers of an Arrow binary_view array over ``parts`` (``_cdecode.views``):
    nothing copied but values of up to 12 bytes; ``parts`` (the fetched payloads) are held alive."""

    validity: bytes | None  # None when nothing is null
    views: bytes  # 16 bytes per row
    nulls: int
    parts: Sequence


class HeaderViews(NamedTuple):
    """A partition's headers as spans (fetch/_cwalk.c's header_spans): row i's are entries
    ``first[i]:first[i + 1]`` of ``keys`` (UTF-8, checked) and ``values``."""

    first: np.ndarray  # int64, rows + 1
    keys: Views
    values: Views


class PartitionColumns:
    """One partition's decoded records, rows ``start:stop`` of its arrays: offsets and timestamps (int64,
    -1 no timestamp), keys and values (``Views``, or binary Arrow arrays where the compiled module is not
    built or declined), headers (``HeaderViews``, or ``[(row, pairs)]``) and the rows of LogAppendTime batches
    ``[(first, stop)]`` (indices into the arrays, marked by row: offsets need not rise in data a CRC
    passes). Slices share everything."""

    __slots__ = ("offsets", "timestamps", "keys", "values", "headers", "log_append", "start", "stop", "errors")

    def __init__(
        self,
        offsets: np.ndarray,
        timestamps: np.ndarray,
        keys: Views | pa.Array,
        values: Views | pa.Array,
        headers: HeaderViews | list[tuple[int, tuple]],
        log_append: list[tuple[int, int]],
        start: int = 0,
        stop: int | None = None,
        errors: dict[str, pa.Array] | None = None,
    ) -> None:
        self.offsets, self.timestamps, self.keys, self.values = offsets, timestamps, keys, values
        self.headers, self.log_append = headers, log_append
        self.start, self.stop = start, len(offsets) if stop is None else stop
        # typed keys or values (fetch/_typed.py) that could not be decoded, with on_error="null": "key" and
        # "value" to a string column of each row's error (null where it decoded)
        self.errors = errors or {}

    @property
    def num_rows(self) -> int:
        return self.stop - self.start

    def slice(self, start: int, length: int | None = None) -> PartitionColumns:
        """Rows ``start:start + length`` of these (to the end without a length; clipped), sharing the arrays."""
        lo = self.start + min(start, self.num_rows)
        hi = self.stop if length is None else min(lo + length, self.stop)
        return PartitionColumns(
            self.offsets, self.timestamps, self.keys, self.values, self.headers, self.log_append, lo, hi, self.errors
        )

    def offset_at(self, i: int) -> int:
        return int(self.offsets[self.start + i])

    def index_of(self, offset: int) -> int:
        """The row of the first record at or after ``offset``."""
        return int(np.searchsorted(self.offsets[self.start : self.stop], offset))

    def to_batch(self) -> pa.RecordBatch:
        """These rows as a RecordBatch of PARTITION_SCHEMA (keys and values copied, as assemble does)."""
        return assemble([(TopicPartition("", 0), self)]).select(PARTITION_SCHEMA.names)


def assemble(pieces: Sequence[tuple[TopicPartition, PartitionColumns]]) -> pa.RecordBatch:
    """One RecordBatch (SCHEMA) of partitions' rows, in the order given."""
    pieces = [(tp, c) for tp, c in pieces if c.num_rows]
    if not pieces:
        return _EMPTY
    cols = [c for _, c in pieces]
    lengths = [c.num_rows for c in cols]
    names: dict[str, int] = {}
    for tp, _ in pieces:
        names.setdefault(tp.topic, len(names))
    topic = pa.DictionaryArray.from_arrays(
        _arrow.array(np.repeat(np.array([names[tp.topic] for tp, _ in pieces], dtype=np.int32), lengths)),
        _arrow.binary(list(names), pa.string()),
    )
    partition = _arrow.array(np.repeat(np.array([tp.partition for tp, _ in pieces], dtype=np.int32), lengths))
    offsets = _joined([c.offsets[c.start : c.stop] for c in cols])
    timestamps = _joined([c.timestamps[c.start : c.stop] for c in cols])
    arrays = [
        topic,
        partition,
        _arrow.array(offsets),
        # no timestamp (magic v0, or a v2 producer that set none): null; no bitmap when none is missing
        _arrow.array(timestamps, pa.timestamp("ms"), mask=timestamps == -1),
        _timestamp_types(cols, offsets),
        _binary([(c.keys, c.start, c.stop) for c in cols]),
        _binary([(c.values, c.start, c.stop) for c in cols]),
        _header_column(cols, len(offsets)),
    ]
    if arrays[5].type == pa.binary() and arrays[6].type == pa.binary() and not cols[0].errors:
        return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)
    return _typed_batch(arrays, cols)


def typed_type(cols: PartitionColumns) -> tuple:
    """What a RecordBatch holding these rows is typed by: rows of other types go into another batch."""
    return (_type_of(cols.keys), _type_of(cols.values), tuple(sorted(cols.errors)))


def _type_of(data: Views | pa.Array) -> pa.DataType:
    return data.type if isinstance(data, pa.Array) else pa.binary()


def _typed_batch(arrays: list[pa.Array], cols: list[PartitionColumns]) -> pa.RecordBatch:
    """SCHEMA with key and value of the types their deserializers gave, and their error columns."""
    fields = list(SCHEMA)
    fields[5] = pa.field("key", arrays[5].type)
    fields[6] = pa.field("value", arrays[6].type)
    for origin in sorted(cols[0].errors):
        arrays.append(pa.concat_arrays([c.errors[origin].slice(c.start, c.num_rows) for c in cols]))
        fields.append(pa.field(f"{origin}_error", pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _timestamp_types(cols: list[PartitionColumns], offsets: np.ndarray) -> pa.Array:
    """0 (create time) or 1 (log append time) per row, from each partition's LogAppendTime rows."""
    types = np.zeros(len(offsets), dtype=np.int32)
    base = 0
    for c in cols:
        for first, stop in c.log_append:  # rows of the arrays: those of this slice
            lo, hi = max(first, c.start), min(stop, c.stop)
            if hi > lo:
                types[base + lo - c.start : base + hi - c.start] = 1
        base += c.num_rows
    return _arrow.array(types)


def _binary(pieces: list[tuple[Views | pa.Array, int, int]]) -> pa.Array:
    """One binary array of rows ``start:stop`` of each Views or binary array: the one copy of their bytes."""
    if not any(isinstance(data, Views) for data, _, _ in pieces):
        arrays = [data.slice(start, stop - start) for data, start, stop in pieces if isinstance(data, pa.Array)]
        return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
    spec = []
    for data, start, stop in pieces:
        if isinstance(data, Views):
            spec.append((0, data.validity, start, stop - start, data.views, data.parts))
        else:
            buffers = data.buffers()
            spec.append((1, buffers[0], data.offset + start, stop - start, buffers[1], buffers[2]))
    validity, offsets, joined, nulls = _to_binary(spec)
    n = sum(stop - start for _, start, stop in pieces)
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(joined)]
    return pa.Array.from_buffers(pa.binary(), n, buffers, null_count=nulls)


def _header_column(cols: list[PartitionColumns], n: int) -> pa.Array:
    counts = np.zeros(n + 1, dtype=np.int32)  # row i's count at i + 1
    keys: list[tuple[Views | pa.Array, int, int]] = []
    values: list[tuple[Views | pa.Array, int, int]] = []
    base = 0
    for c in cols:
        if isinstance(c.headers, HeaderViews):
            first = c.headers.first
            lo, hi = int(first[c.start]), int(first[c.stop])
            if hi > lo:
                counts[base + 1 : base + 1 + c.num_rows] = np.diff(first[c.start : c.stop + 1])
                keys.append((c.headers.keys, lo, hi))
                values.append((c.headers.values, lo, hi))
        elif c.headers:  # (row, pairs) by row: the rows of this slice found by bisection, not one by one
            lo, hi = bisect_left(c.headers, (c.start,)), bisect_left(c.headers, (c.stop,))
            if hi > lo:
                rows = c.headers[lo:hi]
                at = np.fromiter((row for row, _ in rows), dtype=np.int64, count=hi - lo)
                counts[base - c.start + 1 + at] = np.fromiter((len(p) for _, p in rows), dtype=np.int32, count=hi - lo)
                pairs = [pair for _, p in rows for pair in p]
                if pairs:
                    keys.append((_arrow.binary([k for k, _ in pairs], pa.string()), 0, len(pairs)))
                    values.append((_arrow.binary([v for _, v in pairs]), 0, len(pairs)))
        base += c.num_rows
    if not keys:  # the common case: n empty lists
        return pa.Array.from_buffers(HEADER_TYPE, n, [None, pa.py_buffer(counts)], children=[_NO_HEADERS])
    items = pa.StructArray.from_arrays([_string(_binary(keys)), _binary(values)], fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(_arrow.array(np.cumsum(counts, dtype=np.int32)), items, type=HEADER_TYPE)


def _string(keys: pa.Array) -> pa.Array:
    """Header keys joined by ``_binary`` as the string array they are (checked UTF-8 where they were read)."""
    if keys.type == pa.string():
        return keys
    return pa.Array.from_buffers(pa.string(), len(keys), keys.buffers(), null_count=keys.null_count, offset=keys.offset)
