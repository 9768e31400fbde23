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
(decompressed) payloads, made into a ``PartitionColumns`` (``_assemble``: numpy
arrays and buffers, no Arrow object until ``assemble``) without a Python object
per record:

* where the compiled module is built (``fetch/_cdecode.c``), ``views`` gives each
  column as the buffers of a ``binary_view`` array whose data buffers are the
  payloads themselves (uncompressed ones are views of the fetched frame): nothing
  is copied at decode but values of up to 12 bytes; ``assemble`` copies the rows
  ``poll_batch`` hands out into plain ``binary`` arrays once (``to_binary``), where
  concatenating gathered arrays copied every byte twice more (a join, a gather);
* else the spans ``[key start, key end, value start, value end]`` of every record,
  in order, rise monotonically, so they are the offsets of one ``large_binary``
  "skeleton" array over the data whose element ``4i`` is key ``i`` and ``4i + 2``
  value ``i`` (the odd elements are the bytes between them); one ``take`` per
  column gathers them into a contiguous ``binary`` array;
* a null key or value is said by its span, never read from the bytes: its end
  is one before its start (its length, -1, however the varint wrote it); an
  empty one has start == end.

Records of a batch that began before the fetch offset are dropped from the spans
before any column is made (no Arrow filter: its compute kernels cost the process
tens of MB, and views have no ``take``).

Headers are made a ``list<struct<key: string, value: binary>>`` column by
``assemble``: from their spans (``HeaderViews``) where the compiled walk took the
fetch, else from Python pairs. Keys and values are the raw bytes: deserializers do
not apply here.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from . import _arrow, _vector
from ._assemble import PARTITION_SCHEMA, SCHEMA, HeaderViews, PartitionColumns, Views, assemble
from ._compression import DEFAULT_LIMIT
from ._errors import RecordError
from ._positions import _add_records, _Columns, columns_of, decode_exact
from ._walk import READ_UNCOMMITTED, read_committed, walk

__all__ = ["PARTITION_SCHEMA", "SCHEMA", "EMPTY_PARTITION", "DecodedColumns", "assemble", "decode_partition_columns"]

_scan_fields: Any
_views: Any
_walk_columns: Any
try:  # the compiled scan (fetch/_cdecode.c): scan and parse of a batch in one pass, no Python per record
    from ._cdecode import scan_fields as _scan_fields
    from ._cdecode import views as _views
    from ._cwalk import walk_columns as _walk_columns  # the walk and scan of a whole fetch in one call
except ImportError:  # installed without a C compiler
    _scan_fields = _views = _walk_columns = None

_NO_ROWS = np.empty(0, dtype=np.int64)
EMPTY_PARTITION = PartitionColumns(_NO_ROWS, _NO_ROWS, pa.nulls(0, pa.binary()), pa.nulls(0, pa.binary()), [], [])


class DecodedColumns(NamedTuple):
    """Like ``DecodedPartition``, with ``columns`` instead of records."""

    columns: PartitionColumns
    next_offset: int
    bytes: int
    error: RecordError | None
    leader_epoch: int = -1


class _Starts:
    """What the fast path's walk notes: record starts and per-batch facts; truncated to a mark on a fault."""

    __slots__ = (
        "starts",
        "cstarts",
        "coffsets",
        "ctimestamps",
        "cspans",
        "compiled",
        "batches",
        "payloads",
        "size",
        "bases",
        "filters",
        "log_append",
        "headers",
        "declined",
        "log_append_rows",
    )

    def __init__(self) -> None:
        # Batches scanned by the compiled scan come first, as native int64 per record: starts, offsets,
        # timestamps, and 4 spans; from the first batch it declines (headers, a fault) on, the Python scan
        # notes starts only, and _fast_columns parses the whole fetch from the starts of both
        self.cstarts, self.coffsets, self.ctimestamps, self.cspans = bytearray(), bytearray(), bytearray(), bytearray()
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
        self.log_append_rows: list[tuple[int, int]] = []  # legacy messages' (none here: they go to the exact loop)

    def records(self) -> int:
        return len(self.coffsets) // 8 + len(self.starts)

    def mark(self) -> tuple:
        return (
            len(self.starts),
            len(self.coffsets) // 8,
            len(self.batches),
            len(self.payloads),
            self.size,
            len(self.filters),
            len(self.log_append),
        )

    def truncate(self, mark: tuple) -> None:
        n, nc, b, p, size, f, la = mark
        del self.starts[n:], self.batches[b:], self.payloads[p:], self.bases[p:], self.filters[f:], self.log_append[la:]
        del self.cstarts[8 * nc :], self.coffsets[8 * nc :], self.ctimestamps[8 * nc :], self.cspans[32 * nc :]
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
    columns = (out.cstarts, out.coffsets, out.ctimestamps, out.cspans)
    if (
        not out.compiled
        or _scan_fields(payload, count, out.size, base_offset, base_timestamp, *columns) is NotImplemented
    ):
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
    max_batch_bytes: int = DEFAULT_LIMIT,
) -> DecodedColumns:
    """``decode_partition`` to columns: the same records, ``next_offset``, ``bytes``, ``error``.

    Memory goes with the records present: a count or length the bytes cannot hold fails the partition
    (both scans bound a batch's records by its bytes), and a MemoryError in a fast path hands the fetch to
    the exact walk, which fails the batch it could not decode, as any other fault."""
    committed = read_committed(isolation_level)
    if _walk_columns is not None and records is not None and not (committed and aborted_transactions):
        try:
            walked_columns = _walked_columns(records, fetch_offset, committed, check_crcs)
        except MemoryError:
            walked_columns = None
        if walked_columns is not None:
            return walked_columns
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
        max_batch_bytes=max_batch_bytes,
    )
    if walked.error is None and not out.declined:
        if not out.records():
            return DecodedColumns(EMPTY_PARTITION, *walked)
        try:
            columns = _fast_columns(out, check_crcs)
        except MemoryError:
            columns = None
        if columns is not None:
            return DecodedColumns(columns, *walked)
    del out  # the fast path's arrays, before the exact walk makes its own
    cols, walked = decode_exact(
        topic, partition, records, fetch_offset, committed, aborted_transactions, check_crcs, max_batch_bytes
    )
    if not len(cols):
        return DecodedColumns(EMPTY_PARTITION, *walked)
    return DecodedColumns(build(cols, *columns_of(cols)), *walked)


class _Walked:
    """What ``build`` reads of a compiled walk: its headers, nothing left to apply (it dropped the records
    below the fetch offset and gave LogAppendTime batches their time)."""

    log_append = filters = log_append_rows = ()

    def __init__(self, headers: HeaderViews | list) -> None:
        self.headers = headers


def _walked_columns(
    records: bytes | memoryview, fetch_offset: int, committed: bool, check_crcs: bool
) -> DecodedColumns | None:
    """The walk of ``records`` and the scan of their batches in one compiled call (fetch/_cwalk.c), no
    Python per batch: the same columns, ``next_offset``, ``bytes`` and leader epoch as the walk and scan
    below; None where it declines (anything but plain v2 batches, any fault: the walk below words it)."""
    offsets, timestamps, spans = bytearray(), bytearray(), bytearray()
    got = _walk_columns(records, fetch_offset, committed, check_crcs, crc32c, offsets, timestamps, spans)
    if got is NotImplemented:
        return None
    next_offset, size, leader_epoch, scanned, log_append, headers = got
    if not scanned:
        return DecodedColumns(EMPTY_PARTITION, next_offset, size, None, leader_epoch)
    int64 = np.int64
    # spans are positions in records itself: its batches' payloads are views of it, one data buffer
    header_views: HeaderViews | list = []
    if headers is not None:  # (each row's first header, the headers' spans)
        pair = _pair_views((records,), _ZERO_START, np.frombuffer(headers[1], dtype=int64))
        if pair is None:
            return None
        header_views = HeaderViews(np.frombuffer(headers[0], dtype=int64), *pair)
    columns = build(
        _Walked(header_views),
        np.frombuffer(offsets, dtype=int64),
        np.frombuffer(timestamps, dtype=int64),
        np.frombuffer(spans, dtype=int64),
        records,
    )
    columns.log_append = log_append
    return DecodedColumns(columns, next_offset, size, None, leader_epoch)


def _fast_columns(out: _Starts, check_crcs: bool) -> PartitionColumns | None:
    data = None  # the payloads joined, where the Python parse needs them
    counts = [b[0] for b in out.batches]
    if not out.starts:  # every batch scanned by the compiled scan: its fields are checked and complete
        offsets = np.frombuffer(out.coffsets, dtype=np.int64)
        timestamps = np.frombuffer(out.ctimestamps, dtype=np.int64)  # writable: a bytearray's
        spans = np.frombuffer(out.cspans, dtype=np.int64)
    else:
        data = out.payloads[0] if len(out.payloads) == 1 else b"".join(out.payloads)
        starts = np.frombuffer(out.starts, dtype=np.int64)
        if out.cstarts:
            starts = np.concatenate([np.frombuffer(out.cstarts, dtype=np.int64), starts])
        fields = _vector.parse(data, starts)
        if fields is None:
            return None
        offsets = np.repeat(np.array([b[1] for b in out.batches], dtype=np.int64), counts) + fields.offset_deltas
        timestamps = np.repeat(np.array([b[2] for b in out.batches], dtype=np.int64), counts)
        timestamps += fields.timestamp_deltas
        spans = fields.spans
        out.headers = fields.headers
    if not check_crcs and not _offsets_fit(out, offsets, counts):
        return None
    return build(out, offsets, timestamps, spans, data)


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
) -> PartitionColumns:
    """One partition's columns from the records' offsets, timestamps and spans in ``cols``' joined payloads
    (``data``, when the caller has joined them). Keys and values are binary views over the payloads where
    the compiled module is built: nothing copied until ``assemble`` copies the rows it hands out; else
    binary arrays gathered by Arrow."""
    n = len(offsets)
    # LogAppendTime rows [first, stop), marked by row, not by offset: offsets need not rise in data a CRC passes
    log_append = list(cols.log_append_rows)  # legacy messages': their records have the time already
    for first, ts in cols.log_append:  # to the end of that batch: its records are contiguous
        stop = _batch_end(cols, first, n)
        timestamps[first:stop] = ts
        log_append.append((first, stop))
    headers = cols.headers
    if cols.filters:  # records of a batch that began before the fetch offset: dropped before any column
        keep = _kept(cols, offsets)
        if not keep.all():
            before = np.concatenate(([0], np.cumsum(keep)))  # rows kept before each record
            index = before[1:] - 1  # a kept record's row
            offsets, timestamps = offsets[keep], timestamps[keep]
            spans = np.ascontiguousarray(spans.reshape(-1, 4)[keep]).ravel()
            headers = [(int(index[i]), pairs) for i, pairs in headers if keep[i]]
            log_append = [(int(before[first]), int(before[stop])) for first, stop in log_append]
            n = len(offsets)
    log_append = [(first, stop) for first, stop in log_append if stop > first]
    pair = None
    if _views is not None:
        parts, starts = ((data,), _ZERO_START) if data is not None else _parts(cols)
        pair = _pair_views(parts, starts, spans)
    if pair is not None:
        keys, values = pair
        return PartitionColumns(offsets, timestamps, keys, values, headers, log_append)
    if data is None:
        data = cols.payloads[0] if len(cols.payloads) == 1 else b"".join(cols.payloads)
    return PartitionColumns(
        offsets, timestamps, _gather(data, spans, 0, n), _gather(data, spans, 2, n), headers, log_append
    )


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


def _pair_views(parts: Sequence, starts: np.ndarray, spans: np.ndarray) -> tuple[Views, Views] | None:
    """Keys and values (a record's, or a header's) as views over ``parts``; None where either declines."""
    keys = _as_views(parts, starts, spans, 0)
    values = None if keys is None else _as_views(parts, starts, spans, 2)
    return None if keys is None or values is None else (keys, values)


def _as_views(parts: Sequence, starts: np.ndarray, spans: np.ndarray, field: int) -> Views | None:
    """The keys (field 0) or values (field 2) as the buffers of a binary_view array over ``parts``, copying
    nothing but values of up to 12 bytes; None where the compiled module declines (a span outside its part)."""
    got = _views(parts, starts, spans, field)
    if got is NotImplemented:
        return None
    validity, views, nulls = got
    return Views(validity, views, nulls, parts)


def _gather(data: bytes | memoryview, spans: np.ndarray, field: int, n: int) -> pa.Array:
    """The keys (field 0) or values (field 2) of the n records in ``data`` as a binary array, by Arrow; null
    where the span ends one before it starts (its length, -1)."""
    import pyarrow.compute as pc  # here, not at import: its kernels' set-up costs the process 8-44 MB

    index = np.arange(field, 4 * n, 4, dtype=np.int64)
    null = spans[index + 1] < spans[index]
    if null.all():  # every one null, or none left
        return pa.nulls(n, pa.binary())
    if (spans[1::2] < spans[0::2]).any():  # the skeleton's offsets must not fall: nulls made empty
        spans = spans.copy()
        np.maximum(spans[1::2], spans[0::2], out=spans[1::2])
    skeleton = pa.Array.from_buffers(pa.large_binary(), 4 * n - 1, [None, pa.py_buffer(spans), pa.py_buffer(data)])
    taken = pc.take(skeleton, _arrow.array(index, mask=null))
    return taken.cast(pa.binary())


def from_records(records: Sequence) -> PartitionColumns:
    """Columns of decoded ``ConsumerRecord``s with bytes keys and values."""
    cols = _Columns()
    _add_records(cols, records)
    if not len(cols):
        return EMPTY_PARTITION
    columns = build(cols, *columns_of(cols))
    return columns
