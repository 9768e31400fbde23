"""Fetched record data to Arrow columns, without a Python object per record.

``decode_partition_columns`` gives the same records, ``next_offset``, ``bytes``
and ``error`` as ``decode_partition`` (same CRC checks, codecs, control batches,
read_committed, fetch offset filtering, typed errors never raised), as columns:

* the fast path walks the batches with ``_vector.scan`` (the only per-record
  Python loop: where each record starts) and then parses every field of every
  record of the fetch with numpy (``_vector.parse``);
* if that declines (a fault, a legacy batch, a value near the int64 limits),
  the exact per-record loop of ``_positions`` decodes the fetch instead and
  finds and words the error.

Either way the result is the keys' and values' spans in the joined
(decompressed) payloads, made into columns without a Python object per record:

* where the compiled module is built (``fetch/_cdecode.c``), ``views`` makes each
  column a ``binary_view`` array whose data buffers are the payloads themselves
  (uncompressed ones are views of the fetched frame): nothing is copied at decode
  but values of up to 12 bytes; ``assemble`` copies the rows ``poll_batch`` hands
  out into plain ``binary`` arrays once (``to_binary``), where concatenating
  gathered arrays copied every byte twice more (a join, a gather);
* else the spans ``[key start, key end, value start, value end]`` of every record,
  in order, rise monotonically, so they are the offsets of one ``large_binary``
  "skeleton" array over the data whose element ``4i`` is key ``i`` and ``4i + 2``
  value ``i`` (the odd elements are the bytes between them); one ``take`` per
  column gathers them into a contiguous ``binary`` array;
* null is told from empty without a flag: a null key or value has start == end
  and its length varint, the byte before it, is ``0x01`` (zigzag -1); an empty
  one has ``0x00`` there.

Records of a batch that began before the fetch offset are dropped from the spans
before any column is made (no Arrow filter: its compute kernels cost the process
tens of MB, and views have no ``take``).

Headers (rare) are decoded to Python tuples and become a
``list<struct<key: string, value: binary>>`` column. Keys and values are the
raw bytes: deserializers do not apply here.

``assemble`` joins slices of several partitions into the RecordBatch that
``Consumer.poll_batch`` returns (``SCHEMA``), adding ``timestamp_type`` (0 create time, 1 log
append time: a batch attribute). A partition's columns carry it not as a column but as the offset
ranges of its LogAppendTime batches, in their schema metadata (``LOG_APPEND_KEY``, a few bytes per
fetch, kept by slices); ``assemble`` turns those into the column with one ``searchsorted`` per range.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from ..structs import TopicPartition
from . import _arrow, _vector
from ._errors import RecordError
from ._positions import _add_records, _Columns, columns_of, decode_exact
from ._walk import READ_UNCOMMITTED, read_committed, walk

_FIELDS = 7  # per record from the compiled scan: start, offset delta, timestamp delta, key and value spans
_scan_fields: Any
_views: Any
_to_binary: Any
try:  # the compiled scan (fetch/_cdecode.c): scan and parse of a batch in one pass, no Python per record
    from ._cdecode import scan_fields as _scan_fields
    from ._cdecode import to_binary as _to_binary
    from ._cdecode import views as _views
except ImportError:  # installed without a C compiler
    _scan_fields = _views = _to_binary = None
if not hasattr(pa, "binary_view"):  # pyarrow before 15
    _views = None

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
# one partition's decoded columns; topic and partition are added by assemble()
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
# schema metadata of a partition's columns: int64 pairs [first offset, last offset] of its LogAppendTime batches
LOG_APPEND_KEY = b"fsm.log_append_offsets"
EMPTY_PARTITION = _arrow.empty(PARTITION_SCHEMA)
_NO_HEADERS = pa.StructArray.from_arrays(
    [_arrow.binary([], pa.string()), _arrow.binary([])], fields=list(HEADER_TYPE.value_type)
)


class DecodedColumns(NamedTuple):
    """Like ``DecodedPartition``, with ``columns`` (PARTITION_SCHEMA) instead of records."""

    columns: pa.RecordBatch
    next_offset: int
    bytes: int
    error: RecordError | None
    leader_epoch: int = -1


class _Starts:
    """What the fast path's walk notes: record starts and per-batch facts; truncated to a mark on a fault."""

    __slots__ = (
        "starts",
        "fields",
        "compiled",
        "batches",
        "payloads",
        "size",
        "bases",
        "filters",
        "log_append",
        "headers",
        "declined",
    )

    def __init__(self) -> None:
        # Batches scanned by the compiled scan come first, as _FIELDS int64 per record in ``fields``; from
        # the first batch it declines (headers, a fault) on, the Python scan notes starts only, and
        # _fast_columns parses the whole fetch from the starts of both
        self.fields = bytearray()
        self.compiled = _scan_fields is not None
        self.starts = array("q")  # each record's start in the joined payloads (the Python scan's)
        self.batches: list[tuple[int, int, int, int]] = []  # (count, base offset, base timestamp, last offset)
        self.payloads: list[bytes | memoryview] = []  # uncompressed ones are views of the fetched data
        self.size = 0
        self.bases: list[tuple[int, int]] = []  # (first record, payload start), as _Columns
        self.filters: list[tuple[int, int]] = []  # (first record, min offset)
        self.log_append: list[tuple[int, int]] = []  # (first record, batch max timestamp)
        self.headers: list[tuple[int, tuple]] = []  # filled by parse
        self.declined = False  # an extreme base: the exact loop decodes the fetch

    def records(self) -> int:
        return len(self.fields) // (8 * _FIELDS) + len(self.starts)

    def mark(self) -> tuple:
        return (
            len(self.starts),
            len(self.fields),
            len(self.batches),
            len(self.payloads),
            self.size,
            len(self.filters),
            len(self.log_append),
        )

    def truncate(self, mark: tuple) -> None:
        n, nf, b, p, size, f, la = mark
        del self.starts[n:], self.fields[nf:], self.batches[b:], self.payloads[p:], self.bases[p:], self.filters[f:]
        del self.log_append[la:]
        self.size = size


def _scan_batch(
    payload: bytes | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    min_offset: int,
    _topic: str,
    _partition: int,
    _epoch: int,
    out: _Starts,
) -> None:
    """The v2 batch callback of ``walk`` (decode_records' signature): note the record starts."""
    first = out.records()
    if not out.compiled or _scan_fields(payload, count, out.size, out.fields) is NotImplemented:
        out.compiled = False
        _vector.scan(payload, count, out.size, out.starts)
    out.bases.append((first, out.size))
    out.payloads.append(payload)
    out.size += len(payload)
    if abs(base_offset) >= _vector.LIMIT or abs(base_timestamp) >= _vector.LIMIT:
        out.declined = True
    out.batches.append((count, base_offset, base_timestamp, base_offset))
    if log_append_time is not None:
        out.log_append.append((first, log_append_time))
    if base_offset < min_offset:
        out.filters.append((first, min_offset))


def _note_last_offset(out: _Starts, _mark: Any, base_offset: int, last_offset: int, _min_offset: int) -> None:
    """The check callback (check_crcs off): the batch's records are checked against this after parsing."""
    count, base, ts, _ = out.batches[-1]
    out.batches[-1] = (count, base, ts, last_offset)


def _decline(_batch: memoryview, _magic: int, _min_offset: int) -> int:
    raise _Declined


class _Declined(Exception):
    """A legacy batch: the fast path leaves the fetch to the exact loop."""


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
    out = _Starts()
    walked = walk(
        topic,
        partition,
        records,
        fetch_offset,
        committed,
        aborted_transactions,
        check_crcs,
        out,
        _scan_batch,
        _note_last_offset,
        _decline,
        out.mark,
        out.truncate,
        views=True,
    )
    if walked.error is None and not out.declined:
        if not out.records():
            return DecodedColumns(EMPTY_PARTITION, *walked)
        columns = _fast_columns(out, check_crcs)
        if columns is not None:
            return DecodedColumns(columns, *walked)
    cols, walked = decode_exact(topic, partition, records, fetch_offset, committed, aborted_transactions, check_crcs)
    if not len(cols):
        return DecodedColumns(EMPTY_PARTITION, *walked)
    return DecodedColumns(build(cols, *columns_of(cols)), *walked)


def _fast_columns(out: _Starts, check_crcs: bool) -> pa.RecordBatch | None:
    data = None  # the payloads joined, where the Python parse needs them
    compiled = np.frombuffer(out.fields, dtype=np.int64).reshape(-1, _FIELDS)
    if not out.starts:  # every batch scanned by the compiled scan: its fields are checked and complete
        fields: _vector.Fields | None = _vector.Fields(
            compiled[:, 1], compiled[:, 2], np.ascontiguousarray(compiled[:, 3:]).ravel(), []
        )
    else:
        data = out.payloads[0] if len(out.payloads) == 1 else b"".join(out.payloads)
        starts = np.frombuffer(out.starts, dtype=np.int64)
        if len(compiled):
            starts = np.concatenate([compiled[:, 0], starts])
        fields = _vector.parse(data, starts)
    if fields is None:
        return None
    counts = [b[0] for b in out.batches]
    offsets = np.repeat(np.array([b[1] for b in out.batches], dtype=np.int64), counts) + fields.offset_deltas
    timestamps = np.repeat(np.array([b[2] for b in out.batches], dtype=np.int64), counts)
    timestamps += fields.timestamp_deltas
    if not check_crcs and not _offsets_fit(out, offsets, counts):
        return None
    out.headers = fields.headers
    return build(out, offsets, timestamps, fields.spans, data)


def _offsets_fit(out: _Starts, offsets: np.ndarray, counts: list[int]) -> bool:
    """decode_exact's check without CRCs: each batch's kept records rise within its range."""
    keep = _kept(out, offsets)
    batch = np.repeat(np.arange(len(counts)), counts)[keep]
    kept = offsets[keep]
    low = np.repeat(np.array([b[1] for b in out.batches], dtype=np.int64), counts)[keep]
    high = np.repeat(np.array([b[3] for b in out.batches], dtype=np.int64), counts)[keep]
    rising = (np.diff(kept) > 0) | (np.diff(batch) != 0)
    return bool((kept >= low).all() and (kept <= high).all() and rising.all())


def build(
    cols: Any,
    offsets: np.ndarray,
    timestamps: np.ndarray,
    spans: np.ndarray,
    data: bytes | memoryview | None = None,
) -> pa.RecordBatch:
    """One partition's columns from the records' offsets, timestamps and spans in ``cols``' joined payloads
    (``data``, when the caller has joined them). Keys and values are binary_view arrays over the payloads
    where the compiled module is built: nothing copied until ``assemble`` copies the rows it hands out
    into binary ones; else binary arrays gathered by Arrow."""
    n = len(offsets)
    for first, ts in cols.log_append:  # to the end of that batch: its records are contiguous
        timestamps[first : _batch_end(cols, first, n)] = ts
    log_append = [
        (int(offsets[first]), int(offsets[stop - 1]))
        for first, _ in cols.log_append
        if (stop := _batch_end(cols, first, n)) > first
    ]
    headers = cols.headers
    if cols.filters:  # records of a batch that began before the fetch offset: dropped before any column
        keep = _kept(cols, offsets)
        if not keep.all():
            index = np.cumsum(keep) - 1  # a kept record's row
            offsets, timestamps = offsets[keep], timestamps[keep]
            spans = np.ascontiguousarray(spans.reshape(-1, 4)[keep]).ravel()
            headers = [(int(index[i]), pairs) for i, pairs in headers if keep[i]]
            n = len(offsets)
    keys = values = None
    if _views is not None:
        parts, starts = ((data,), _ZERO_START) if data is not None else _parts(cols)
        keys = _as_views(parts, starts, spans, 0, n)
        values = None if keys is None else _as_views(parts, starts, spans, 2, n)
    if keys is None or values is None:
        if data is None:
            data = cols.payloads[0] if len(cols.payloads) == 1 else b"".join(cols.payloads)
        keys = _gather(data, spans, 0, n)
        values = _gather(data, spans, 2, n)
    ts_mask = timestamps == -1  # no timestamp (magic v0, or a v2 producer that set none): null
    if not ts_mask.any():
        ts_mask = None
    batch = pa.RecordBatch.from_arrays(
        [
            _arrow.array(offsets),
            _arrow.array(timestamps, pa.timestamp("ms"), mask=ts_mask),
            keys,
            values,
            _header_column(headers, n),
        ],
        names=PARTITION_SCHEMA.names,
    )
    return _with_log_append(batch, log_append)


def _with_log_append(batch: pa.RecordBatch, ranges: list[tuple[int, int]]) -> pa.RecordBatch:
    """``batch`` noting the offset ranges of its records that have LogAppendTime timestamps."""
    if not ranges:
        return batch
    return batch.replace_schema_metadata({LOG_APPEND_KEY: np.array(ranges, dtype=np.int64).tobytes()})


def timestamp_types(columns: pa.RecordBatch) -> pa.Array:
    """The timestamp type (int32: 0 create time, 1 log append time) of each row of a partition's columns."""
    types = np.zeros(columns.num_rows, dtype=np.int32)
    meta = columns.schema.metadata
    ranges = meta.get(LOG_APPEND_KEY) if meta else None
    if ranges and columns.num_rows:
        offsets = _arrow.numpy(columns.column(0))
        for lo, hi in np.frombuffer(ranges, dtype=np.int64).reshape(-1, 2):
            types[np.searchsorted(offsets, lo, "left") : np.searchsorted(offsets, hi, "right")] = 1
    return _arrow.array(types)


def _batch_end(cols: Any, first: int, n: int) -> int:
    """The record index after the batch (payload) whose first record is ``first``."""
    return next((b[0] for b in cols.bases if b[0] > first), n)


def _kept(cols: Any, offsets: np.ndarray) -> np.ndarray:
    """Which records to keep: those of batches starting before the fetch offset that lie before it are not."""
    keep = np.ones(len(offsets), dtype=bool)
    for first, min_offset in cols.filters:
        stop = _batch_end(cols, first, len(offsets))
        keep[first:stop] = offsets[first:stop] >= min_offset
    return keep


_ZERO_START = np.zeros(1, dtype=np.int64)


def _parts(cols: Any) -> tuple[list, np.ndarray]:
    """The payloads and where each starts in them joined (the spans' coordinates)."""
    return cols.payloads, np.array([start for _, start in cols.bases], dtype=np.int64)


def _as_views(parts: Sequence, starts: np.ndarray, spans: np.ndarray, field: int, n: int) -> pa.Array | None:
    """The keys (field 0) or values (field 2) as a binary_view array over ``parts``, copying nothing but
    values of up to 12 bytes; None where the compiled module declines (a span outside its payload)."""
    got = _views(parts, starts, spans, field)
    if got is NotImplemented:
        return None
    validity, views, nulls = got
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(views)]
    return pa.Array.from_buffers(pa.binary_view(), n, buffers + [pa.py_buffer(p) for p in parts], null_count=nulls)


def _gather(data: bytes | memoryview, spans: np.ndarray, field: int, n: int) -> pa.Array:
    """The keys (field 0) or values (field 2) of the n records in ``data`` as a binary array, by Arrow; null
    where the span is empty after 0x01 (the one-byte length -1)."""
    import pyarrow.compute as pc  # here, not at import: its kernels' set-up costs the process 8-44 MB

    raw = np.frombuffer(data, dtype=np.uint8)
    index = np.arange(field, 4 * n, 4, dtype=np.int64)
    start = spans[index]
    null = (start == spans[index + 1]) & (raw[start - 1] == 1)
    if null.all():  # every one null, or none left
        return pa.nulls(n, pa.binary())
    skeleton = pa.Array.from_buffers(pa.large_binary(), 4 * n - 1, [None, pa.py_buffer(spans), pa.py_buffer(data)])
    taken = pc.take(skeleton, _arrow.array(index, mask=null))
    return taken.cast(pa.binary())


def _binary(arrays: list[pa.Array]) -> pa.Array:
    """One binary array of binary and binary_view ones (slices of them): the one copy of the rows' bytes."""
    if all(a.type == pa.binary() for a in arrays):
        return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
    pieces = []
    for a in arrays:
        buffers = a.buffers()
        if a.type == pa.binary():
            pieces.append((1, buffers[0], a.offset, len(a), buffers[1], buffers[2]))
        else:
            pieces.append((0, buffers[0], a.offset, len(a), buffers[1], buffers[2:]))
    validity, offsets, data, nulls = _to_binary(pieces)
    n = sum(len(a) for a in arrays)
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), n, buffers, null_count=nulls)


def _header_column(headers: list[tuple[int, tuple]], n: int) -> pa.Array:
    if not headers:  # the common case: n empty lists
        offsets = pa.py_buffer(np.zeros(n + 1, np.int32))
        return pa.Array.from_buffers(HEADER_TYPE, n, [None, offsets], children=[_NO_HEADERS])
    counts = np.zeros(n + 1, dtype=np.int32)
    keys: list[str] = []
    values: list[bytes | None] = []
    for index, pairs in headers:
        counts[index + 1] = len(pairs)
        for k, v in pairs:
            keys.append(k)
            values.append(v)
    items = pa.StructArray.from_arrays(
        [_arrow.binary(keys, pa.string()), _arrow.binary(values)], fields=list(HEADER_TYPE.value_type)
    )
    return pa.ListArray.from_arrays(_arrow.array(np.cumsum(counts, dtype=np.int32)), items, type=HEADER_TYPE)


def from_records(records: Sequence) -> pa.RecordBatch:
    """Columns (PARTITION_SCHEMA) of decoded ``ConsumerRecord``s with bytes keys and values."""
    cols = _Columns()
    _add_records(cols, records)
    if not len(cols):
        return EMPTY_PARTITION
    batch = build(cols, *columns_of(cols))
    return _with_log_append(batch, [(r[3], r[3]) for r in records if r[5] == 1])


def assemble(pieces: Sequence[tuple[TopicPartition, pa.RecordBatch]]) -> pa.RecordBatch:
    """One RecordBatch (SCHEMA) of partition slices, in the order given."""
    pieces = [(tp, b) for tp, b in pieces if b.num_rows]
    if not pieces:
        return _arrow.empty(SCHEMA)
    names: dict[str, int] = {}
    for tp, _ in pieces:
        names.setdefault(tp.topic, len(names))
    lengths = [b.num_rows for _, b in pieces]
    topic = pa.DictionaryArray.from_arrays(
        _arrow.array(np.repeat(np.array([names[tp.topic] for tp, _ in pieces], dtype=np.int32), lengths)),
        _arrow.binary(list(names), pa.string()),
    )
    partition = _arrow.array(np.repeat(np.array([tp.partition for tp, _ in pieces], dtype=np.int32), lengths))
    rest = []
    for i, name in enumerate(PARTITION_SCHEMA.names):
        arrays = [b.column(i) for _, b in pieces]
        if name in ("key", "value"):
            rest.append(_binary(arrays))
        else:
            rest.append(arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays))
    types = [timestamp_types(b) for _, b in pieces]
    types = types[0] if len(types) == 1 else pa.concat_arrays(types)
    return pa.RecordBatch.from_arrays([topic, partition, *rest[:2], types, *rest[2:]], schema=SCHEMA)
