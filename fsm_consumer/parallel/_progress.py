"""Progress of one partition whose records complete out of order (sans-IO).

A parallel consumer hands the records of a partition to many workers, which finish
them in any order. Kafka keeps one offset per partition, so the commit is the lowest
offset not yet done (``PartitionProgress.committable``); the records done above that
gap travel in the commit's metadata string (``encode``/``decode``) so that after a
restart or a rebalance they are skipped instead of handled again
(``PartitionProgress.restore``).

Metadata format (ASCII)::

    "fsm1:"  + urlsafe_base64_unpadded(varints)
    "fsm1z:" + urlsafe_base64_unpadded(zlib(varints))      # when shorter

``varints`` are unsigned LEB128: the base offset (the committed offset), then the
lengths of alternating runs, not-done first (it starts at the base and may be empty),
then done, not-done, done, ... always ending with a done run. Offsets that never
existed (compaction, transaction markers) fall in not-done runs: harmless, they are
never received.

No I/O, threads or clock: the caller serializes access to an instance.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections import deque
from collections.abc import Iterable

__all__ = ["METADATA_LIMIT", "PartitionProgress", "decode", "encode"]

METADATA_LIMIT = 4096  # Kafka's offset.metadata.max.bytes default

_PREFIX = "fsm1:"
_PREFIX_Z = "fsm1z:"
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
_MAX_OFFSET = (1 << 63) - 1  # Kafka offsets are int64
# Guards against metadata that parses but is not plausibly ours (a decoded run of
# 2**60 done offsets would exhaust memory): restore then treats it as foreign.
_MAX_DECODED = 1 << 22
_MAX_RAW = 1 << 24  # zlib output cap (decompression bomb)
_ZLIB_MIN_RAW = 16  # below this zlib's 6-byte framing cannot win
_BLOCK_MARGIN = 256  # headroom under the limit at which dispatching stops


def _varint_len(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _b64(data: bytes | bytearray) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _runs(base: int, done: list[int]) -> list[int]:
    """Alternating not-done/done run lengths of ``done`` (sorted, unique, all >= base)."""
    runs: list[int] = []
    gap_from = base  # first offset after the previous done run
    run_start = prev = -1
    for offset in done:
        if offset == prev + 1 and prev >= 0:
            prev = offset
            continue
        if prev >= 0:
            runs.append(run_start - gap_from)
            runs.append(prev - run_start + 1)
            gap_from = prev + 1
        run_start = prev = offset
    if prev >= 0:
        runs.append(run_start - gap_from)
        runs.append(prev - run_start + 1)
    return runs


def _pack(base: int, runs: list[int]) -> str:
    """The metadata string of ``base`` and ``runs``: plain or zlib, whichever is shorter."""
    raw = bytearray()
    for value in (base, *runs):
        while value >= 0x80:
            raw.append((value & 0x7F) | 0x80)
            value >>= 7
        raw.append(value)
    plain = _PREFIX + _b64(raw)
    if len(raw) >= _ZLIB_MIN_RAW:
        packed = _PREFIX_Z + _b64(zlib.compress(raw, 9))
        if len(packed) < len(plain):
            return packed
    return plain


def encode(base: int, done_above: Iterable[int]) -> str:
    """The metadata string of the done offsets ``done_above`` (each >= ``base``) above committed ``base``."""
    if not 0 <= base <= _MAX_OFFSET:
        raise ValueError(f"base offset {base} out of range")
    done = sorted(set(done_above))
    if done and (done[0] < base or done[-1] > _MAX_OFFSET):
        raise ValueError(f"done offsets must lie in [{base}, {_MAX_OFFSET}]")
    return _pack(base, _runs(base, done))


def _varints(data: bytes) -> list[int]:
    values: list[int] = []
    value = shift = 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            if shift >= 70:  # a 64-bit value takes at most 10 bytes
                raise ValueError("varint too long")
        else:
            values.append(value)
            value = shift = 0
    if shift:
        raise ValueError("truncated varint")
    return values


def decode(metadata: str) -> tuple[int, list[int]]:
    """``(base, sorted done offsets)`` of a string made by ``encode``; ValueError if it is not ours."""
    if not isinstance(metadata, str):
        raise ValueError("metadata is not a string")
    if metadata.startswith(_PREFIX_Z):
        body, packed = metadata[len(_PREFIX_Z) :], True
    elif metadata.startswith(_PREFIX):
        body, packed = metadata[len(_PREFIX) :], False
    else:
        raise ValueError("not fsm_consumer progress metadata")
    # Strict alphabet: b64decode would otherwise silently drop stray characters.
    if not _BASE64URL.fullmatch(body) or len(body) % 4 == 1:
        raise ValueError("bad base64")
    try:
        data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("bad base64") from exc
    if packed:
        inflater = zlib.decompressobj()
        try:
            data = inflater.decompress(data, _MAX_RAW)
        except zlib.error as exc:
            raise ValueError("bad zlib data") from exc
        if not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
            raise ValueError("bad or oversized zlib data")
    values = _varints(data)
    if not values or len(values) % 2 == 0:  # base + (not-done, done) pairs
        raise ValueError("bad run structure")
    base = values[0]
    if base > _MAX_OFFSET:
        raise ValueError("base offset out of range")
    done: list[int] = []
    position = base
    for i in range(1, len(values), 2):
        gap, run = values[i], values[i + 1]
        # encode never makes empty runs, except a first not-done run (base itself done)
        if run == 0 or (gap == 0 and i > 1):
            raise ValueError("empty run")
        position += gap
        if position + run - 1 > _MAX_OFFSET or len(done) + run > _MAX_DECODED:
            raise ValueError("implausible runs")
        done.extend(range(position, position + run))
        position += run
    return base, done


class PartitionProgress:
    """Received, pending and done offsets of one partition; the offset and metadata to commit.

    ``receive``, ``complete`` and ``committable`` are O(1) amortized; the encoded size
    (``metadata_bytes``, ``should_block``, ``may_resume``) is cached until the state changes.
    """

    __slots__ = (
        "_limit",
        "_last",
        "_order",
        "_pending",
        "_done",
        "_restored",
        "_max_done",
        "_changes",
        "_full_key",
        "_full_text",
        "_meta_key",
        "_meta_text",
        "_truncated",
    )

    def __init__(self, start: int, done: Iterable[int] = (), limit: int = METADATA_LIMIT) -> None:
        """start: the committed offset (the next offset to handle); done: offsets >= start completed before
        (restored from metadata): they are skipped when received again."""
        if not 0 <= start <= _MAX_OFFSET:
            raise ValueError(f"start offset {start} out of range")
        if limit < 0:
            raise ValueError(f"limit {limit} is negative")
        restored = sorted(set(done))
        if restored and restored[0] < start:
            raise ValueError(f"done offset {restored[0]} below start {start}")
        self._limit = limit
        self._last = start - 1  # last received offset (start - 1 before the first)
        # Received offsets in order, head always pending: committable is its head.
        # Offsets completed out of order stay in it until the head passes them.
        self._order: deque[int] = deque()
        self._pending: set[int] = set()
        self._done: set[int] = set(restored)  # done offsets >= committable (completed or restored)
        # Restored offsets still in _done, ascending: dropped as committable passes them,
        # received or not (compacted away).
        self._restored: deque[int] = deque(restored)
        self._max_done = restored[-1] if restored else -1  # upper bound of _done (never lowered)
        self._changes = 0  # bumped when _done changes: with committable, the cache key
        self._full_key: tuple[int, int] | None = None
        self._full_text = ""
        self._meta_key: tuple[int, int] | None = None
        self._meta_text = ""
        self._truncated = False

    @classmethod
    def restore(cls, committed: int, metadata: str | None, limit: int = METADATA_LIMIT) -> PartitionProgress:
        """From a committed offset and its metadata; metadata that is empty, None or not ours (another client's
        or garbled) means nothing beyond the offset is done (never raises on bad metadata; the caller may log)."""
        done: list[int] = []
        if metadata:
            try:
                base, offsets = decode(metadata)
            except ValueError:
                pass
            else:
                # A different base means the offset was committed without this metadata
                # (e.g. an offset reset): its done offsets are not trustworthy.
                if base == committed:
                    done = offsets
        return cls(committed, done, limit)

    def receive(self, offset: int) -> bool:
        """A record was polled (offsets arrive increasing, with possible gaps: compaction, transaction markers).
        Returns False when it was already done (restored from metadata): the caller must not handle it again;
        True: it is now pending."""
        if offset <= self._last:
            raise ValueError(f"offset {offset} not above the last received {self._last}")
        self._last = offset
        if offset in self._done:  # only restored offsets can be above the last received
            if not self._pending:  # committable moves to offset + 1
                self._drop_restored(offset + 1)
            return False
        self._pending.add(offset)
        self._order.append(offset)
        if len(self._pending) == 1:  # committable moved from the old last + 1 to offset
            self._drop_restored(offset)
        return True

    def complete(self, offset: int) -> None:
        """A pending offset is done (idempotent for an already-done offset)."""
        pending = self._pending
        if offset in pending:
            pending.remove(offset)
            order = self._order
            if offset == order[0]:
                order.popleft()
                done = self._done
                while order and order[0] not in pending:  # completed earlier, out of order
                    done.discard(order.popleft())
                self._drop_restored(order[0] if order else self._last + 1)
            else:
                self._done.add(offset)
                if offset > self._max_done:
                    self._max_done = offset
            self._changes += 1
        elif offset not in self._done and offset >= self.committable:
            raise ValueError(f"offset {offset} was not received")

    def _drop_restored(self, below: int) -> None:
        restored = self._restored
        while restored and restored[0] < below:
            self._done.discard(restored.popleft())
            self._changes += 1

    @property
    def last_received(self) -> int:
        """The last offset received (start - 1 before the first): a record at or below it is no new one."""
        return self._last

    @property
    def committable(self) -> int:
        """The offset to commit: the lowest pending offset; if none, last received + 1 (start before any)."""
        return self._order[0] if self._order else self._last + 1

    @property
    def pending(self) -> int:
        """Number of received offsets not done yet."""
        return len(self._pending)

    def _full(self) -> str:
        """The untruncated encoding ('' when nothing is done above committable), cached."""
        key = (self.committable, self._changes)
        if key != self._full_key:
            base = key[0]
            done = sorted(self._done)
            self._full_text = _pack(base, _runs(base, done)) if done else ""
            self._full_key = key
        return self._full_text

    def metadata(self) -> str:
        """The encoding of the done offsets above `committable`, truncated to the longest prefix (in offset order)
        that fits `limit` bytes (done offsets left out are handled again after a restart: at least once holds).
        '' when nothing above `committable` is done."""
        key = (self.committable, self._changes)
        if key == self._meta_key:
            return self._meta_text
        text = self._full()
        self._truncated = len(text) > self._limit
        if self._truncated:
            # Binary search for the number of offsets kept: lo fits ('' for 0), hi does not.
            # The plain size grows with the prefix; zlib's nearly so, so the result is at
            # least the longest plain prefix that fits and one more offset never fits.
            base = key[0]
            done = sorted(self._done)
            lo, hi, text = 0, len(done), ""
            while hi - lo > 1:
                mid = (lo + hi) // 2
                candidate = _pack(base, _runs(base, done[:mid]))
                if len(candidate) <= self._limit:
                    lo, text = mid, candidate
                else:
                    hi = mid
        self._meta_key, self._meta_text = key, text
        return text

    @property
    def metadata_bytes(self) -> int:
        """Size in bytes of the full (untruncated) encoding; 0 when nothing above committable is done."""
        return len(self._full())

    def _size_at_most(self, threshold: int) -> bool:
        """metadata_bytes <= threshold, without encoding when a cheap upper bound settles it."""
        if self._full_key != (self.committable, self._changes):
            count = len(self._done)
            if count == 0:
                return threshold >= 0
            base = self.committable
            # At most 2 runs per done offset (a not-done one and a done one), none longer
            # than the span; plain base64 is 4/3 of the varints (zlib is used only if shorter).
            raw = _varint_len(base) + 2 * count * _varint_len(self._max_done - base + 1)
            if len(_PREFIX) + (4 * raw + 2) // 3 <= threshold:
                return True
        return len(self._full()) <= threshold

    def should_block(self) -> bool:
        """The full encoding nears the limit: dispatching new records of this partition should stop."""
        # The margin shrinks for tiny limits so the resume threshold stays below it.
        return not self._size_at_most(self._limit - min(_BLOCK_MARGIN, self._limit // 4))

    def may_resume(self) -> bool:
        """The full encoding is down to half the limit (hysteresis): dispatching may resume."""
        return self._size_at_most(self._limit // 2)

    @property
    def truncated(self) -> bool:
        """The last metadata() call had to leave done offsets out."""
        return self._truncated
