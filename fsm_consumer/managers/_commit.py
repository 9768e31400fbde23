"""Offset commits and committed-offset lookups for a group (OffsetCommit, OffsetFetch).

- ``commit()`` / ``commit_async()`` arrive as CommitEvents; auto-commit runs every
  ``auto_commit_interval_ms`` from here, committing the positions of records poll() already
  returned. Retriable errors are retried (after ``retry_backoff_ms``) until the commit's deadline.
- As the Java client: a commit asked for while the member is rejoining (or answered
  REBALANCE_IN_PROGRESS, or answered ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID while it rejoins) fails
  at once with the retriable RebalanceInProgressError: the member may keep its partitions, and
  poll() completes the rebalance. CommitFailedError when the membership itself is gone.
- Newly assigned partitions without a position get it from the group's committed offset,
  else from the reset policy.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict

import kafka.errors as ke
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest

from ..errors import CommitFailedError, KafkaTimeoutError, RebalanceInProgressError
from ..events import CallbackEvent, CommitEvent, FetchCommittedEvent
from ..fetch._records import OffsetAndMetadata, TopicPartition
from ._base import FOREVER, Outgoing, error_of

log = logging.getLogger("fsm_consumer.commit")

_RETRIABLE = {7, 14, 15, 16}         # timed out, load in progress, not available, not coordinator
_COORDINATOR = {15, 16}
_GENERATION_MOVED = {22, 25}
_REBALANCE_IN_PROGRESS = 27
_REJOINING = frozenset({"joining", "join_backoff", "syncing"})


class _Commit:
    __slots__ = ("offsets", "deadline", "on_done", "retry_at", "in_flight", "auto")

    def __init__(self, offsets, deadline, on_done, auto=False) -> None:
        self.offsets = offsets          # tp -> OffsetAndMetadata
        self.deadline = deadline
        self.on_done = on_done          # (error or None) -> None, on the background thread
        self.retry_at = 0.0
        self.in_flight = False
        self.auto = auto


class CommitManager:
    def __init__(self, config, *, subscription, coordinator, background_events, clock, metrics) -> None:
        self._config = config
        self._subs = subscription
        self._coordinator = coordinator
        self._bg = background_events
        self._clock = clock
        self._metrics = metrics
        self.membership = None                      # set in group mode: generation and member id
        self._queue: list[_Commit] = []
        self._lookups: list[FetchCommittedEvent] = []
        self._fetching: set[TopicPartition] = set()
        self._committed_fetch_retry_at = 0.0
        self._next_auto = math.inf
        self._last_auto: dict[TopicPartition, int] = {}
        self._closing = False
        self.commits_ok = 0
        self.commits_failed = 0
        self.commit_latency_total_ms = 0.0
        self.commit_latency_max_ms = 0.0

    # -- asks -------------------------------------------------------------------------------------
    def start_auto_commit(self, now: float) -> None:
        if self._config.enable_auto_commit and self._config.group_id and math.isinf(self._next_auto):
            self._next_auto = now + self._config.auto_commit_interval_ms

    def on_commit_event(self, event: CommitEvent, now: float) -> None:
        offsets = event.offsets
        if offsets is None:
            offsets = self._subs.consumed_offsets()
        refused = self._refusal()
        if refused is not None:
            self.commits_failed += 1
            self._finish(event, refused)
            return
        if not offsets:
            self._finish(event, None)
            return
        self._queue.append(_Commit(offsets, event.deadline_ms, lambda err, ev=event: self._finish(ev, err)))

    def _rejoining(self) -> bool:
        m = self.membership
        return m is not None and (m.machine.state in _REJOINING or (
            m.machine.state == "unjoined" and self._subs.kind in ("topics", "pattern")))

    def _refusal(self) -> BaseException | None:
        """Why an explicit commit cannot be sent now (None: it can)."""
        m = self.membership
        if m is None:
            return None
        state = m.machine.state
        group = self._config.group_id
        if self._rejoining():
            return RebalanceInProgressError(
                f"commit refused: group {group!r} is rebalancing and this member is rejoining (state {state}); "
                "call poll() to complete the rebalance, then commit again")
        if state in ("fenced", "stale", "lost_then_leave", "leave_lost"):
            return CommitFailedError(
                f"commit refused: this member's membership of group {group!r} is gone ({state}: its session "
                "ran out or it stopped polling); its partitions are lost and poll() rejoins")
        if state == "fatal":
            return m.fatal
        return None

    def _generation_error(self, code: int) -> BaseException:
        if code == _REBALANCE_IN_PROGRESS or self._rejoining():
            return RebalanceInProgressError(
                f"the commit was answered {error_of(code).__name__}: group {self._config.group_id!r} is "
                "rebalancing; call poll() to complete the rebalance, then commit again")
        return CommitFailedError(
            "the commit was rejected: the group moved to a new generation (this member was fenced or the "
            f"group rebalanced) [{error_of(code).__name__}]")

    def _finish(self, event: CommitEvent, error) -> None:
        if event.callback is not None:
            self._bg.put(CallbackEvent(event.callback, (dict(event.offsets or {}), error)))
        if error is None:
            event.complete(None)
        elif event.sync:
            event.fail(error)
        else:
            event.complete(None)  # async: the callback carries the error

    def commit_positions(self, positions: dict[TopicPartition, int], on_done) -> None:
        """Commit before revocation completes (auto-commit on): bounded by default_api_timeout_ms."""
        offsets = {tp: OffsetAndMetadata(off, "", -1) for tp, off in positions.items()}
        self._queue.append(_Commit(offsets, self._clock.now_ms() + self._config.default_api_timeout_ms, on_done))

    def on_fetch_committed(self, event: FetchCommittedEvent, now: float) -> None:
        self._lookups.append(event)

    def begin_close(self, autocommit: bool) -> None:
        self._closing = True
        if autocommit and self._config.enable_auto_commit and self._config.group_id and self._may_auto_commit():
            self._auto_commit(self._clock.now_ms(), force=True)

    @property
    def close_done(self) -> bool:
        return not self._queue or self._coordinator.gone_for_close

    # -- loop ------------------------------------------------------------------------------------------
    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        if not self._config.group_id:
            return FOREVER, []
        wait = FOREVER
        if not self._closing and now >= self._next_auto:
            self._auto_commit(now)
        if not math.isinf(self._next_auto):
            wait = min(wait, max(0.0, self._next_auto - now))
        need_committed = (self._subs.awaiting_committed() - self._fetching)
        has_work = bool(self._queue or self._lookups or need_committed)
        if not has_work:
            return wait, []
        node = self._coordinator.node
        if node is None:
            self._coordinator.needed()
            self._expire(now)
            return min(wait, self._config.retry_backoff_ms), []
        out: list[Outgoing] = []
        for commit in list(self._queue):
            if commit.in_flight:
                continue
            if now >= commit.deadline:
                self._queue.remove(commit)
                self._done(commit, KafkaTimeoutError("the commit did not complete before its deadline"), now)
                continue
            if now < commit.retry_at:
                wait = min(wait, commit.retry_at - now)
                continue
            commit.in_flight = True
            commit.retry_at = now  # reused as the send time for latency
            out.append(Outgoing(self._commit_request(commit.offsets), node,
                                lambda p, n, c=commit: self._on_commit(p, n, c), max_version=9))
        if need_committed and now >= self._committed_fetch_retry_at:
            self._fetching |= need_committed
            out.append(Outgoing(self._fetch_request(need_committed), node,
                                lambda p, n, tps=frozenset(need_committed): self._on_positions(p, n, tps),
                                max_version=7))
        for event in list(self._lookups):
            self._lookups.remove(event)
            out.append(Outgoing(self._fetch_request(event.partitions), node,
                                lambda p, n, ev=event: self._on_lookup(p, n, ev), max_version=7))
        return wait, out

    def _expire(self, now: float) -> None:
        for commit in list(self._queue):
            if not commit.in_flight and now >= commit.deadline:
                self._queue.remove(commit)
                self._done(commit, KafkaTimeoutError("no coordinator before the commit's deadline"), now)

    def _auto_commit(self, now: float, force: bool = False) -> None:
        self._next_auto = now + self._config.auto_commit_interval_ms
        if not force and not self._may_auto_commit():
            return
        positions = {tp: off for tp, off in self._subs.positions().items()
                     if self._last_auto.get(tp) != off}
        if not positions or any(c.auto and c.in_flight for c in self._queue):
            return
        offsets = {tp: OffsetAndMetadata(off, "", -1) for tp, off in positions.items()}
        self._queue.append(_Commit(offsets, now + self._config.default_api_timeout_ms,
                                   lambda err, pos=positions: self._auto_done(pos, err), auto=True))

    def _may_auto_commit(self) -> bool:
        """Manual assignment (not a member: generation -1, as Kafka's simple consumers commit), or a
        member whose assignment is settled; never in the middle of a rebalance."""
        m = self.membership
        return m is None or m.machine.state in ("unjoined", "stable", "assigning_partitions")

    def _auto_done(self, positions, error) -> None:
        if error is None:
            self._last_auto.update(positions)
        else:
            log.warning("auto-commit of %d partitions failed: %s", len(positions), error)

    # -- requests and answers ---------------------------------------------------------------------------
    def _generation(self):
        m = self.membership
        if m is None or m.generation < 0:
            return -1, "", self._config.group_instance_id if m is not None else None
        return m.generation, m.member_id, self._config.group_instance_id

    def _commit_request(self, offsets) -> OffsetCommitRequest:
        generation, member_id, instance = self._generation()
        topics: dict[str, list] = defaultdict(list)
        for tp, om in offsets.items():
            topics[tp.topic].append(OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=om.offset,
                committed_leader_epoch=getattr(om, "leader_epoch", -1), committed_metadata=om.metadata or ""))
        return OffsetCommitRequest(
            group_id=self._config.group_id, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=instance, retention_time_ms=-1,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])

    def _on_commit(self, pending, now: float, commit: _Commit) -> None:
        commit.in_flight = False
        sent_at = commit.retry_at
        if pending.error is not None:
            self._coordinator.mark_unknown()
            self._retry(commit, now, pending.error)
            return
        worst = 0
        for t in pending.response.topics:
            for p in t.partitions:
                if p.error_code and (worst == 0 or p.error_code in _GENERATION_MOVED | {_REBALANCE_IN_PROGRESS}):
                    worst = p.error_code
        if worst == 0:
            self._queue.remove(commit)
            latency = now - sent_at
            self.commit_latency_total_ms += latency
            self.commit_latency_max_ms = max(self.commit_latency_max_ms, latency)
            self._done(commit, None, now)
        elif worst in _GENERATION_MOVED or worst == _REBALANCE_IN_PROGRESS:
            self._queue.remove(commit)
            self._done(commit, self._generation_error(worst), now)
        elif worst in _RETRIABLE:
            if worst in _COORDINATOR:
                self._coordinator.mark_unknown()
            self._retry(commit, now, error_of(worst)("OffsetCommit"))
        else:
            self._queue.remove(commit)
            self._done(commit, error_of(worst)("OffsetCommit"), now)

    def _retry(self, commit: _Commit, now: float, error) -> None:
        if now + self._config.retry_backoff_ms >= commit.deadline:
            self._queue.remove(commit)
            self._done(commit, error if isinstance(error, Exception) else KafkaTimeoutError(str(error)), now)
        else:
            commit.retry_at = now + self._config.retry_backoff_ms

    def _done(self, commit: _Commit, error, now: float) -> None:
        if error is None:
            self.commits_ok += 1
        else:
            self.commits_failed += 1
        history = getattr(self.membership, "history_file", None)
        if history is not None:
            generation, member_id, _ = self._generation()
            history.write("commit", member_id, generation, error=None if error is None else repr(error),
                          offsets=[[tp.topic, tp.partition, om.offset] for tp, om in sorted(commit.offsets.items())])
        commit.on_done(error)

    def _fetch_request(self, partitions) -> OffsetFetchRequest:
        topics: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            topics[tp.topic].append(tp.partition)
        return OffsetFetchRequest(group_id=self._config.group_id, require_stable=True, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=sorted(ps))
            for t, ps in topics.items()])

    @staticmethod
    def _committed(response) -> tuple[dict, int]:
        found, worst = {}, response.error_code if hasattr(response, "error_code") else 0
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    worst = worst or p.error_code
                    continue
                found[tp] = (None if p.committed_offset < 0 else
                             OffsetAndMetadata(p.committed_offset, p.metadata or "",
                                               getattr(p, "committed_leader_epoch", -1)))
        return found, worst

    def _on_positions(self, pending, now: float, partitions) -> None:
        self._fetching -= partitions
        if pending.error is not None:
            self._coordinator.mark_unknown()
            self._committed_fetch_retry_at = now + self._config.retry_backoff_ms
            return
        found, worst = self._committed(pending.response)
        if worst in _COORDINATOR:
            self._coordinator.mark_unknown()
        for tp in partitions:
            if tp in found:
                om = found[tp]
                self._subs.set_committed_position(tp, None if om is None else om.offset,
                                                  -1 if om is None else om.leader_epoch)
        if worst:
            self._committed_fetch_retry_at = now + self._config.retry_backoff_ms

    def _on_lookup(self, pending, now: float, event: FetchCommittedEvent) -> None:
        if event.future.done:
            return
        if pending.error is not None:
            self._coordinator.mark_unknown()
            self._lookups.append(event)  # retried on the next poll, until the event's deadline
            return
        found, worst = self._committed(pending.response)
        if worst in _RETRIABLE:
            if worst in _COORDINATOR:
                self._coordinator.mark_unknown()
            self._lookups.append(event)
            return
        if worst:
            event.fail(ke.for_code(worst)("OffsetFetch"))
            return
        event.complete({tp: found.get(tp) for tp in event.partitions})
