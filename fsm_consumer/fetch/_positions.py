"""The exact per-record loop of the columnar decoder, and records already decoded, to column positions.

``decode_exact`` walks a Fetch response partition like ``decode_partition``
but appends, per record, only integers to ``_Columns.ints``: offset, timestamp
and the start and end of key and value inside the batch's payload. It is the
definition the fast path (``_vector``) is checked against: ``_columns`` runs it
whenever the fast path declines a fetch, so errors are found and worded here.
Legacy (magic v0/v1) batches and ``from_records`` go through ``_add_records``,
which lays keys and values out end to end. A null key or value is said by its
span, which ends one before it starts (its length, -1), never by the bytes.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from . import _decode_legacy
from ._compression import DEFAULT_LIMIT
from ._decode_v2 import _headers, check_count, check_int64, varint
from ._walk import Walked, walk

_FIELDS = 6  # ints per record in _Columns.ints


class _Columns:
    """What the per-record loops append to; truncated back to a mark when a batch fails.

    ``payloads``, ``bases``, ``headers``, ``filters``, and ``log_append`` are what
    ``_columns.build`` reads (the fast path's ``_Starts`` has them too).
    """

    __slots__ = ("ints", "headers", "payloads", "size", "bases", "filters", "log_append", "log_append_rows")

    def __init__(self) -> None:
        # per record: offset, timestamp, key start, key end, value start, value end (the
        # positions relative to the record's payload); one ``+=`` of a tuple per record costs a
        # sixth of six appends
        self.ints = array("q")
        self.headers: list[tuple[int, tuple]] = []  # (record index, headers) for records that have any
        self.payloads: list[bytes] = []
        self.size = 0  # bytes in payloads
        self.bases: list[tuple[int, int]] = []  # (first record, payload start) per payload
        self.filters: list[tuple[int, int]] = []  # (first record, min offset): batches starting before it
        self.log_append: list[tuple[int, int]] = []  # (first record, batch max timestamp)
        # rows [first, stop) of legacy messages with LogAppendTime (their records carry the time already)
        self.log_append_rows: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.ints) // _FIELDS

    def mark(self) -> tuple:
        return (
            len(self),
            len(self.payloads),
            self.size,
            len(self.headers),
            len(self.bases),
            len(self.filters),
            len(self.log_append),
            len(self.log_append_rows),
        )

    def truncate(self, mark: tuple) -> None:
        n, p, size, h, b, f, la, lr = mark
        del self.ints[_FIELDS * n :]
        del self.payloads[p:], self.headers[h:], self.bases[b:], self.filters[f:], self.log_append[la:]
        del self.log_append_rows[lr:]
        self.size = size

    def add_payload(self, payload: bytes, first: int | None = None) -> None:
        """``payload`` holds the records from ``first`` (default: the next one to be appended) on."""
        self.bases.append((len(self) if first is None else first, self.size))
        self.payloads.append(payload)
        self.size += len(payload)


def decode_exact(
    topic: str,
    partition: int,
    records: Any,
    fetch_offset: int,
    committed: bool,
    aborted_transactions: Iterable[Any] | None,
    check_crcs: bool,
    max_batch_bytes: int = DEFAULT_LIMIT,
) -> tuple[_Columns, Walked]:
    """Walk the partition's batches with the per-record loop: the positions, and where the walk ended."""
    cols = _Columns()

    def legacy(batch: memoryview, magic: int, min_offset: int) -> int:
        records: list = []
        batch_next = _decode_legacy.decode_batch(batch, magic, check_crcs, min_offset, topic, partition, records.append)
        _add_records(cols, records)
        return batch_next

    walked = walk(
        topic,
        partition,
        records,
        fetch_offset,
        committed,
        aborted_transactions,
        check_crcs,
        cols,
        _batch_v2,
        _check_offsets,
        legacy,
        cols.mark,
        cols.truncate,
        max_batch_bytes=max_batch_bytes,
    )
    return cols, walked


def columns_of(cols: _Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """offsets, timestamps and spans (4 per record, positions in the joined payloads) of ``cols``."""
    n = len(cols)
    ints = np.frombuffer(cols.ints, dtype=np.int64).reshape(n, _FIELDS)
    spans = ints[:, 2:].ravel()  # a contiguous copy
    if len(cols.bases) > 1 or cols.bases[0][1]:
        bounds = [b[0] for b in cols.bases[1:]] + [n]
        for (first, base), stop in zip(cols.bases, bounds, strict=False):
            if base:
                spans[4 * first : 4 * stop] += base
    return np.ascontiguousarray(ints[:, 0]), np.ascontiguousarray(ints[:, 1]), spans


def _batch_v2(
    payload: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    min_offset: int,
    _topic: str,
    _partition: int,
    _epoch: int,
    cols: _Columns,
) -> None:
    """The v2 batch callback of ``walk``: decode_records' signature, to columns."""
    first = len(cols)
    cols.add_payload(payload)
    _records_v2(payload, count, base_offset, base_timestamp, log_append_time, cols)
    if log_append_time is not None:
        cols.log_append.append((first, log_append_time))
    if base_offset < min_offset:
        cols.filters.append((first, min_offset))


def _check_offsets(cols: _Columns, mark: tuple, base_offset: int, last_offset: int, min_offset: int) -> None:
    """As decode_partition's: the batch's records it keeps must rise within the batch's range."""
    got: Sequence[int] = cols.ints[_FIELDS * mark[0] :: _FIELDS]
    if base_offset < min_offset:
        got = [o for o in got if o >= min_offset]
    if got and (got[0] < base_offset or got[-1] > last_offset or any(b <= a for a, b in pairwise(got))):
        raise ValueError("record offsets are out of order or outside the batch's range")


def _records_v2(
    buf: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    cols: _Columns,
    *,
    _varint=varint,
) -> None:
    """decode_records' checks, appending positions instead of building records. Not a hot path (the
    fast path in _vector serves valid data), so plain varint calls."""
    check_count(count, len(buf))
    ints: list[int] = []
    index = len(cols)
    pos = 0
    for _ in range(count):
        end, pos = _varint(buf, pos)
        end += pos
        timestamp, pos = _varint(buf, pos + 1)  # after attributes
        timestamp += base_timestamp
        offset, pos = _varint(buf, pos)
        offset += base_offset
        # a null's span ends one before it starts (its length, -1, in any encoding)
        size, pos = _varint(buf, pos)
        if size < -1:
            raise ValueError(f"negative key length {size} at offset {offset}")
        key_start = pos
        key_end = pos + size
        pos += max(size, 0)
        size, pos = _varint(buf, pos)
        if size < -1:
            raise ValueError(f"negative value length {size} at offset {offset}")
        value_start = pos
        pos += max(size, 0)
        ints += (offset, timestamp, key_start, key_end, value_start, value_start + size)
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
    if log_append_time is not None:  # the batch's time replaces the records' (checked or not, as the loop)
        ints[1::_FIELDS] = [log_append_time] * (len(ints) // _FIELDS)
    check_int64(zip(ints[::_FIELDS], ints[1::_FIELDS], strict=True), log_append_time is None)  # as decode_records
    cols.ints += array("q", ints)


def _add_records(cols: _Columns, records: Sequence) -> None:
    """ConsumerRecords with bytes keys and values (legacy batches, or records already decoded) to columns."""
    if not records:
        return
    parts: list[bytes | bytearray | memoryview] = []
    pos = 0
    ints = cols.ints
    first = index = len(cols)
    for r in records:
        ints += array("q", (r[3], r[4]))
        span = ints.append
        for field in (r[6], r[7]):
            span(pos)
            if field is None:  # a null's span ends one before it starts
                span(pos - 1)
            else:
                if not isinstance(field, (bytes, bytearray, memoryview)):
                    raise TypeError(f"columns hold bytes keys and values, got {type(field).__name__}")
                parts.append(field)
                pos += len(field)
                span(pos)
        if r[8]:
            cols.headers.append((index, tuple(r[8])))
        if r[5] == 1:  # LogAppendTime
            cols.log_append_rows.append((index, index + 1))
        index += 1
    cols.add_payload(b"".join(parts), first)
