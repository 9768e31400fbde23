"""The record fields of v2 batches parsed with numpy, all records of a fetch at once.

Only one thing about a v2 record needs a Python loop: where the next one
starts (its length varint says where this one ends). ``scan`` does that loop,
a few bytecodes per record, and notes each record's start. ``parse`` then
reads every field of every record with array operations over those starts
(a varint is one or two bytes in nearly every real record, so each field
costs a couple of whole-array gathers), and checks what the per-record loop
of ``_positions`` checks: fields ending where the record's length says,
lengths no smaller than -1 (null), header counts (records with headers, rare,
are parsed one by one).

It is a fast path, not a second definition of valid data: whenever a check
fails or a value could overflow int64, ``parse`` returns None and the caller
decodes the fetch again with the exact loop, which finds the fault and words
the error. So both paths give the same columns and the same errors.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._decode_v2 import _ZIGZAG, MIN_RECORD_LENGTH, _headers, check_count, varint

# A varint longer than this many bytes (63 bits) is left to the exact loop: it
# may not fit int64 or may overflow when added to the batch's base.
_MAX_VARINT = 9
LIMIT = 1 << 62  # bases and deltas beyond this go to the exact loop (no int64 overflow when added)


# How far a record's length varint moves the scan, laid out as _ZIGZAG (a one-byte varint u at u, a
# two-byte one at u + v * 128): the varint's own bytes plus the length. A length below the minimum
# (corrupt) would step through the batch a byte at a time, noting a start for each of up to 2**31 claimed
# records (a zero-filled payload decompressed from a few hundred bytes did): it jumps past any buffer
# instead, so the next read or the final check fails at once.
_PAST = 1 << 62
_STEP = [1 + z if z >= MIN_RECORD_LENGTH else _PAST for z in _ZIGZAG[:128]] + [
    2 + z if z >= MIN_RECORD_LENGTH else _PAST for z in _ZIGZAG[128:]
]


def scan(buf: bytes | memoryview, count: int, start: int, starts, *, _step=_STEP, _varint=varint) -> None:
    """Append the ``count`` record starts of batch payload ``buf`` (plus ``start``) to ``starts``.

    ValueError (or IndexError) if the records' lengths do not chain to the end of ``buf``; it takes at most
    one step per byte of ``buf``, whatever ``count`` says.
    """
    check_count(count, len(buf))
    append = starts.append
    pos = 0
    for _ in range(count):
        append(start + pos)
        u = buf[pos]
        if u < 0x80:
            pos += _step[u]
        else:
            v = buf[pos + 1]
            if v < 0x80:
                pos += _step[u + v * 128]
            else:
                size, pos = _varint(buf, pos)
                if size < MIN_RECORD_LENGTH:
                    raise ValueError(f"record length {size} is below the minimum {MIN_RECORD_LENGTH}")
                pos += size
    if pos != len(buf):
        raise ValueError("record lengths do not add up to the batch")


class Fields(NamedTuple):
    """Per record: offset delta, timestamp delta, and the spans [key start, key end, value start, value end]."""

    offset_deltas: np.ndarray
    timestamp_deltas: np.ndarray
    spans: np.ndarray  # int64, 4 per record, positions in ``data``
    headers: list  # (record index, headers) of the records that have any, by index


def parse(data: bytes | memoryview, starts: np.ndarray) -> Fields | None:
    """The fields of the records starting at ``starts`` in ``data``; None if anything is off."""
    raw = np.frombuffer(data, dtype=np.uint8)
    length, size = _varints(raw, starts)
    if length is None:
        return None
    end = starts + size + length
    pos = starts + size + 1  # after attributes
    timestamp, size = _varints(raw, pos)
    if timestamp is None:
        return None
    pos += size
    offset, size = _varints(raw, pos)
    if offset is None:
        return None
    pos += size
    spans = np.empty((len(starts), 4), dtype=np.int64)
    for field in (0, 2):  # key, then value
        n, size = _varints(raw, pos)
        if n is None or (n < -1).any() or (n > length).any():
            return None  # the exact loop words these faults
        pos += size
        spans[:, field] = pos
        pos += np.maximum(n, 0)
        spans[:, field + 1] = pos + np.minimum(n, 0)  # a null's (-1, in any encoding) ends before it starts
    headers = []
    first = raw.take(pos, mode="clip")
    plain = (first == 0) & (pos < end)  # no headers: one 0x00 byte
    if not plain.all():
        for i in np.flatnonzero(~plain).tolist():
            at, stop = int(pos[i]), int(end[i])
            rest = bytes(data[at:stop])  # bytes: header keys are decoded, values must be bytes
            try:
                pairs, _, after = _headers(rest, 0)
            except (ValueError, IndexError):
                return None
            if after != len(rest) or at >= stop:
                return None
            if pairs:
                headers.append((i, pairs))
            pos[i] = stop - 1  # so the check below holds for it
    if not (pos + 1 == end).all():
        return None
    if (np.abs(timestamp) >= LIMIT).any() or (np.abs(offset) >= LIMIT).any():
        return None
    return Fields(offset, timestamp, spans.ravel(), headers)


def _varints(raw: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """The zigzag varints at ``pos``: (values, sizes); (None, sizes) if one is longer than _MAX_VARINT."""
    # Positions past the end are clipped: the read is wrong but the record then
    # cannot end where its length says, so parse rejects it.
    b0 = raw.take(pos, mode="clip")
    b1 = raw.take(pos + 1, mode="clip")
    more = b0 >> 7
    value = (b0 & 0x7F).astype(np.uint64)
    value |= (more * (b1 & 0x7F)).astype(np.uint64) << np.uint64(7)
    size = more.astype(np.int64) + 1
    longer = np.flatnonzero(more & (b1 >> 7))
    shift = 14
    while longer.size:
        if shift >= 7 * _MAX_VARINT:
            return None, size
        size[longer] += 1
        b = raw.take(pos[longer] + size[longer] - 1, mode="clip")
        value[longer] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        longer = longer[b >= 0x80]
        shift += 7
    signed = (value >> np.uint64(1)).view(np.int64) ^ -(value & np.uint64(1)).view(np.int64)
    return signed, size
