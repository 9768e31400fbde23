"""The group half of the Consumer API: subscribe, unsubscribe, commits, committed offsets, group metadata.

Without a group_id, subscribe() still works as in kafka-python: the consumer assigns itself every
partition of the topics (managers/_self_assign.py); commits need a group."""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast, overload

from kafka.future import Future
from kafka.structs import ConsumerGroupMetadata, MemberState

from ..errors import IllegalStateError, KafkaTimeoutError
from ..events import CommitEvent, FetchCommittedEvent, SubscriptionChangedEvent, UnsubscribeEvent
from ..fetch import OffsetAndMetadata, TopicPartition
from ._arguments import topic_partition

if TYPE_CHECKING:
    from .._config import ConsumerConfig, OffsetCommitCallback
    from ..events import ApplicationEvent, ApplicationEventQueue, Signal
    from ..fetch._collector import FetchCollector
    from ..machines import MonotonicClock
    from ..state import HeldErrors, SubscriptionState
    from ._group import GroupParts


class RebalanceListener(Protocol):
    """What ``subscribe(listener=...)`` takes: a ConsumerRebalanceListener (this package's or
    kafka-python's) or any object with these methods, called with a set of TopicPartition.
    ``on_partitions_lost``, if it has one, is called instead of ``on_partitions_revoked`` for lost
    partitions."""

    def on_partitions_revoked(self, revoked: set[TopicPartition], /) -> object: ...

    def on_partitions_assigned(self, assigned: set[TopicPartition], /) -> object: ...


class ConsumerRebalanceListener:
    """Override what you need; the methods run on the application thread inside poll(),
    unsubscribe() or close(). ``on_partitions_lost`` defaults to ``on_partitions_revoked``."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.on_partitions_revoked(lost)


def check_subscription(
    topics: Iterable[str], pattern: str | re.Pattern[str] | None
) -> tuple[list[str], str | re.Pattern[str] | None]:
    """subscribe()'s arguments, checked: (topics, pattern)."""
    if isinstance(topics, str):
        topics = [topics]
    topics = list(topics)
    if bool(topics) == (pattern is not None):
        raise ValueError("give either topics or a pattern")
    for t in topics:
        if not isinstance(t, str) or not t:
            raise TypeError(f"topic names are non-empty strings, got {t!r}")
    if isinstance(pattern, str):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
    return topics, pattern


@overload
def _offsets(offsets: None) -> None: ...
@overload
def _offsets(offsets: Mapping[Any, Any]) -> dict[TopicPartition, OffsetAndMetadata]: ...
def _offsets(offsets: Mapping[Any, Any] | None) -> dict[TopicPartition, OffsetAndMetadata] | None:
    if offsets is None:
        return None
    out = {}
    for tp, value in offsets.items():
        tp = topic_partition(tp)
        if isinstance(value, int) and not isinstance(value, bool):
            value = OffsetAndMetadata(value, "", -1)
        elif not isinstance(value, tuple) or not isinstance(value[0], int):
            raise TypeError(f"commit offsets must be ints or OffsetAndMetadata, got {value!r} for {tp}")
        else:
            value = OffsetAndMetadata(
                value[0],
                value[1] if len(value) > 1 and value[1] is not None else "",
                value[2] if len(value) > 2 and value[2] is not None else -1,
            )
        out[tp] = value
    return out


def _describe(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}@{om.offset}" for tp, om in sorted(offsets.items())) or "nothing"


# kafka-python's three member states, from the membership spec's states
_MEMBER_STATES = {
    "stable": MemberState.STABLE,
    "unjoined": MemberState.UNJOINED,
    "fatal": MemberState.UNJOINED,
    "fenced": MemberState.UNJOINED,
    "stale": MemberState.UNJOINED,
}


def held_key(key: Hashable) -> tuple[Any, ...]:
    """A HeldErrors key as the tuple every one is: ("partition", tp), ("topic", name), ("group",)..."""
    return cast("tuple[Any, ...]", key)


class GroupApi:
    """Mixed into Consumer; uses its ``_call``, ``_group`` and ``_subs``."""

    if TYPE_CHECKING:  # Consumer's, set in its __init__ and defined in its body
        config: ConsumerConfig
        _group: GroupParts | None
        _subs: SubscriptionState
        _held: HeldErrors
        _collector: FetchCollector
        _app_queue: ApplicationEventQueue
        _clock: MonotonicClock
        _signal: Signal

        def _ensure_open(self) -> None: ...
        def _deadline(self, timeout_ms: float | None) -> float: ...
        def _handle_background_events(self) -> None: ...
        def _check_wakeup(self) -> None: ...
        def _call(
            self, event: ApplicationEvent, timeout_ms: float | None, what: str, default_ms: float | None = None
        ) -> Any: ...

    def _need_group(self, what: str) -> GroupParts:
        if self._group is None:
            raise IllegalStateError(f"{what} needs a group_id")
        return self._group

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | re.Pattern[str] | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        """Join the group for ``topics`` (or every topic matching ``pattern``); rebalance callbacks go
        to ``listener`` (a ConsumerRebalanceListener). Without a group_id, every partition of the
        topics is assigned to this consumer, following metadata (partitions added, topics matching)."""
        self._ensure_open()
        topics, pattern = check_subscription(topics, pattern)
        self._subs.subscribe(topics, pattern, listener)
        self._app_queue.put(SubscriptionChangedEvent(future=None))

    def swap_rebalance_listener(self, listener: RebalanceListener | None) -> RebalanceListener | None:
        """Replace the rebalance listener given to ``subscribe()`` without changing the subscription;
        returns the previous one. For wrappers that must see rebalances (``ParallelConsumer``)."""
        self._ensure_open()
        previous: RebalanceListener | None = self._subs.swap_listener(listener)
        return previous

    def subscription(self) -> set[str] | None:
        if self._subs.kind == "pattern":
            if self._group is not None:
                return set(self._group.membership.joined_topics)
            return {tp.topic for tp in self._subs.assignment()}
        return set(self._subs.topics) if self._subs.kind == "topics" else None

    def unsubscribe(self, timeout_ms: float | None = None) -> None:
        """Leave the group: offsets are auto-committed, on_partitions_revoked runs here, LeaveGroup is sent. If
        the leave is not answered within ``timeout_ms`` the consumer is unsubscribed all the same (as Java's)
        and KafkaTimeoutError says so: the group drops the member when its session runs out."""
        self._ensure_open()
        timed_out: BaseException | None = None
        if self._subs.kind in ("topics", "pattern") and self._group is not None:
            try:
                self._wait_running_callbacks(UnsubscribeEvent(), timeout_ms, "unsubscribe() (leaving the group)")
            except KafkaTimeoutError as exc:
                timed_out = exc
        self._subs.unsubscribe()
        self._held.release_where(lambda key: held_key(key)[0] in ("partition", "topic"))  # given up with them
        self._collector.drop_partitions(lambda tp: False)
        if timed_out is not None:
            raise KafkaTimeoutError(
                f"{timed_out}; the consumer is unsubscribed all the same, and the group drops this member when its "
                "session runs out"
            ) from timed_out

    def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None, timeout_ms: float | None = None
    ) -> None:
        """Commit ``offsets`` (default: the positions of everything handed out by this call's time)
        and wait. While the group rebalances this raises the retriable RebalanceInProgressError at
        once (as the Java client): poll() completes the rebalance, then commit again."""
        self._ensure_open()  # as commit_async() and Java's acquireAndEnsureOpen: a closed consumer says so first
        self._need_group("commit()")
        # without offsets, the background thread takes the positions when it sends (as Java's CommitRequestManager):
        # this thread waits meanwhile, so nothing more is handed out, and a partition the background released
        # in between (a revocation's ack) is not committed by a member that no longer owns it
        offsets = None if offsets is None else _offsets(offsets)
        what = _describe(self._subs.consumed_offsets() if offsets is None else offsets)  # for a timeout's words
        self._wait_running_callbacks(CommitEvent(offsets=offsets, sync=True), timeout_ms, f"commit of {what}")

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        callback: OffsetCommitCallback | None = None,
    ) -> Future:
        """Commit without waiting: ``offsets``, or the positions of everything handed out at the time
        of this call. ``callback(offsets, exception_or_None)`` (default: the config's
        default_offset_commit_callback) runs in a later poll(), on this thread; so does the
        completion of the returned kafka-python ``Future`` (value: the offsets)."""
        self._ensure_open()
        self._need_group("commit_async()")
        offsets = self._subs.consumed_offsets() if offsets is None else _offsets(offsets)
        future = Future()
        user_callback = callback if callback is not None else self.config.default_offset_commit_callback

        def completed(done_offsets: dict[TopicPartition, OffsetAndMetadata], error: BaseException | None) -> None:
            if error is None:
                future.success(done_offsets)
            else:
                future.failure(error)
            if user_callback is not None:
                user_callback(done_offsets, error)

        event = CommitEvent(offsets=offsets, sync=False, callback=completed, deadline_ms=self._deadline(None))
        self._app_queue.put(event)
        return future

    @overload
    def committed(
        self, partition: TopicPartition, metadata: Literal[False] = False, timeout_ms: float | None = None
    ) -> int | None: ...
    @overload
    def committed(
        self, partition: TopicPartition, metadata: Literal[True], timeout_ms: float | None = None
    ) -> OffsetAndMetadata | None: ...
    @overload
    def committed(
        self, partition: TopicPartition, metadata: bool = False, timeout_ms: float | None = None
    ) -> int | OffsetAndMetadata | None: ...
    def committed(
        self, partition: TopicPartition, metadata: bool = False, timeout_ms: float | None = None
    ) -> int | OffsetAndMetadata | None:
        """The group's committed offset of ``partition`` (an OffsetAndMetadata with metadata=True), or None."""
        self._need_group("committed()")
        tp = topic_partition(partition)
        found: OffsetAndMetadata | None = self._call(
            FetchCommittedEvent(partitions=frozenset([tp])), timeout_ms, f"committed({tp.topic}-{tp.partition})"
        )[tp]
        if found is None:
            return None
        return found if metadata else found.offset

    def group_metadata(self) -> ConsumerGroupMetadata:
        """kafka-python's snapshot of the membership: group id, generation, member id, instance id, state."""
        if self._group is None:
            return ConsumerGroupMetadata(group_id=None)
        m = self._group.membership
        return ConsumerGroupMetadata(
            self.config.group_id,
            m.generation,
            m.member_id,
            self.config.group_instance_id,
            _MEMBER_STATES.get(m.machine.state, MemberState.REBALANCING),
        )

    def _wait_running_callbacks(self, event: ApplicationEvent, timeout_ms: float | None, what: str) -> Any:
        """Like _call, but runs rebalance callbacks the background thread asks for meanwhile."""
        self._ensure_open()
        event.what = what
        event.timeout_ms = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        event.deadline_ms = self._deadline(timeout_ms)
        assert event.future is not None  # the events waited for here carry one (the default)
        event.future.wake = self._signal.set
        self._app_queue.put(event)
        while True:
            self._signal.clear()
            if event.future.done:
                return event.future.result()
            self._handle_background_events()
            remaining = event.deadline_ms - self._clock.now_ms()
            if remaining <= 0:
                raise event.timeout_error()
            self._check_wakeup()
            self._signal.wait(min(remaining, 50.0) / 1000.0)
