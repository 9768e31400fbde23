"""The assignment and positions, shared by the application and background threads.

Both threads touch it (as in the seeds' design): the application thread assigns, seeks, pauses
and advances positions after handing out records; the background thread reads what to fetch and
sets positions from resets. Every method takes the lock once; nothing here is per record.

Nothing outside holds a partition's state: each side asks and changes through the methods below,
and the ones that decide on what the other thread may have changed meanwhile check and change in
one step under the lock: ``take`` (the application hands out fetched records and moves the
position, or learns the data is stale), ``reset_if_at`` (the background thread resets a position
after OFFSET_OUT_OF_RANGE, or learns the partition moved on).

A partition's ``epoch`` only ever grows, also across unassignment and a later reassignment (a new
state starts past the last epoch its partition had), so data fetched under an old assignment can
never match a new one.
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import IllegalStateError
from ..structs import OffsetAndMetadata, TopicPartition
from ._partition import PartitionState


class Take(enum.Enum):
    """What ``SubscriptionState.take`` answers; true only for TAKEN."""

    TAKEN = "taken"  # the position moved (or, verifying only, may move): hand the records out
    STALE = "stale"  # the partition changed since the data was fetched: drop the data
    EXPIRED = "expired"  # the lease ran out: hand out nothing now, keep the data for a renewed lease

    def __bool__(self) -> bool:
        return self is Take.TAKEN


class SubscriptionState:
    def __init__(self, default_reset: str = "latest", notify=None, *, fetch_ahead: bool = False) -> None:
        self._lock = threading.RLock()
        self.fetch_ahead = fetch_ahead  # a partition is fetched ahead of its buffered fetch (specs/fetch.yaml)
        self._notify = notify or (lambda: None)  # wakes an application thread waiting in position()
        self._parts: dict[TopicPartition, PartitionState] = {}
        self._retired: dict[TopicPartition, int] = {}  # last epoch of a partition no longer assigned
        self.default_reset = default_reset
        self.kind: str | None = None  # None, 'assigned', 'topics', 'pattern'
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.listener: Any = None
        self.changes = 0  # bumps on every assignment change (for the engine)
        # the background thread set a position (tp, offset, why: a reset strategy or "committed"): a history
        self.on_position: Callable[[TopicPartition, int, str], None] | None = None
        # partitions that became or stopped being the consumer's outside a group's rebalance (by, added,
        # dropped): manual assign(), a subscription without a group, unsubscribe(); a history's ownership
        self.on_assignment: Callable[[str, set[TopicPartition], set[TopicPartition]], None] | None = None
        # records are handed out only before this time (engine clock ms): the group member's session
        # deadline, so a member frozen past it hands out nothing before its background thread has
        # declared the partitions lost (a plain float store, read without the lock)
        self.lease_until = float("inf")

    # -- subscription kind ---------------------------------------------------------------
    def _claim(self, kind: str) -> None:
        if self.kind not in (None, kind):
            raise IllegalStateError(
                f"cannot {'assign' if kind == 'assigned' else 'subscribe'}: the consumer already "
                f"{'has manual assignments' if self.kind == 'assigned' else 'is subscribed'}; "
                "call unsubscribe() first"
            )
        self.kind = kind

    def assign(self, partitions: Iterable[TopicPartition], *, awaiting_committed: bool = False) -> set[TopicPartition]:
        """Manual assignment; returns the partitions that were dropped."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        with self._lock:
            self._claim("assigned")
            if not wanted:
                self.kind = None
            before = set(self._parts)
            dropped = self._set_assignment(wanted, awaiting_committed)
        self._assignment_changed("assign", set(wanted) - before, dropped)
        return dropped

    def subscribe(
        self, topics: Iterable[str] = (), pattern: str | re.Pattern[str] | None = None, listener: Any = None
    ) -> None:
        with self._lock:
            if pattern is not None:
                self._claim("pattern")
                self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
                self.topics = frozenset()
            else:
                self._claim("topics")
                self.topics = frozenset(topics)
                self.pattern = None
            self.listener = listener
            self.changes += 1

    def swap_listener(self, listener: Any) -> Any:
        """Replace the rebalance listener of the subscription in place; returns the previous one."""
        with self._lock:
            previous, self.listener = self.listener, listener
            return previous

    def unsubscribe(self) -> set[TopicPartition]:
        with self._lock:
            dropped = set(self._parts)
            for tp in dropped:
                self._retire(tp)
            self._parts = {}
            self.kind, self.topics, self.pattern, self.listener = None, frozenset(), None, None
            self.changes += 1
        self._assignment_changed("unsubscribe", set(), dropped)
        return dropped

    def _assignment_changed(self, by: str, added: set[TopicPartition], dropped: set[TopicPartition]) -> None:
        if self.on_assignment is not None and (added or dropped):
            self.on_assignment(by, added, dropped)

    def set_group_assignment(
        self, partitions: Iterable[TopicPartition], *, awaiting_committed: bool = True, by: str | None = None
    ) -> set[TopicPartition]:
        """Install what the group assigned (subscribe mode; ``awaiting_committed=False`` when a consumer
        without a group assigns itself, ``by`` then naming it for ``on_assignment``); returns partitions
        dropped."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        with self._lock:
            before = set(self._parts)
            dropped = self._set_assignment(wanted, awaiting_committed)
        if by is not None:
            self._assignment_changed(by, set(wanted) - before, dropped)
        return dropped

    def _set_assignment(self, wanted: list[TopicPartition], awaiting_committed: bool) -> set[TopicPartition]:
        dropped = set(self._parts) - set(wanted)
        fresh: dict[TopicPartition, PartitionState] = {}
        for tp in wanted:
            state = self._parts.get(tp)
            if state is None:
                # past every epoch it had before: a fetch from an earlier assignment never matches
                state = PartitionState(
                    awaiting_committed=awaiting_committed,
                    epoch=self._retired.pop(tp, -1) + 1,
                    fetch_ahead=self.fetch_ahead,
                )
                if not awaiting_committed:
                    state.reset_strategy = self.default_reset
            fresh[tp] = state
        for tp in dropped:
            self._retire(tp)
        self._parts = fresh
        self.changes += 1
        return dropped

    def _retire(self, tp: TopicPartition) -> None:
        s = self._parts[tp]
        s.invalidate()
        self._retired[tp] = s.epoch

    # -- queries ---------------------------------------------------------------------------
    def assignment(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._parts)

    def state(self, tp: TopicPartition) -> PartitionState:
        """The partition's state object, for this module; others ask through the methods."""
        try:
            return self._parts[tp]
        except KeyError:
            raise IllegalStateError(f"partition {tp} is not assigned to this consumer") from None

    def position_at(self, tp: TopicPartition, epoch: int) -> int | None:
        """The position of ``tp`` if its epoch is still ``epoch`` (None: unassigned, or changed since).
        Read without the lock (the collector's check per fetch): a change racing it is caught by
        advance(), which takes the lock."""
        s = self._parts.get(tp)
        return s.position if s is not None and s.epoch == epoch else None

    def position(self, tp: TopicPartition) -> int | None:
        """The position of ``tp`` (None while unknown); IllegalStateError if it is not assigned."""
        with self._lock:
            return self.state(tp).position

    def lease_expired(self, now: float | None) -> bool:
        """Whether records may no longer be handed out at ``now`` (engine clock ms; None: no clock,
        no lease). ``lease_until`` is a plain float the background thread stores."""
        return now is not None and now >= self.lease_until

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark the last Fetch answer reported for ``tp``, None before one."""
        s = self.state(tp)
        return s.high_watermark if s.high_watermark >= 0 else None

    def consumed_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What a commit of 'everything handed out so far' commits: each position with its leader epoch."""
        with self._lock:
            return {
                tp: OffsetAndMetadata(s.position, "", s.leader_epoch)
                for tp, s in self._parts.items()
                if s.position is not None
            }

    def lag(self) -> dict[TopicPartition, int]:
        """Records between each position and the last known high watermark (for metrics)."""
        with self._lock:
            return {
                tp: max(0, s.high_watermark - s.position)
                for tp, s in self._parts.items()
                if s.position is not None and s.high_watermark >= 0
            }

    def topics_needed(self) -> set[str]:
        with self._lock:
            return {tp.topic for tp in self._parts} | set(self.topics)

    def paused(self) -> set[TopicPartition]:
        with self._lock:
            return {tp for tp, s in self._parts.items() if s.paused}

    def fetchable(self) -> list[tuple[TopicPartition, int, int, int]]:
        """(tp, fetch offset, leader_epoch, epoch) for partitions a Fetch may include now: from the
        position, or from the end of the one fetch buffered (specs/fetch.yaml)."""
        with self._lock:
            out = []
            for tp, s in self._parts.items():
                offset = s.fetch_offset()
                if offset is not None:
                    out.append((tp, offset, s.leader_epoch, s.epoch))
            return out

    def without_offset(self, partitions: Iterable[TopicPartition] | None = None) -> set[TopicPartition]:
        """Partitions (of ``partitions``, default all) needing a reset under the 'none' policy."""
        with self._lock:
            tps = self._parts if partitions is None else partitions
            return {tp for tp in tps if (s := self._parts.get(tp)) is not None and s.reset_strategy == "none"}

    def caught_up_and_buffered(self) -> tuple[set[TopicPartition], set[TopicPartition]]:
        """(partitions whose position reached the last known high watermark, partitions with a fetch
        outstanding or data buffered) - the fetch manager's long-poll decision. A partition fetched
        ahead is never caught up: it is fetched ahead only below the high watermark."""
        with self._lock:
            caught = {
                tp for tp, s in self._parts.items() if s.position is not None and 0 <= s.high_watermark <= s.position
            }
            busy = {tp for tp, s in self._parts.items() if s.fetching.attribute("outstanding") == "some"}
            return caught, busy

    def needing_reset(self) -> dict[TopicPartition, str]:
        with self._lock:
            return {
                tp: s.reset_strategy for tp, s in self._parts.items() if s.reset_strategy is not None and not s.revoking
            }

    def awaiting_committed(self) -> set[TopicPartition]:
        with self._lock:
            return {tp for tp, s in self._parts.items() if s.awaiting_committed}

    def positions(self) -> dict[TopicPartition, int]:
        with self._lock:
            return {tp: s.position for tp, s in self._parts.items() if s.position is not None}

    # -- changes from the application thread ----------------------------------------------------
    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int = -1) -> None:
        with self._lock:
            s = self.state(tp)
            s.position, s.leader_epoch = offset, leader_epoch
            s.reset_strategy, s.awaiting_committed = None, False
            s.invalidate()

    def position_is(self, tp: TopicPartition, offset: int, epoch: int | None = None) -> bool:
        """Whether ``tp`` is assigned and at ``offset`` (and, given ``epoch``, unchanged since it)."""
        with self._lock:
            s = self._parts.get(tp)
            return s is not None and s.position == offset and (epoch is None or s.epoch == epoch)

    def reset_if_at(self, tp: TopicPartition, offset: int, strategy: str, epoch: int | None = None) -> bool:
        """The background thread's reset after OFFSET_OUT_OF_RANGE: only if ``tp`` is still assigned,
        still at ``offset`` and (given ``epoch``, the one its Fetch was sent under) unchanged since; the
        application may have sought, paused, reset or unassigned it meanwhile. Never raises: False then."""
        with self._lock:
            s = self._parts.get(tp)
            if s is None or s.position != offset or (epoch is not None and s.epoch != epoch):
                return False
            s.position, s.reset_strategy, s.awaiting_committed = None, strategy, False
            s.invalidate()
            return True

    def request_reset(self, partitions: Iterable[TopicPartition], strategy: str) -> None:
        with self._lock:
            for tp in partitions:
                s = self.state(tp)
                # the old position is no answer any more: position() waits for the reset
                s.position, s.reset_strategy, s.awaiting_committed = None, strategy, False
                s.invalidate()

    def set_paused(self, partitions: Iterable[TopicPartition], paused: bool) -> None:
        with self._lock:
            for tp in partitions:
                s = self.state(tp)
                if s.paused != paused:
                    s.paused = paused
                    if paused:
                        s.invalidate()  # data fetched before the pause is not returned

    def take(
        self,
        tp: TopicPartition,
        epoch: int,
        start: int | None,
        end: int | None,
        leader_epoch: int = -1,
        now: float | None = None,
    ) -> Take:
        """Hand out the records ``[start, end)`` of data fetched under ``epoch``: one step under the lock.

        TAKEN, and the position moves to ``end``, only if ``tp`` is still assigned, its epoch is still
        ``epoch`` (not sought, reset, paused, revoked or reassigned since), it is neither paused nor
        being revoked, its position is still ``start`` (None: not checked) and the lease holds at
        ``now`` (None: not checked). Otherwise nothing changes: STALE (drop the data) or EXPIRED (keep
        it; nothing may be handed out until the background thread renews or ends the lease).
        ``end=None`` checks without moving the position (records lent to a caller that moves it)."""
        with self._lock:
            s = self._parts.get(tp)
            if s is None or s.epoch != epoch or s.paused or s.revoking or (start is not None and s.position != start):
                return Take.STALE
            if now is not None and now >= self.lease_until:
                return Take.EXPIRED
            if end is not None:
                s.position, s.leader_epoch = end, leader_epoch
            return Take.TAKEN

    def advance(self, tp: TopicPartition, epoch: int, position: int, leader_epoch: int) -> bool:
        """After handing out records up to ``position``; False if the partition changed meanwhile.
        ``take`` without the position and lease checks."""
        return bool(self.take(tp, epoch, None, position, leader_epoch))

    # -- changes from the background thread -------------------------------------------------------
    def fetch_sent(self, sent: Iterable[tuple[TopicPartition, int]]) -> None:
        """A Fetch went out listing these (partition, epoch) pairs, each from ``fetchable``'s offset. A
        partition whose epoch moved since (sought, paused meanwhile) is left as it is: the answer, under
        the old epoch, will fire nothing."""
        with self._lock:
            for tp, epoch in sent:
                s = self._parts.get(tp)
                if s is not None and s.epoch == epoch:
                    s.fetching.fire("sent")

    def fetch_answered(self, tp: TopicPartition, epoch: int, end: int) -> None:
        """The Fetch of ``tp`` under ``epoch`` brought data, now buffered, whose whole batches end at
        ``end`` (-1: none whole): a Fetch ahead may start there."""
        with self._lock:
            s = self._parts.get(tp)
            if s is not None and s.epoch == epoch:
                s.fetched_end = end
                s.fetching.fire("answered")

    def fetch_unanswered(self, tp: TopicPartition, epoch: int) -> None:
        """The Fetch of ``tp`` under ``epoch`` brought nothing (no new data, an error, no answer)."""
        with self._lock:
            s = self._parts.get(tp)
            if s is not None and s.epoch == epoch:
                s.fetching.fire("unanswered")

    def release_fetch(self, tp: TopicPartition, epoch: int, *, to_back: bool = False) -> None:
        """The oldest buffered fetch of ``tp`` under ``epoch`` was used up or dropped.

        ``to_back`` (its data was handed out): ``tp`` goes last in fetch order, so the next Fetch
        lists the partitions that waited longest first (Java's movePartitionToEnd). A broker that
        fills its answer in request order (Tansu returns whole batches until ~5 MiB) would
        otherwise starve the partitions listed last."""
        with self._lock:
            s = self._parts.get(tp)
            if s is not None and s.epoch == epoch:
                s.fetching.fire("released")
                if to_back and len(self._parts) > 1:
                    # a new dict swapped in whole: readers that skip the lock never miss a partition
                    parts = dict(self._parts)
                    del parts[tp]
                    parts[tp] = s
                    self._parts = parts

    def set_reset_position(self, tp: TopicPartition, strategy: str, offset: int, leader_epoch: int = -1) -> bool:
        with self._lock:
            s = self._parts.get(tp)
            if s is None or s.reset_strategy != strategy:
                return False  # reassigned, sought or reset differently meanwhile
            s.position, s.leader_epoch, s.reset_strategy = offset, leader_epoch, None
            s.invalidate()
        self._notify()
        if self.on_position is not None:
            self.on_position(tp, offset, strategy)
        return True

    def set_committed_position(self, tp: TopicPartition, offset: int | None, leader_epoch: int = -1) -> None:
        with self._lock:
            s = self._parts.get(tp)
            if s is None or not s.awaiting_committed:
                return
            s.awaiting_committed = False
            if offset is None or offset < 0:
                s.reset_strategy = self.default_reset
            else:
                s.position, s.leader_epoch = offset, leader_epoch
                s.invalidate()
        self._notify()
        if self.on_position is not None and offset is not None and offset >= 0:
            self.on_position(tp, offset, "committed")

    def update_watermarks(self, tp: TopicPartition, high: int, lso: int, log_start: int) -> None:
        s = self._parts.get(tp)
        if s is not None:  # plain int stores: atomic under the GIL, read only for lag metrics
            s.high_watermark, s.last_stable_offset, s.log_start_offset = high, lso, log_start

    def set_revoking(self, partitions: Iterable[TopicPartition], revoking: bool) -> None:
        with self._lock:
            for tp in partitions:
                s = self._parts.get(tp)
                if s is not None:
                    s.revoking = revoking
                    if revoking:
                        s.invalidate()
