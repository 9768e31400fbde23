"""Group mode wiring: the coordinator, membership and commit managers of a consumer with a group_id."""

from __future__ import annotations

from ..events import (CallbackAckEvent, CommitEvent, FetchCommittedEvent, SubscriptionChangedEvent,
                      UnsubscribeEvent)
from ..managers import CommitManager, CoordinatorManager, MembershipManager


class GroupParts:
    """The group's managers for one consumer, and how application events reach them."""

    def __init__(self, config, *, clock, subscription, metadata, lifecycle, background_machine, background_events,
                 app_queue, processor, metrics) -> None:
        self.coordinator = CoordinatorManager(config, background_machine, background_events)
        lifecycle.coordinator = self.coordinator
        self.commits = CommitManager(config, subscription=subscription, coordinator=self.coordinator,
                                     background_events=background_events, clock=clock, metrics=metrics)
        self.membership = MembershipManager(
            config, subscription=subscription, metadata=metadata, coordinator=self.coordinator,
            commits=self.commits, background_events=background_events, post_app_event=app_queue.put,
            clock=clock, metrics=metrics)
        self.commits.membership = self.membership
        lifecycle.closers.extend([self.membership, self.commits])
        self._unsubscribes: list[UnsubscribeEvent] = []
        processor.register(SubscriptionChangedEvent, self._subscription_changed)
        processor.register(UnsubscribeEvent, self._unsubscribe)
        processor.register(CallbackAckEvent, self.membership.on_callback_ack)
        processor.register(CommitEvent, self.commits.on_commit_event)
        processor.register(FetchCommittedEvent, self.commits.on_fetch_committed)
        processor.poll_listeners.append(lambda event, now: self.membership.on_app_poll(now))
        processor.poll_listeners.append(lambda event, now: self.commits.start_auto_commit(now))

    @property
    def managers(self) -> list:
        return [self.coordinator, self.membership, self.commits, _UnsubscribeWatch(self)]

    def _subscription_changed(self, event, now: float) -> None:
        self.commits.start_auto_commit(now)
        self.membership.on_subscription_changed(now)
        event.complete(None)

    def _unsubscribe(self, event, now: float) -> None:
        self.membership.on_unsubscribe(now)
        self._unsubscribes.append(event)


class _UnsubscribeWatch:
    """Completes unsubscribe() once the member has left (callbacks ran on the application thread)."""

    def __init__(self, parts: GroupParts) -> None:
        self._parts = parts

    def poll(self, now: float):
        parts = self._parts
        if parts._unsubscribes and parts.membership.close_done:
            for event in parts._unsubscribes:
                event.complete(None)
            parts._unsubscribes.clear()
        return float("inf"), []
