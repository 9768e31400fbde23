"""``ParallelConsumer``: one consumer, many workers, records of a key handled one at a time in order.

The application thread runs ``run()``: it polls the consumer (at most ``max_in_flight`` records
out at once; fetching is paused when full, polling goes on so the group never evicts a slow
member), hands records to the scheduler, applies what the workers completed to each partition's
progress, blocks a partition whose commit metadata would overflow, and commits every
``commit_interval_ms``. Rebalance callbacks arrive inside ``poll()`` on this same thread: a
revocation drains the partition and commits before it is acknowledged (specs/parallel.yaml).
Only this thread reads the clock; the machines get its ``now``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, IllegalStateError, RebalanceInProgressError
from ..fetch import OffsetAndMetadata, TopicPartition
from ._errors import HandlerFailedError, noted
from ._history import recording
from ._listener import DrainingListener
from ._partition import PartitionRun
from ._progress import METADATA_LIMIT, PartitionProgress
from ._scheduler import ORDERINGS, Job, Scheduler, lane_of
from ._workers import AsyncWorkers, Attempts, Outcome, ThreadWorkers, is_async

if TYPE_CHECKING:
    from .._history_writer import HistoryWriter
    from ..consumer import Consumer
    from ..consumer._group_api import RebalanceListener
    from ..structs import ConsumerRecord

log = logging.getLogger("fsm_consumer.parallel")
_SIZE_CHECK_EVERY = 64  # completions of a partition between metadata size checks within one loop pass


class _Settings:
    """What the parallel spec's durations read (``revoke_timeout_ms``)."""

    def __init__(self, revoke_timeout_ms: float) -> None:
        self.revoke_timeout_ms = revoke_timeout_ms


def _now_ms() -> float:
    return time.monotonic() * 1000


def _positive(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}", key=name)
    return value


class ParallelConsumer:
    """Drive ``consumer`` (subscribed or assigned, ``enable_auto_commit=False``) with ``handler(record)``
    on ``parallelism`` workers until :meth:`stop`. See docs/parallel.md."""

    def __init__(
        self,
        consumer: Consumer,
        handler: Callable[[ConsumerRecord], object] | Callable[[ConsumerRecord], Awaitable[object]],
        *,
        parallelism: int = 16,
        ordering: str = "key",
        max_in_flight: int = 1000,
        commit_interval_ms: int = 1000,
        retries: int = 0,
        on_failure: Callable[[ConsumerRecord, BaseException], object] | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 10_000,
        revoke_timeout_ms: int | None = None,
        metadata_limit: int = METADATA_LIMIT,
    ) -> None:
        if ordering not in ORDERINGS:
            raise ConfigError(f"ordering must be one of {', '.join(ORDERINGS)}, got {ordering!r}", key="ordering")
        for name, value in (
            ("parallelism", parallelism),
            ("max_in_flight", max_in_flight),
            ("commit_interval_ms", commit_interval_ms),
            ("metadata_limit", metadata_limit),
        ):
            _positive(name, value)
        if not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"retries must be an integer >= 0, got {retries!r}", key="retries")
        config = consumer.config
        self._group = config.group_id is not None
        if self._group and config.enable_auto_commit:
            raise ConfigError(
                "ParallelConsumer commits what its workers completed; auto-commit would commit "
                "records still running: create the consumer with enable_auto_commit=False",
                key="enable_auto_commit",
            )
        if revoke_timeout_ms is None:  # the revocation must end well inside the group's rebalance timeout
            revoke_timeout_ms = min(30_000, config.max_poll_interval_ms // 2)
        self.consumer = consumer
        self.handler = handler
        self.ordering = ordering
        self.max_in_flight = max_in_flight
        self.commit_interval_ms = commit_interval_ms
        self.metadata_limit = metadata_limit
        self._settings = _Settings(revoke_timeout_ms)
        self._woken = threading.Event()
        self._completions: SimpleQueue[Outcome] = SimpleQueue()
        attempts = Attempts(retries, retry_backoff_ms, retry_backoff_max_ms, on_failure)
        self._scheduler = Scheduler(ordering, parallelism)
        self._workers: AsyncWorkers | ThreadWorkers
        # the consumer's history (history_path): a line per handler attempt, a run's start, its machine
        self._history: HistoryWriter | None = getattr(consumer, "_history", None)  # duck-typed consumers: none
        work = recording(handler, self._history) if self._history is not None else handler
        if is_async(work):
            self._workers = AsyncWorkers(
                self._scheduler, work, parallelism, attempts, self._completions, self._woken.set
            )
            self._scheduler.on_ready = self._workers.notify
        else:
            self._workers = ThreadWorkers(
                self._scheduler, work, parallelism, attempts, self._completions, self._woken.set
            )
        self._parts: dict[TopicPartition, PartitionRun] = {}
        self._paused: set[TopicPartition] = set()
        self._full = False
        self._in_flight = 0
        self._counts = {
            "completed": 0,
            "retried": 0,
            "failed": 0,
            "dead-lettered": 0,
            "skipped": 0,
            "commits": 0,
            "commit-errors": 0,
        }
        self._final: dict[TopicPartition, tuple[int, str]] = {}
        self._commit_pending = False
        self._fatal: HandlerFailedError | None = None
        self._abort: BaseException | None = None  # KeyboardInterrupt, SystemExit...: raised as itself
        self._stop = threading.Event()
        self._state = "new"  # new -> running -> done
        self._user_listener: RebalanceListener | None = None  # the one given to subscribe(), called after ours
        self._swapped = False

    # -- the public surface ----------------------------------------------------------------------------
    def __enter__(self) -> ParallelConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stop(self) -> None:
        """Ask ``run()`` to finish: from a handler, another thread or a signal handler."""
        self._stop.set()
        self._woken.set()

    def close(self) -> None:
        """Stop; when ``run()`` never ran, just release the workers. The consumer stays open (it is yours)."""
        self.stop()
        if self._state == "new":
            self._state = "done"

    def run(self) -> None:
        """Handle records until :meth:`stop`; then drain what runs (up to ``revoke_timeout_ms``), commit,
        and return. Raises :class:`HandlerFailedError` after committing completed work when the handler
        failed on a record and no ``on_failure`` was given; a ``BaseException`` that is no failure
        (``KeyboardInterrupt``, ``SystemExit``) raised by the handler stops it the same way and is
        raised as itself."""
        if self._state != "new":
            raise IllegalStateError("a ParallelConsumer runs once; create a new one")
        self._state = "running"
        self._wrap_listener()
        self._workers.start()
        try:
            self._adopt(self.consumer.assignment())
            next_commit = _now_ms() + self.commit_interval_ms
            while not self._stop.is_set() and self._fatal is None and self._abort is None:
                now = _now_ms()
                self._drain(now)
                for part in list(self._parts.values()):
                    part.machine.tick(now)
                    part.check_size(now)
                self._apply_pauses()
                if self._group and now >= next_commit:
                    self._commit_async()
                    next_commit = now + self.commit_interval_ms
                self._poll()
        finally:
            try:
                self._finish()
            finally:
                self._state = "done"
        if self._abort is not None:
            raise self._abort
        if self._fatal is not None:
            raise self._fatal

    def metrics(self) -> dict[str, Any]:
        """Counters and per-partition progress (gap: records received and not done; metadata-bytes: the
        size of the completed offsets' encoding; state ``blocked`` when it came near the limit)."""
        parts = dict(self._parts)
        return {
            "in-flight": self._in_flight,
            "queued": self._scheduler.queued,
            **self._counts,
            "paused-full": self._full,
            "partitions-blocked": sum(1 for p in parts.values() if p.state == "blocked"),
            "partitions": {f"{tp.topic}-{tp.partition}": p.metrics() for tp, p in parts.items()},
        }

    # -- the loop --------------------------------------------------------------------------------------
    def _out(self) -> int:
        """Records out that count against max_in_flight: those of blocked partitions wait for their
        partition, not for a worker, and must not starve the others (their fetching is paused)."""
        return self._in_flight - self._scheduler.held_queued()

    def _poll(self) -> None:
        room = self.max_in_flight - self._out()
        if room <= 0 or self._in_flight:
            # completions wake us; poll() still runs (callbacks, the poll timer) without waiting
            self._woken.wait(0.005 if room > 0 else 0.05)
            self._woken.clear()
            timeout = 0
        else:
            timeout = 100
        records = self.consumer.poll(timeout_ms=timeout, max_records=max(room, 1))
        if records:
            self._submit(records)

    def _submit(self, records: Mapping[TopicPartition, Sequence[ConsumerRecord]]) -> None:
        jobs: list[Job] = []
        ordering = self.ordering
        for tp, recs in records.items():
            part = self._parts.get(tp)
            if part is None:
                log.debug("parallel consumer: records of %s-%d, which is not owned", tp.topic, tp.partition)
                part = self._adopt([tp])[0]
            elif part.sought_back(recs[0].offset):  # one poll's records of a partition come in offset order
                part = self._restart(part, recs[0].offset)
            for rec in recs:
                lane = lane_of(ordering, tp, rec.key)  # first: a key that names no lane changes nothing
                if part.receive(rec.offset):
                    jobs.append(Job(tp, rec.offset, rec, lane, part))
                else:
                    self._counts["skipped"] += 1
        self._in_flight += len(jobs)
        self._scheduler.submit(jobs)

    def _drain(self, now: float) -> None:
        """Apply the workers' outcomes. A partition's metadata size is also checked every
        ``_SIZE_CHECK_EVERY`` of its completions, so a burst cannot carry it far past the limit."""
        counts = self._counts
        while True:
            try:
                outcome = self._completions.get_nowait()
            except Empty:
                return
            job = outcome.job
            if outcome.abort and self._abort is None:
                self._abort = noted(outcome)
            if job is None:
                continue  # a worker ended outside any record
            self._in_flight -= 1
            part = job.owner
            assert part is not None  # every job is submitted with its partition's run (_submit)
            counts["retried"] += outcome.retried
            if outcome.error is not None:
                counts["failed"] += 1
                if part.live:
                    part.fail(job.offset)
                # a record of a partition still ours (a run superseded by a seek too) stops run(); one
                # of a partition given up since is not this member's any more
                if not outcome.abort and self._fatal is None and (part.live or job.tp in self._parts):
                    self._fatal = HandlerFailedError(job.record, outcome.error)
                continue
            counts["dead-lettered"] += outcome.dead_lettered
            counts["completed"] += 1
            if part.live:
                part.complete(job.offset)
                if part.completed % _SIZE_CHECK_EVERY == 0:
                    part.check_size(now)

    def _apply_pauses(self) -> None:
        """Fetch only what may be handed out: nothing while full, nothing of blocked or draining partitions."""
        out = self._out()
        if out >= self.max_in_flight:
            self._full = True
        elif self._full and out <= self.max_in_flight * 3 // 4:
            self._full = False
        owned = {tp for tp, p in self._parts.items() if p.live}
        want = owned if self._full else {tp for tp in owned if self._parts[tp].state != "active"}
        assigned = self.consumer.assignment()
        pause, resume = (want - self._paused) & assigned, (self._paused - want) & assigned
        if pause:
            self.consumer.pause(*pause)
        if resume:
            self.consumer.resume(*resume)
        self._paused = (self._paused | pause) - resume

    # -- commits ---------------------------------------------------------------------------------------
    def _offsets(self, parts: Iterable[PartitionRun]) -> dict[TopicPartition, OffsetAndMetadata]:
        out = {}
        for part in parts:
            value = part.to_commit()
            if value is not None:
                out[part.tp] = OffsetAndMetadata(value[0], value[1], -1)
        return out

    def _commit_async(self) -> None:
        if self._commit_pending:
            return
        offsets = self._offsets(p for p in self._parts.values() if p.live)
        if not offsets:
            return
        self._commit_pending = True

        def done(
            committed: Mapping[TopicPartition, OffsetAndMetadata],
            error: BaseException | None,
            offsets: dict[TopicPartition, OffsetAndMetadata] = offsets,
        ) -> None:
            self._commit_pending = False
            if error is not None:
                self._counts["commit-errors"] += 1
                # refused while the group rebalances: normal, the next interval (or the revocation) commits
                level = logging.DEBUG if isinstance(error, RebalanceInProgressError) else logging.WARNING
                log.log(
                    level,
                    "parallel consumer: commit of %d partition(s) failed, retried at the next interval: %r",
                    len(offsets),
                    error,
                )
                return
            self._counts["commits"] += 1
            for tp, om in offsets.items():
                part = self._parts.get(tp)
                if part is not None:
                    part.committed = (om.offset, om.metadata)

        self.consumer.commit_async(offsets, callback=done)

    def _commit_sync(self, offsets: dict[TopicPartition, OffsetAndMetadata], why: str) -> None:
        if not offsets or not self._group:
            return
        try:
            self.consumer.commit(offsets)
            self._counts["commits"] += 1
        except Exception as exc:  # the group moved on (fenced, rebalancing): the next owner redoes the rest
            self._counts["commit-errors"] += 1
            log.warning(
                "parallel consumer: commit on %s failed for %s: %r",
                why,
                ", ".join(f"{tp.topic}-{tp.partition}@{om.offset}" for tp, om in sorted(offsets.items())),
                exc,
            )

    # -- partitions coming and going -------------------------------------------------------------------
    def _adopt(self, tps: Iterable[TopicPartition]) -> list[PartitionRun]:
        """Runs for newly owned partitions, their progress restored from the committed offset's metadata."""
        now = _now_ms()
        out = []
        for tp in tps:
            tp = TopicPartition(*tp)
            progress = None
            if self._group:
                found = self.consumer.committed(tp, metadata=True)
                if found is not None:
                    progress = PartitionProgress.restore(found.offset, found.metadata, limit=self.metadata_limit)
            part = PartitionRun(tp, progress, self, self._settings, now, self.metadata_limit)
            if progress is not None:
                assert found is not None  # progress is restored only from a committed offset found
                part.committed = (found.offset, found.metadata or "")
            self._parts[tp] = part
            self._scheduler.release(tp)  # a partition that comes back hands out again
            self._note_run(part, found.offset if progress is not None and found is not None else None)
            out.append(part)
        return out

    def _restart(self, old: PartitionRun, offset: int) -> PartitionRun:
        """The application sought ``old``'s partition back to ``offset`` (at or below what was received:
        records are handled again from there, as Kafka users expect): the old run is released without a
        commit (its queued records dropped; those running finish, their completions no longer count) and
        a new run tracks the partition from ``offset``, so the next commit is the sought position."""
        tp, now = old.tp, _now_ms()
        assert old.progress is not None  # sought_back() is True only with progress
        log.info(
            "parallel consumer: %s-%d sought back to %d (received up to %d): its progress restarts there",
            tp.topic,
            tp.partition,
            offset,
            old.progress.last_received,
        )
        old.machine.fire("seek", now)
        part = PartitionRun(tp, None, self, self._settings, now, self.metadata_limit)
        self._parts[tp] = part
        self._scheduler.release(tp)
        self._note_run(part, offset)
        return part

    def _note_run(self, part: PartitionRun, offset: int | None) -> None:
        if self._history is not None:
            part.machine.observer = self._history.transition
            self._history.write(
                "parallel_restart", tp=[part.tp.topic, part.tp.partition], offset=offset, ordering=self.ordering
            )

    def _give_up(self, tps: Iterable[TopicPartition], trigger: str) -> None:
        """Revoked (drain, commit) or lost (drop) partitions, then forget them."""
        now = _now_ms()
        parts = [self._parts[tp] for tp in map(lambda t: TopicPartition(*t), tps) if tp in self._parts]
        for part in parts:
            part.machine.fire(trigger, now)
        if trigger == "revoke":
            self._await_drain(parts)
            offsets = self._offsets_final()
            log.debug(
                "parallel consumer: %s of %s: committing %s",
                trigger,
                ", ".join(f"{p.tp.topic}-{p.tp.partition}" for p in parts),
                {f"{tp.topic}-{tp.partition}": om.offset for tp, om in offsets.items()},
            )
            self._commit_sync(
                offsets, "revocation" if self._state == "running" and not self._stop.is_set() else "close"
            )
        for part in parts:
            if part.live:
                part.machine.fire("lose", _now_ms())
            self._scheduler.drop(part.tp)
            self._parts.pop(part.tp, None)
            self._paused.discard(part.tp)

    def _await_drain(self, parts: list[PartitionRun]) -> None:
        """Until every draining partition has nothing running or its drain_timeout passed."""
        while True:
            now = _now_ms()
            self._drain(now)
            waiting = False
            for part in parts:
                if part.state != "draining":
                    continue
                if part.out <= 0:
                    part.machine.fire("drained", now)
                elif not part.machine.tick(now) and part.state == "draining":
                    waiting = True
            if not waiting:
                return
            self._woken.wait(0.01)
            self._woken.clear()

    def _offsets_final(self) -> dict[TopicPartition, OffsetAndMetadata]:
        final, self._final = self._final, {}
        return {tp: OffsetAndMetadata(offset, metadata, -1) for tp, (offset, metadata) in final.items()}

    def _finish(self) -> None:
        """run() ends: drain and commit everything still owned, stop the workers, give the listener and
        the partitions it paused back."""
        try:
            if self._fatal is not None or self._abort is not None:
                # a record failed (or aborted): nothing more is handed out, running ones finish
                for part in self._parts.values():
                    if part.live:
                        part.drop_queued()
            self._give_up(list(self._parts), "revoke")
        finally:
            if not self._workers.stop(timeout_s=1.0):
                log.warning(
                    "parallel consumer: some handlers are still running after run() ended; their "
                    "records were not committed"
                )
            if self._swapped:
                self.consumer.swap_rebalance_listener(self._user_listener)
                self._swapped = False
            paused = self._paused & self.consumer.assignment()
            if paused:  # the consumer is the user's: give it back fetching as it came
                self.consumer.resume(*paused)
            self._paused = set()

    # -- the Owner protocol of PartitionRun (the spec's effects) ----------------------------------------
    def hold(self, tp: TopicPartition, below: int | None = None) -> None:
        self._scheduler.hold(tp, below)

    def unhold(self, tp: TopicPartition) -> None:
        self._scheduler.release(tp)

    def drop_queued(self, tp: TopicPartition) -> int:
        dropped = self._scheduler.drop(tp)
        self._in_flight -= dropped
        return dropped

    def final_commit(self, tp: TopicPartition, offset: int, metadata: str) -> None:
        self._final[tp] = (offset, metadata)

    # -- the rebalance listener ------------------------------------------------------------------------
    def _wrap_listener(self) -> None:
        if self.consumer.subscription() is None:
            return  # assigned by hand: no rebalances
        self._user_listener = self.consumer.swap_rebalance_listener(DrainingListener(self))
        self._swapped = True
