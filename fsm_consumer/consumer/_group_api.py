"""The group half of the Consumer API: subscribe, unsubscribe, commits, committed offsets."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..errors import IllegalStateError, KafkaTimeoutError
from ..events import CommitEvent, FetchCommittedEvent, SubscriptionChangedEvent, UnsubscribeEvent
from ..fetch import OffsetAndMetadata, TopicPartition


class ConsumerRebalanceListener:
    """Override what you need; the methods run on the application thread inside poll(),
    unsubscribe() or close(). ``on_partitions_lost`` defaults to ``on_partitions_revoked``."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.on_partitions_revoked(lost)


def _offsets(offsets: dict | None) -> dict | None:
    if offsets is None:
        return None
    out = {}
    for tp, value in offsets.items():
        tp = TopicPartition(*tp)
        if isinstance(value, int) and not isinstance(value, bool):
            value = OffsetAndMetadata(value, "", -1)
        elif not isinstance(value, tuple) or not isinstance(value[0], int):
            raise TypeError(f"commit offsets must be ints or OffsetAndMetadata, got {value!r} for {tp}")
        else:
            value = OffsetAndMetadata(value[0], value[1] if len(value) > 1 and value[1] is not None else "",
                                      value[2] if len(value) > 2 else -1)
        out[tp] = value
    return out


class GroupApi:
    """Mixed into Consumer; uses its ``_call``, ``_group`` and ``_subs``."""

    def _need_group(self, what: str):
        if self._group is None:
            raise IllegalStateError(f"{what} needs a group_id")
        return self._group

    def subscribe(self, topics: Iterable[str] = (), pattern: str | re.Pattern[str] | None = None,
                  listener: Any = None) -> None:
        """Join the group for ``topics`` (or every topic matching ``pattern``); rebalance callbacks go
        to ``listener`` (a ConsumerRebalanceListener)."""
        self._ensure_open()
        self._need_group("subscribe()")
        if isinstance(topics, str):
            topics = [topics]
        topics = list(topics)
        if bool(topics) == (pattern is not None):
            raise ValueError("give either topics or a pattern")
        for t in topics:
            if not isinstance(t, str) or not t:
                raise TypeError(f"topic names are non-empty strings, got {t!r}")
        self._subs.subscribe(topics, pattern, listener)
        self._app_queue.put(SubscriptionChangedEvent(future=None))

    def subscription(self) -> set[str] | None:
        if self._subs.kind == "pattern":
            return set(self._group.membership._joined_topics) if self._group else set()
        return set(self._subs.topics) if self._subs.kind == "topics" else None

    def unsubscribe(self, timeout_ms: float | None = None) -> None:
        """Leave the group: on_partitions_revoked runs here, offsets are auto-committed, LeaveGroup is sent."""
        self._ensure_open()
        if self._subs.kind in ("topics", "pattern") and self._group is not None:
            self._wait_running_callbacks(UnsubscribeEvent(), timeout_ms)
        self._subs.unsubscribe()
        self._collector.drop_partitions(lambda tp: False)

    def commit(self, offsets: dict | None = None, timeout_ms: float | None = None) -> None:
        """Commit ``offsets`` (or the positions of everything returned so far) and wait."""
        self._need_group("commit()")
        self._wait_running_callbacks(CommitEvent(offsets=_offsets(offsets), sync=True), timeout_ms)

    def commit_async(self, offsets: dict | None = None, callback: Any = None) -> None:
        """Commit without waiting; ``callback(offsets, exception_or_None)`` runs in a later poll()."""
        self._ensure_open()
        self._need_group("commit_async()")
        event = CommitEvent(offsets=_offsets(offsets), sync=False, callback=callback,
                            deadline_ms=self._deadline(None))
        self._app_queue.put(event)

    def committed(self, partition: TopicPartition, metadata: bool = False, timeout_ms: float | None = None):
        """The group's committed offset of ``partition`` (an OffsetAndMetadata with metadata=True), or None."""
        self._need_group("committed()")
        tp = TopicPartition(*partition)
        found = self._call(FetchCommittedEvent(partitions=frozenset([tp])), timeout_ms)[tp]
        if found is None:
            return None
        return found if metadata else found.offset

    def _wait_running_callbacks(self, event, timeout_ms: float | None):
        """Like _call, but runs rebalance callbacks the background thread asks for meanwhile."""
        self._ensure_open()
        event.deadline_ms = self._deadline(timeout_ms)
        self._app_queue.put(event)
        while True:
            self._signal.clear()
            if event.future.done:
                return event.future.result()
            self._handle_background_events()
            remaining = event.deadline_ms - self._clock.now_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{type(event).__name__} did not complete within the timeout")
            self._check_wakeup()
            self._signal.wait(min(remaining, 50.0) / 1000.0)
