"""The bytes-bounded hand-off of completed fetches from the background to the application thread.

Whole partition responses cross, never single records. The fetch sender reserves room before it
sends (``reserve``) and stops sending while the buffer and its reservations fill the bound; the
application thread draining it makes room again. A broker may answer with more than was asked
(Tansu returns whole stored batches), so one response can overshoot a reservation: the bound is
kept to within one response.

A fetch the application thread took out (``pop``) stays counted until it is drained or dropped
(``done``): its decoded records are in memory just as much as the queued bytes are.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

import attrs

from ..structs import TopicPartition


@attrs.define(slots=True, eq=False)
class CompletedFetch:
    tp: TopicPartition
    fetch_offset: int
    epoch: int  # the partition's epoch when the fetch was sent
    records: bytes | memoryview | None  # record batches, decoded on the app thread (None once decoded)
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list | None
    size: int


class FetchBuffer:
    def __init__(self, max_bytes: int, on_data: Callable[[], None]) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._queue: collections.deque[CompletedFetch] = collections.deque()
        self._bytes = 0
        self._reserved = 0
        self._on_data = on_data  # sets the application's Signal
        self.peak_bytes = 0

    # background thread
    def room(self) -> int:
        with self._lock:
            return self.max_bytes - self._bytes - self._reserved

    def reserve(self, n: int) -> None:
        with self._lock:
            self._reserved += n

    def add(self, fetches: list[CompletedFetch], reserved: int) -> None:
        with self._lock:
            self._reserved -= reserved
            for f in fetches:
                self._queue.append(f)
                self._bytes += f.size
            if self._bytes > self.peak_bytes:
                self.peak_bytes = self._bytes
        if fetches:
            self._on_data()

    def release_reservation(self, n: int) -> None:
        with self._lock:
            self._reserved -= n

    # application thread
    def pop(self) -> CompletedFetch | None:
        """The next fetch; its bytes count until ``done(fetch)``."""
        with self._lock:
            if not self._queue:
                return None
            return self._queue.popleft()

    def done(self, fetch: CompletedFetch) -> None:
        """A popped fetch was drained or dropped: its bytes no longer count."""
        with self._lock:
            self._bytes -= fetch.size

    def drop(self, keep: Callable[[CompletedFetch], bool]) -> list[CompletedFetch]:
        """Remove the fetches ``keep`` rejects (e.g. of partitions no longer assigned)."""
        with self._lock:
            kept: collections.deque[CompletedFetch] = collections.deque()
            gone: list[CompletedFetch] = []
            for f in self._queue:
                (kept if keep(f) else gone).append(f)
            self._queue = kept
            self._bytes -= sum(f.size for f in gone)
            return gone

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._queue)
