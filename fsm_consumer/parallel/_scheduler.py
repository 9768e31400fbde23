"""Which record a worker handles next: lanes, key ranges, holds.

A lane is what must be handled one record at a time, in offset order: a key of a partition
(``ordering="key"``; records without a key share their partition's lane), a partition
(``"partition"``), or nothing (``"unordered"``: every record is ready at once). A lane is busy while
one of its records runs; its next record is ready when that one is done.

Seed 004 maps keys to workers by ranges of the key's hash: lane hashes are cut into
``parallelism`` equal ranges and each worker has the ready lanes of its range. A worker whose
range has nothing ready takes a ready lane from the fullest other range, so a few hot keys cannot
leave most workers idle; order is kept either way, since a lane is only ever in one place.

Held partitions hand out only records below their bound (none when the bound is None): a partition
blocked by its metadata size hands out only its lowest unfinished record, whose completion can only
shrink the encoding (and is what closes the gap). A lane whose next record is at or past the bound
is set aside until the partition is released or its bound moves. ``drop`` forgets a partition's queued
records. All methods are called under one lock from the application thread (submit, hold, drop) and the
workers (take, done).
"""

from __future__ import annotations

import threading
import zlib
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from ..structs import ConsumerRecord, TopicPartition
    from ._partition import PartitionRun

ORDERINGS = ("key", "partition", "unordered")

#: A lane: the records of one key of a partition (``key`` None: the partition's records without a key, or
#: all of them for ``ordering="partition"``). The key is the record's key as the key deserializer gave it: equal
#: keys share a lane, so it must be hashable.
Lane: TypeAlias = "tuple[TopicPartition, Hashable]"


class Job:
    """One record on its way through a lane."""

    __slots__ = ("tp", "offset", "record", "lane", "attempts", "owner")

    def __init__(
        self,
        tp: TopicPartition,
        offset: int,
        record: ConsumerRecord,
        lane: Lane | None,
        owner: PartitionRun | None = None,
    ) -> None:
        self.tp = tp
        self.offset = offset
        self.record = record
        self.lane = lane
        self.attempts = 0
        self.owner = owner  # whose record it is (the partition's run when it was received)


def lane_of(ordering: str, tp: TopicPartition, key: object) -> Lane | None:
    """The lane of a record: None means no ordering constraint. Raises TypeError for a key that cannot name
    a lane (a deserializer that returns a dict or a list), before any of its partition's state changes."""
    if ordering == "key":
        if key is None or isinstance(key, (bytes, str)):
            return (tp, key)
        if isinstance(key, (bytearray, memoryview)):
            return (tp, bytes(key))
        if not _hashes(key):
            raise TypeError(
                f"ordering='key' needs record keys that can be compared and hashed; the key deserializer gave "
                f"a {type(key).__name__} (a record of {tp.topic}-{tp.partition}): return bytes, str or another "
                "hashable value from it (a tuple, not a list), or use ordering='partition'"
            )
        return (tp, key)
    if ordering == "partition":
        return (tp, None)
    return None


def _hashes(key: object) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def _home(lane: Lane, ranges: int) -> int:
    """The worker range of a lane: its key's hash, cut into equal ranges (crc32 for bytes and str: the same in
    every process; any other key by Python's hash, which is all one process needs)."""
    tp, key = lane
    if key is None:
        h = zlib.crc32(f"{tp[0]}-{tp[1]}".encode())
    elif isinstance(key, bytes):
        h = zlib.crc32(key)
    elif isinstance(key, str):
        h = zlib.crc32(key.encode())
    else:
        h = hash(key) & 0xFFFFFFFF
    return (h * ranges) >> 32


class Scheduler:
    def __init__(self, ordering: str, parallelism: int, on_ready: Callable[[], None] | None = None) -> None:
        if ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {', '.join(ORDERINGS)}, got {ordering!r}")
        self.ordering = ordering
        self._ranges = parallelism
        self._lock = threading.Condition()
        self._lanes: dict[Lane, deque[Job]] = {}  # lane -> its queued jobs (not running)
        self._busy: set[Lane] = set()  # lanes with a running job
        self._ready: list[deque[Lane]] = [deque() for _ in range(parallelism)]
        self._free: deque[Job] = deque()  # unordered jobs
        self._held: dict[TopicPartition, int | None] = {}  # held partition -> hand out only offsets below
        self._parked: dict[TopicPartition, list[Lane]] = {}  # held partition -> its ready lanes
        self._queued = 0
        self._by_tp: dict[TopicPartition, int] = {}  # queued jobs per partition
        self._closed = False
        self.on_ready = on_ready  # wakes an event loop (async handlers)

    # -- application thread ----------------------------------------------------------------------
    def submit(self, jobs: Iterable[Job]) -> None:
        with self._lock:
            added = 0
            by_tp = self._by_tp
            for job in jobs:
                added += 1
                by_tp[job.tp] = by_tp.get(job.tp, 0) + 1
                if job.lane is None:
                    self._free.append(job)
                    continue
                queue = self._lanes.get(job.lane)
                if queue is None:
                    queue = self._lanes[job.lane] = deque()
                queue.append(job)
                if len(queue) == 1 and job.lane not in self._busy:
                    self._make_ready(job.lane)
            self._queued += added
            if added:
                self._lock.notify_all()
        if added and self.on_ready is not None:
            self.on_ready()

    def hold(self, tp: TopicPartition, below: int | None = None) -> None:
        with self._lock:
            moved = tp in self._held and self._held[tp] != below
            self._held[tp] = below
            if moved:  # a new bound: the lanes set aside are looked at again
                for lane in self._parked.pop(tp, ()):
                    if self._lanes.get(lane):
                        self._make_ready(lane)
                self._lock.notify_all()

    def release(self, tp: TopicPartition) -> None:
        with self._lock:
            self._held.pop(tp, None)
            for lane in self._parked.pop(tp, ()):
                self._make_ready(lane)
            self._lock.notify_all()
        if self.on_ready is not None:
            self.on_ready()

    def drop(self, tp: TopicPartition) -> int:
        """Forget the queued (not running) jobs of ``tp``; returns how many."""
        with self._lock:
            dropped = 0
            for lane in [lane for lane in self._lanes if lane[0] == tp]:
                dropped += len(self._lanes.pop(lane))
            kept = deque(j for j in self._free if j.tp != tp)
            dropped += len(self._free) - len(kept)
            self._free = kept
            self._parked.pop(tp, None)
            self._queued -= dropped
            self._by_tp.pop(tp, None)
            return dropped

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self.on_ready is not None:
            self.on_ready()

    @property
    def queued(self) -> int:
        return self._queued

    def held_queued(self) -> int:
        """Queued jobs of held partitions: they wait for their partition, not for a worker."""
        with self._lock:
            return sum(self._by_tp.get(tp, 0) for tp in self._held)

    # -- workers ---------------------------------------------------------------------------------
    def take(self, worker: int, timeout: float | None = None) -> Job | None:
        """The next job for ``worker`` (blocking up to ``timeout`` s); None when closed or timed out."""
        with self._lock:
            while True:
                if self._closed:
                    return None
                job = self._next(worker)
                if job is not None:
                    return job
                if not self._lock.wait(timeout) and timeout is not None:
                    return None

    def try_take(self, worker: int) -> Job | None:
        with self._lock:
            return None if self._closed else self._next(worker)

    def done(self, job: Job) -> None:
        """``job`` finished (handled or given up): its lane's next record becomes ready."""
        if job.lane is None:
            return
        with self._lock:
            self._busy.discard(job.lane)
            queue = self._lanes.get(job.lane)
            if queue:
                self._make_ready(job.lane)
                self._lock.notify()
            elif queue is not None:
                del self._lanes[job.lane]
        if self.on_ready is not None:
            self.on_ready()

    # -- under the lock --------------------------------------------------------------------------
    def _make_ready(self, lane: Lane) -> None:
        tp = lane[0]
        if tp in self._held and not self._allowed(tp, self._lanes[lane][0].offset):
            self._parked.setdefault(tp, []).append(lane)
        else:
            self._ready[_home(lane, self._ranges)].append(lane)

    def _allowed(self, tp: TopicPartition, offset: int) -> bool:
        """Whether a held partition may still hand out ``offset``."""
        below = self._held[tp]
        return below is not None and offset < below

    def _next(self, worker: int) -> Job | None:
        job = self._pop(self._ready[worker])
        if job is None and any(self._ready):  # steal from the fullest range
            for ready in sorted(self._ready, key=len, reverse=True):
                job = self._pop(ready)
                if job is not None:
                    break
        if job is not None:
            return job
        for i, job in enumerate(self._free):
            if job.tp not in self._held or self._allowed(job.tp, job.offset):
                del self._free[i]
                self._queued -= 1
                self._by_tp[job.tp] -= 1
                return job
        return None

    def _pop(self, ready: deque[Lane]) -> Job | None:
        while ready:
            lane = ready.popleft()
            queue = self._lanes.get(lane)
            if not queue or lane in self._busy:
                continue  # dropped meanwhile, or a stale second entry of a running lane
            if lane[0] in self._held and not self._allowed(lane[0], queue[0].offset):
                self._parked.setdefault(lane[0], []).append(lane)
                continue
            self._busy.add(lane)
            self._queued -= 1
            self._by_tp[lane[0]] -= 1
            return queue.popleft()
        return None
