"""Offset commits and committed-offset lookups for a group (OffsetCommit, OffsetFetch).

- ``commit()`` / ``commit_async()`` arrive as CommitEvents; auto-commit runs every
  ``auto_commit_interval_ms`` from here, committing the positions of records poll() already
  returned. Every error code goes through the error policy; the user's (ACLs, metadata too large)
  fail the commit at once, saying how to fix it. What a retriable one (the coordinator loading or
  moved, a request timed out) does depends on the commit, as in the Java client: ``commit()`` is
  retried with the same offsets after a per-commit backoff, exponential up to
  ``retry_backoff_max_ms``, until its deadline (the timeout then names the last error); a
  ``commit_async()`` is never retried (its callback gets the retriable error: a newer commit may
  have gone out since); a periodic auto-commit is not retried either, the next one is brought
  forward and takes the positions of then; the auto-commit of revoked partitions (and the one of
  close()) is retried with the positions of each attempt, UNKNOWN_TOPIC_OR_PARTITION ending it (a
  deleted topic's partitions cannot be committed, and the revocation must not wait for them).
- Per partition, offsets never go out older after newer: every commit is numbered when accepted,
  and an attempt leaves out the partitions a newer commit was already sent for (a retried
  ``commit()`` overtaken by then fails, CommitFailedError, rather than move the offset back).
- What a commit may do in each membership state is the ``commit`` attribute of
  specs/membership.yaml. As the Java client: a commit asked for while the member is rejoining (or
  answered REBALANCE_IN_PROGRESS, or answered ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID while it
  rejoins) fails at once with the retriable RebalanceInProgressError: the member may keep its
  partitions, and poll() completes the rebalance. CommitFailedError when the membership itself is gone.
- A commit carries the generation and member id of when it was accepted. Before every send (a
  retry too) the state is read again: if the membership moved meanwhile the commit fails instead of
  going out under the new generation (the broker does not check who owns a partition: an old owner's
  offset would overwrite the new owner's). A periodic auto-commit only ever sends partitions still
  assigned when it goes out.
- Newly assigned partitions without a position get it from the group's committed offset,
  else from the reset policy. A GROUP/TOPIC_AUTHORIZATION_FAILED answer to that OffsetFetch is
  held (raised by poll()) and not asked again while held.
- No clock: every time comes in as ``now``; a commit queued from a hook starts its timeout at
  the next poll, in the same loop iteration.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from typing import TYPE_CHECKING

from ..errors import CommitFailedError, KafkaTimeoutError, RebalanceInProgressError
from ..events import CallbackEvent, CommitEvent, FetchCommittedEvent
from ..policy import Action, Backoffs, classify, public_error
from ..structs import OffsetAndMetadata, TopicPartition
from ._base import FOREVER, Outgoing, error_of
from ._commit_entry import (
    ASYNC,
    AUTO,
    FRESH,
    GENERATION_MOVED,
    REBALANCE_IN_PROGRESS,
    SYNC,
    UNKNOWN_TOPIC_OR_PARTITION,
    PendingCommit,
    commit_request,
    describe,
    error_name,
    worst,
)
from ._committed import CommittedOffsets

if TYPE_CHECKING:
    from ._consumer_membership import ConsumerMembershipManager
    from ._membership import MembershipManager

log = logging.getLogger("fsm_consumer.commit")

_LOADING = 14  # COORDINATOR_LOAD_IN_PROGRESS: the same coordinator, later
_GROUP_AUTHORIZATION_FAILED = 30
_TOPIC_AUTHORIZATION_FAILED = 29
_SENDABLE = frozenset({"open", "revoking", "simple"})  # the membership spec's commit attribute values
_AUTO = frozenset({"open", "simple"})


class CommitManager:
    def __init__(self, config, *, subscription, coordinator, background_events, metrics, held) -> None:
        self._config = config
        self._subs = subscription
        self._coordinator = coordinator
        self._bg = background_events
        self._metrics = metrics
        self._held = held
        # set in group mode (either protocol's member): generation or epoch, member id
        self.membership: MembershipManager | ConsumerMembershipManager | None = None
        self._queue: list[PendingCommit] = []
        # a failing commit, lookup or partition is retried a few times a second at most (the error policy)
        self._retries = Backoffs(config.retry_backoff_ms, config.retry_backoff_max_ms)  # per commit
        # OffsetFetch: the committed offsets of new partitions, and the user's committed() lookups
        self._committed = CommittedOffsets(config, subscription, coordinator, held, lambda: self.membership)
        self._next_auto = math.inf
        self._last_auto: dict[TopicPartition, int] = {}
        self._auto_failing = False  # a retriable auto-commit failure was logged and none has succeeded since
        self._seq = 0  # commits accepted so far
        self._sent_seq: dict[TopicPartition, int] = {}  # per partition: the newest commit sent for it
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
        self._queue.append(
            PendingCommit(
                offsets,
                lambda err, ev=event: self._finish(ev, err),
                deadline=event.deadline_ms,
                started=now,
                event=event,
                stamp=self._stamp(),
                kind=SYNC if event.sync else ASYNC,
                seq=self._next_seq(),
            )
        )

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _mode(self) -> str:
        """What a commit may do now: the ``commit`` attribute of the membership's state."""
        m = self.membership
        if m is None:
            return "simple"
        mode = m.machine.attribute("commit")
        if mode == "simple" and self._subs.kind in ("topics", "pattern"):
            return "rebalancing"  # subscribed, waiting to join: a member soon, not a simple consumer
        return mode

    def _stamp(self) -> tuple[int, str]:
        """The membership a commit is accepted under: (generation, member id) with the classic protocol; with
        the consumer protocol the epoch moves on every assignment change, so (the join, member id)."""
        m = self.membership
        if m is None or m.generation < 0:
            return -1, ""
        return m.commit_stamp()

    def _refusal(self) -> BaseException | None:
        """Why a commit cannot be sent now (None: it can)."""
        mode = self._mode()
        if mode in _SENDABLE:
            return None
        m = self.membership
        assert m is not None  # without a membership the mode is "simple", which can send
        state = m.machine.state
        group = self._config.group_id
        if mode == "rebalancing":
            return RebalanceInProgressError(
                f"commit refused: group {group!r} is rebalancing and this member is rejoining (state {state}); "
                "call poll() to complete the rebalance, then commit again"
            )
        if mode == "gone":
            return CommitFailedError(
                f"commit refused: this member's membership of group {group!r} is gone ({state}: its session "
                "ran out or it stopped polling); its partitions are lost and poll() rejoins"
            )
        return m.fatal

    def _moved(self, commit: PendingCommit) -> BaseException | None:
        """Why a queued commit must not go out now: the state refuses commits, or the membership it was
        accepted under has moved on (Java re-checks generationIfStable() on every send)."""
        refused = self._refusal()
        if refused is not None:
            return refused
        if commit.stamp != self._stamp():
            (gen, member), (now_gen, now_member) = commit.stamp, self._stamp()
            return CommitFailedError(
                f"commit of {describe(commit.offsets)} not sent: it was accepted under generation {gen} of "
                f"group {self._config.group_id!r} (member {member or '-'}), and the membership has moved on "
                f"(generation {now_gen}, member {now_member or '-'}); the partitions may be owned by another "
                "member now, so their offsets are no longer this member's to commit"
            )
        m = self.membership
        gone = m.no_longer_owned(commit.offsets) if m is not None and commit.stamp[1] else frozenset()
        if gone:  # the consumer protocol: the epoch moves within a membership, the partitions are checked
            return CommitFailedError(
                f"commit of {describe(commit.offsets)} not sent: {describe(dict.fromkeys(gone))} were revoked "
                f"from this member of group {self._config.group_id!r} while the commit waited; another member "
                "may own them now, so their offsets are no longer this member's to commit"
            )
        return None

    def _generation_error(self, code: int) -> BaseException:
        if code == REBALANCE_IN_PROGRESS or self._mode() == "rebalancing":
            return RebalanceInProgressError(
                f"the commit was answered {error_of(code).__name__}: group {self._config.group_id!r} is "
                "rebalancing; call poll() to complete the rebalance, then commit again"
            )
        return CommitFailedError(
            "the commit was rejected: the group moved to a new generation (this member was fenced or the "
            f"group rebalanced) [{error_of(code).__name__}]"
        )

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
        """Commit before revocation completes (auto-commit on): bounded by default_api_timeout_ms, retried
        with the positions of those partitions at each attempt (as Java's auto-commit before revocation)."""
        tps = frozenset(positions)

        def now_positions() -> dict[TopicPartition, OffsetAndMetadata]:
            current = {tp: off for tp, off in self._subs.positions().items() if tp in tps}
            return {tp: OffsetAndMetadata(off, "", -1) for tp, off in {**positions, **current}.items()}

        self._queue.append(
            PendingCommit(
                now_positions(),
                on_done,
                timeout_ms=self._config.default_api_timeout_ms,
                stamp=self._stamp(),
                kind=FRESH,
                seq=self._next_seq(),
                refresh=now_positions,
            )
        )

    def on_fetch_committed(self, event: FetchCommittedEvent, now: float) -> None:
        self._committed.on_fetch_committed(event)

    def begin_close(self, autocommit: bool) -> None:
        self._closing = True
        self._next_auto = math.inf
        if autocommit and self._config.enable_auto_commit and self._config.group_id and self._may_auto_commit():
            # retried, with the positions of each attempt, until close's deadline (as Java's close)
            positions = {tp: off for tp, off in self._subs.positions().items() if self._last_auto.get(tp) != off}
            if positions:
                self.commit_positions(positions, on_done=lambda err, p=positions: self._auto_done(p, err))

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
        fetching = self._committed.has_work()  # also releases held errors no partition waits under
        if not self._queue and not fetching:
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
            commit.start(now)
            if now >= commit.deadline:
                self._time_out(commit, now)
                continue
            if now < commit.retry_at:
                wait = min(wait, min(commit.retry_at, commit.deadline) - now)
                continue
            if commit.refresh is not None:  # the positions of this attempt
                commit.offsets = commit.refresh()
            moved = self._moved(commit)
            if moved is None and commit.kind == AUTO:
                assigned = self._subs.assignment()
                commit.offsets = {tp: om for tp, om in commit.offsets.items() if tp in assigned}
                if not commit.offsets:
                    moved = CommitFailedError("auto-commit not sent: none of its partitions is assigned any more")
            if moved is None:
                moved = self._overtaken(commit)
            if moved is not None:
                self._queue.remove(commit)
                self._done(commit, moved, now)
                continue
            for tp in commit.offsets:
                self._sent_seq[tp] = commit.seq
            commit.in_flight = True
            commit.sent_at = now
            out.append(
                Outgoing(
                    commit_request(self._config, self.membership, commit.offsets, commit.stamp),
                    node,
                    # mypy cannot type a lambda with default arguments (python/mypy#15459)
                    lambda p, n, c=commit: self._on_commit(p, n, c),  # type: ignore[misc]
                    max_version=9,
                )
            )
        later, asks = self._committed.requests(now, node)
        return min(wait, later), out + asks

    def _overtaken(self, commit: PendingCommit) -> BaseException | None:
        """Leave out the partitions a newer commit was sent for already (an older offset must never land after
        a newer one); why the commit is not sent at all, when that is all of them."""
        kept = {tp: om for tp, om in commit.offsets.items() if self._sent_seq.get(tp, 0) <= commit.seq}
        if kept:
            commit.offsets = kept
            return None
        return CommitFailedError(
            f"commit of {describe(commit.offsets)} not sent again: a newer commit of those partitions went out "
            f"after its last attempt failed{f' ({error_name(commit.last_error)})' if commit.last_error else ''}, and "
            "an older offset must not land after it"
        )

    def _expire(self, now: float) -> None:
        for commit in list(self._queue):
            commit.start(now)
            if not commit.in_flight and now >= commit.deadline:
                self._time_out(commit, now)
            elif commit.event is not None and commit.last_error is None:
                commit.event.cause = self._no_coordinator()

    def _no_coordinator(self) -> str:
        why = getattr(self._coordinator, "last_error", None)
        return f"no coordinator for group {self._config.group_id!r}" + (f" ({why})" if why else "")

    def _time_out(self, commit: PendingCommit, now: float) -> None:
        """The deadline passed: a timeout that names what kept failing (chained as its cause)."""
        self._queue.remove(commit)
        what = (
            commit.event.what
            if commit.event is not None and commit.event.what
            else f"commit of {describe(commit.offsets)}"
        )
        last = commit.last_error
        why = f"last error {error_name(last)}" if last is not None else self._no_coordinator()
        error = KafkaTimeoutError(f"{what} timed out after {now - commit.started:.0f} ms: {why}")
        error.__cause__ = last
        self._done(commit, error, now)

    def _auto_commit(self, now: float) -> None:
        self._next_auto = now + self._config.auto_commit_interval_ms
        if self._may_auto_commit():
            self._queue_auto_commit()

    def _queue_auto_commit(self) -> None:
        """The positions handed out since the last auto-commit, unless one is still pending (no two at once,
        as Java), leaving out partitions with a commit of the user's pending (the user's offsets win)."""
        if any(c.kind == AUTO for c in self._queue):
            return
        users = {tp for c in self._queue if c.kind in (SYNC, ASYNC) for tp in c.offsets}
        positions = {
            tp: off for tp, off in self._subs.positions().items() if self._last_auto.get(tp) != off and tp not in users
        }
        if not positions:
            return
        offsets = {tp: OffsetAndMetadata(off, "", -1) for tp, off in positions.items()}
        commit = PendingCommit(
            offsets,
            None,
            timeout_ms=self._config.default_api_timeout_ms,
            stamp=self._stamp(),
            kind=AUTO,
            seq=self._next_seq(),
        )
        commit.on_done = lambda err, c=commit: self._auto_done({tp: om.offset for tp, om in c.offsets.items()}, err)
        self._queue.append(commit)

    def _may_auto_commit(self) -> bool:
        """Manual assignment (not a member: generation -1, as Kafka's simple consumers commit), or a
        member whose assignment is settled; never in the middle of a rebalance."""
        return self._mode() in _AUTO

    def _auto_done(self, positions, error) -> None:
        if error is None:
            self._last_auto.update(positions)
            self._retries.succeeded(AUTO)
            if self._auto_failing:
                self._auto_failing = False
                log.info("auto-commit succeeds again (%d partitions)", len(positions))
        elif getattr(error, "retriable", False) and self._auto_failing:
            log.debug("auto-commit of %d partitions failed again: %s", len(positions), error)
        else:
            # once per stretch of retriable failures (the next auto-commit is brought forward each time)
            self._auto_failing = bool(getattr(error, "retriable", False))
            log.warning("auto-commit of %d partitions failed: %s", len(positions), error)

    # -- requests and answers ---------------------------------------------------------------------------
    def _on_commit(self, pending, now: float, commit: PendingCommit) -> None:
        commit.in_flight = False
        if pending.error is not None:
            if classify(pending.error) is Action.FATAL:  # TLS/SASL: reconnecting cannot fix it
                self._queue.remove(commit)
                self._done(commit, pending.error, now)
                return
            self._coordinator.mark_unknown()  # its connection failed: find it again
            self._retry(commit, now, pending.error)
            return
        failed: dict[int, list[TopicPartition]] = defaultdict(list)
        for t in pending.response.topics:
            for p in t.partitions:
                if p.error_code:
                    failed[p.error_code].append(TopicPartition(t.name, p.partition_index))
        if not failed:
            self._queue.remove(commit)
            latency = now - commit.sent_at
            self.commit_latency_total_ms += latency
            self.commit_latency_max_ms = max(self.commit_latency_max_ms, latency)
            self._done(commit, None, now)
            return
        code = worst(failed)
        action = classify(code)
        if code in GENERATION_MOVED or code == REBALANCE_IN_PROGRESS:
            self._queue.remove(commit)
            self._done(commit, self._generation_error(code), now)
        elif action in (Action.FATAL, Action.RESET, Action.FENCED):  # the user's to fix: never retried
            self._queue.remove(commit)
            tps = None if code == _GROUP_AUTHORIZATION_FAILED else failed[code]
            self._done(
                commit, public_error(code, f"OffsetCommit for group {self._config.group_id!r}", partitions=tps), now
            )
        else:  # RETRY, REDISCOVER, REFRESH_METADATA: the same commit after a backoff
            if action is Action.REDISCOVER and code != _LOADING:
                self._coordinator.mark_unknown()
            self._retry(commit, now, error_of(code)(f"OffsetCommit for {describe(failed[code])}"), code)

    def _retry(self, commit: PendingCommit, now: float, error: BaseException, code: int | None = None) -> None:
        """A retriable failure, as the commit's kind says (see the module's docstring): a ``commit()`` (and a
        revocation's or close's commit, with fresh positions) is backed off per commit (a few tries a second
        at most) and poll() times it out at its deadline; a ``commit_async()`` and a periodic auto-commit end
        with the error (the next auto-commit brought forward)."""
        commit.last_error = error
        if commit.kind in (ASYNC, AUTO) or (commit.kind == FRESH and code == UNKNOWN_TOPIC_OR_PARTITION):
            self._queue.remove(commit)
            if commit.kind == AUTO:  # the next one, with the positions of then, after the backoff (doubling)
                self._next_auto = min(self._next_auto, self._retries.failed(AUTO, now))
            self._done(commit, error, now)
            return
        commit.retry_at = self._retries.failed(commit, now)
        if commit.event is not None:
            commit.event.cause = f"last error {error_name(error)}"

    def _done(self, commit: PendingCommit, error, now: float) -> None:
        self._retries.succeeded(commit)
        if error is None:
            self.commits_ok += 1
        else:
            self.commits_failed += 1
        history = getattr(self.membership, "history_file", None)
        if history is not None:
            # the commit's own membership and when it went out: one sent before a freeze may be
            # acknowledged after it, so a checker orders commits by sending
            generation, member_id = commit.stamp
            sent = commit.sent_at if commit.sent_at else None
            # offsets the application gave (not positions), and when it asked: a lower commit it asked for
            # after a higher one is its own wish; one asked before it that lands after is a reorder
            extra = {"explicit": True} if commit.event is not None and commit.event.offsets is not None else {}
            history.write(
                "commit",
                t=now,  # when the answer was read: a freeze before this line is written must not delay it
                member=member_id,
                generation=generation,
                error=None if error is None else repr(error),
                sent_ago_ms=None if sent is None else round(now - sent, 3),
                asked_ago_ms=None if commit.started is None else round(now - commit.started, 3),
                offsets=[[tp.topic, tp.partition, om.offset] for tp, om in sorted(commit.offsets.items())],
                **extra,
            )
        commit.on_done(error)
