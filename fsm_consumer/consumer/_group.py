"""Group mode wiring: the coordinator, membership and commit managers of a consumer with a group_id."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..events import CallbackAckEvent, CommitEvent, FetchCommittedEvent, SubscriptionChangedEvent, UnsubscribeEvent
from ..managers import CommitManager, ConsumerMembershipManager, CoordinatorManager, MembershipManager

if TYPE_CHECKING:
    from .._config import ConsumerConfig
    from .._history_writer import HistoryWriter
    from .._metrics import Metrics
    from ..engine import ApplicationEventProcessor, BackgroundLifecycle
    from ..events import ApplicationEventQueue, BackgroundEventQueue
    from ..machines import SpecMachine
    from ..managers import MetadataManager, Outgoing, RequestManager
    from ..state import HeldErrors, SubscriptionState


class GroupParts:
    """The group's managers for one consumer, and how application events reach them."""

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        subscription: SubscriptionState,
        metadata: MetadataManager,
        lifecycle: BackgroundLifecycle,
        background_machine: SpecMachine,
        background_events: BackgroundEventQueue,
        app_queue: ApplicationEventQueue,
        processor: ApplicationEventProcessor,
        metrics: Metrics,
        held: HeldErrors,
        history: HistoryWriter | None = None,
    ) -> None:
        self.coordinator = CoordinatorManager(config, background_machine, held)
        lifecycle.coordinator = self.coordinator
        self.commits = CommitManager(
            config,
            subscription=subscription,
            coordinator=self.coordinator,
            background_events=background_events,
            metrics=metrics,
            held=held,
        )
        member = MembershipManager if config.group_protocol == "classic" else ConsumerMembershipManager
        self.membership: MembershipManager | ConsumerMembershipManager = member(
            config,
            subscription=subscription,
            metadata=metadata,
            coordinator=self.coordinator,
            commits=self.commits,
            background_events=background_events,
            post_app_event=app_queue.put,
            metrics=metrics,
            held=held,
            history=history,
        )
        self.membership.machine.observer = history.transition if history is not None else None
        self.commits.membership = self.membership
        lifecycle.closers.extend([self.membership, self.commits])
        self.unsubscribes: list[UnsubscribeEvent] = []  # waiting for the member to have left
        self._metrics = metrics
        self._protocol = config.group_protocol
        processor.register(SubscriptionChangedEvent, self._subscription_changed)
        processor.register(UnsubscribeEvent, self._unsubscribe)
        processor.register(CallbackAckEvent, self.membership.on_callback_ack)
        processor.register(CommitEvent, self.commits.on_commit_event)
        processor.register(FetchCommittedEvent, self.commits.on_fetch_committed)
        processor.poll_listeners.append(lambda event, now: self.membership.on_app_poll(now))
        processor.poll_listeners.append(lambda event, now: self.commits.start_auto_commit(now))

    def metrics(self, now: float) -> dict[str, Any]:
        """Group figures for Consumer.metrics_flat() (read from the application thread: plain values)."""
        m, c = self.membership, self.commits
        last_poll = m.last_poll
        last_heartbeat = m.heartbeat.last_ok
        return {
            "member-state": m.machine.state,
            "session-expiries": m.session_expiries,
            "coordinator-state": self.coordinator.state,
            "generation": m.generation,
            "rebalance-total": m.rebalances,
            "rebalance-latency-avg": m.rebalance_total_ms / m.rebalances if m.rebalances else 0.0,
            "last-rebalance-ms": m.rebalance_last_ms,
            "heartbeat-response-time-ms": m.heartbeat.last_rtt_ms,
            "last-heartbeat-seconds-ago": math.inf if last_heartbeat is None else (now - last_heartbeat) / 1000,
            "time-since-last-poll-ms": None if last_poll is None else now - last_poll,
            "commit-total": c.commits_ok,
            "commit-failed-total": c.commits_failed,
            "commit-rate": c.commits_ok / self._metrics.age_s(),
            "commit-latency-avg": c.commit_latency_total_ms / c.commits_ok if c.commits_ok else 0.0,
            "commit-latency-max": c.commit_latency_max_ms,
            "group-protocol": self._protocol,
            # the consumer protocol (KIP-848): a rebalance is this member's reconciliation
            "member-epoch": m.generation if self._protocol == "consumer" else None,
            "assignment-epoch": getattr(m, "assignment_epoch", None),
        }

    @property
    def managers(self) -> list[RequestManager]:
        return [self.coordinator, self.membership, self.commits, _UnsubscribeWatch(self)]

    def _subscription_changed(self, event: SubscriptionChangedEvent, now: float) -> None:
        self.commits.start_auto_commit(now)
        self.membership.on_subscription_changed(now)
        event.complete(None)

    def _unsubscribe(self, event: UnsubscribeEvent, now: float) -> None:
        self.membership.on_unsubscribe(now)
        self.unsubscribes.append(event)


class _UnsubscribeWatch:
    """Completes unsubscribe() once the member has left (callbacks ran on the application thread)."""

    def __init__(self, parts: GroupParts) -> None:
        self._parts = parts

    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        parts = self._parts
        if parts.unsubscribes and parts.membership.close_done:
            for event in parts.unsubscribes:
                event.complete(None)
            parts.unsubscribes.clear()
        return float("inf"), []
