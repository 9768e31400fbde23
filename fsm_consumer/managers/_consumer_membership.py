"""Group membership with the consumer protocol (KIP-848): the model of specs/consumer_membership.yaml.

Who the member is (member id, epoch), what it owns and the target assignment the coordinator sent, and
what it does on the spec's transitions: reconcile toward the target (revoke, commit, assign, then
acknowledge in the next heartbeat), lose its partitions when fenced, leave. ConsumerGroupHeartbeat is
sent from ``poll(now)`` by its ``HeartbeatExchange`` (_consumer_heartbeat.py); its answers fire the
spec's triggers. Rebalance callbacks run on the application thread as in the classic member
(_callbacks.py). The rest of the consumer reads it as it reads the classic ``MembershipManager``.
"""

from __future__ import annotations

import logging
import uuid

from ..events import CallbackAckEvent
from ..history._writer import HistoryWriter, tp_list
from ..machines import SpecMachine, shipped_spec
from ..policy import public_error
from ..structs import TopicPartition
from ._base import Outgoing
from ._callbacks import ACK_TRIGGER, RebalanceCallbacks
from ._consumer_heartbeat import HeartbeatExchange
from ._heartbeat import HeartbeatTimer
from ._leader import subscribed_topics

log = logging.getLogger("fsm_consumer.membership")


class ConsumerMembershipManager:
    def __init__(
        self,
        config,
        *,
        subscription,
        metadata,
        coordinator,
        commits,
        background_events,
        post_app_event,
        metrics,
        held,
        history: HistoryWriter | None = None,
    ) -> None:
        self._config = config
        self._subs = subscription
        self._metadata = metadata
        self._coordinator = coordinator
        self._commits = commits
        self._metrics = metrics
        self._held = held
        self._callbacks = RebalanceCallbacks(subscription, background_events, post_app_event)
        # KIP-1082: the member makes its own id, kept for its whole life (a rejoin after fencing keeps it)
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.joins = 0  # memberships begun: a commit is accepted under one (the epoch moves within it)
        self.leader_id: str | None = None  # no leader in this protocol
        self.owned: frozenset[TopicPartition] = frozenset()
        self.assignment_epoch = -1  # the epoch of the target the member last reconciled to
        self.target: frozenset[TopicPartition] | None = None  # the newest target, resolved to names
        self.target_epoch = -1
        self.target_unresolved: dict[str, tuple[int, ...]] = {}  # topic id -> partitions, not yet named
        self._reconciling_to: frozenset[TopicPartition] = frozenset()
        self._to_revoke: frozenset[TopicPartition] = frozenset()
        self._added: frozenset[TopicPartition] = frozenset()
        self._lost: frozenset[TopicPartition] = frozenset()
        self.topic_ids: dict[str, str] = {}  # topic name -> id, of the topics assignments named
        self.heartbeat_interval_ms = 0.0  # the coordinator's; 0 until its first answer (the spec's default)
        self.heartbeat_due = False
        self._commit_on_revoke = True
        self._closing = False
        self._revocation_commit = 0
        self._last_poll: float | None = None
        self.fatal: BaseException | None = None
        # figures for metrics(): the same names as the classic member's
        self.heartbeat = HeartbeatTimer(0, config.retry_backoff_ms)
        self.rebalance_started: float | None = None
        self.rebalances = 0
        self.rebalance_last_ms: float | None = None
        self.rebalance_total_ms = 0.0
        self.session_expiries = 0
        self.history: list = []
        self.history_file = history
        self.machine = SpecMachine(shipped_spec("consumer_membership"), self, config=config, instance=config.client_id)
        self._revocation_waits = frozenset(self.machine.spec.events["revocation_completed"].arrives_in)
        self._exchange = HeartbeatExchange(self)

    # -- what the rest of the consumer reads (as of the classic member) ---------------------------
    @property
    def generation(self) -> int:
        """The member epoch: 0 before the first answer; what metrics and histories show as generation."""
        return self.epoch

    def commit_stamp(self) -> tuple[int, str]:
        return self.joins, self.member_id

    def commit_epoch(self) -> int:
        return self.epoch

    @property
    def last_poll(self) -> float | None:
        return self._last_poll

    @property
    def joined_topics(self) -> tuple[str, ...]:
        return self.subscribed_topics()

    @property
    def close_done(self) -> bool:
        if self._coordinator.gone_for_close:
            return True
        return self.machine.state in ("unsubscribed", "fatal") and not self._exchange.leave_in_flight

    def subscribed_topics(self) -> tuple[str, ...]:
        return subscribed_topics(self._subs, self._metadata, self._config.exclude_internal_topics)

    # -- what the application asks (through events) ---------------------------------------------
    def on_subscription_changed(self, now: float) -> None:
        self._last_poll = now
        self.machine.restart_timer("poll", now)
        self.machine.fire("join_requested", now)

    def on_unsubscribe(self, now: float) -> None:
        self.machine.fire("leave_requested", now)

    def begin_close(self, autocommit: bool) -> None:
        self._commit_on_revoke = autocommit
        self._closing = True
        self.machine.fire("leave_requested")

    def on_app_poll(self, now: float) -> None:
        self._last_poll = now
        self.machine.restart_timer("poll", now)
        self.machine.fire("poll_resumed", now)

    def on_callback_ack(self, event: CallbackAckEvent, now: float) -> None:
        event.complete(None)
        kind = self._callbacks.take(event, self.machine.attribute("awaits"))
        if kind is None:
            log.debug("group %s: late acknowledgement ignored (state %s)", self._config.group_id, self.machine.state)
            return
        self._record(f"{kind}_done", ())
        if kind == "lost":
            self._forget_lost()
        self.machine.fire(ACK_TRIGGER[kind], now)

    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        return self._exchange.poll(now)

    # -- what the coordinator's answers say (called by the exchange) ------------------------------
    def take_target(self, epoch: int, assigned: dict[str, tuple[int, ...]]) -> bool:
        """A heartbeat answer carried an assignment (topic id -> partitions): the newest target. True when
        it differs from the last one and every topic is named (else the metadata is asked for them)."""
        self.target_epoch = epoch
        self.target_unresolved = dict(assigned)
        if not assigned:  # an empty target: nothing to name
            changed = self.target != frozenset()
            self.target = frozenset()
            return changed
        return self.resolve_target()

    def resolve_target(self) -> bool:
        """Name the target's topics from the metadata; True when the target is new and fully named."""
        if not self.target_unresolved:
            return False
        names = {info.topic_id: name for name, info in self._metadata.topics.items() if info.topic_id}
        if any(tid not in names for tid in self.target_unresolved):
            self._metadata.request_update(all_topics=True)  # a topic this member does not know by name yet
            return False
        target = frozenset(
            TopicPartition(names[tid], p) for tid, parts in self.target_unresolved.items() for p in parts
        )
        for tid in self.target_unresolved:
            self.topic_ids[names[tid]] = tid
        self.target_unresolved = {}
        changed = target != self.target
        self.target = target
        return changed

    # -- conditions named in the spec -----------------------------------------------------------
    def target_differs(self) -> bool:
        return self.target is not None and self.target != self.owned

    def must_revoke(self) -> bool:
        return bool(self._to_revoke)

    def owns_partitions(self) -> bool:
        return bool(self.owned)

    def wants_membership(self) -> bool:
        return not self._closing and self._subs.kind in ("topics", "pattern")

    def broker_heartbeat_interval_ms(self, configured: float) -> float:
        return self.heartbeat_interval_ms or configured

    # -- actions named in the spec ---------------------------------------------------------------
    def prepare_join(self) -> None:
        self.epoch = 0
        self.joins += 1
        self._exchange.full = True
        log.info("group %s: joining as %s (consumer protocol)", self._config.group_id, self.member_id)

    def start_reconciliation(self) -> None:
        target = self.target if self.target is not None else self.owned
        self._reconciling_to = target
        self._to_revoke = self.owned - target
        self._added = target - self.owned
        if self.rebalance_started is None:
            self.rebalance_started = self.machine.now
        log.info(
            "group %s: epoch %d reconciles: revoke %s, assign %s",
            self._config.group_id,
            self.target_epoch,
            sorted(self._to_revoke),
            sorted(self._added),
        )
        self.machine.fire("revoke_needed")

    def request_revoke_callback(self) -> None:
        self._subs.set_revoking(self._to_revoke, True)
        self._ask("revoke", self._to_revoke)

    def request_leave_revoke(self) -> None:
        self._to_revoke = self.owned
        self._subs.set_revoking(self._to_revoke, True)
        self._ask("revoke", self._to_revoke)

    def finish_revocation(self) -> None:
        revoked = self._to_revoke
        positions = {tp: off for tp, off in self._subs.positions().items() if tp in revoked}
        self._own(self.owned - revoked)
        self._record("revoked", revoked)
        self._revocation_commit += 1
        if positions and self._config.enable_auto_commit and self._commit_on_revoke and self.epoch > 0:
            sent = self._revocation_commit
            self._commits.commit_positions(positions, on_done=lambda error: self._revocation_committed(sent))
        else:
            self.machine.fire("revocation_completed")

    def _revocation_committed(self, sent: int) -> None:
        # an answer that outlived its wait (revocation_commit_timeout fired, a later round began) is dropped
        if sent == self._revocation_commit and self.machine.state in self._revocation_waits:
            self._revocation_commit += 1
            self.machine.fire("revocation_completed")

    def install_assignment(self) -> None:
        self._added = self._reconciling_to - self.owned
        self._own(self.owned | self._added)
        self._record("assigned", self._added)

    def request_assign_callback(self) -> None:
        self._ask("assign", self._added)

    def reconciliation_done(self) -> None:
        self.assignment_epoch = self.target_epoch
        if self.rebalance_started is not None:
            took = self.machine.now - self.rebalance_started
            self.rebalances += 1
            self.rebalance_last_ms = took
            self.rebalance_total_ms += took
            self.rebalance_started = None

    def heartbeat_wanted(self) -> None:
        self.heartbeat_due = True

    def drop_membership(self) -> None:
        """Fenced: this epoch is gone; what it owned is lost (no commit), and it joins again at epoch 0."""
        self._lost = self.owned
        self._subs.set_revoking(self.owned, True)
        self.target = None
        self.target_unresolved = {}
        self.rebalance_started = None
        self._record("fenced", self.owned)

    def request_lost_callback(self) -> None:
        if not self._ask("lost", self._lost, fire=False):
            self._forget_lost()
            self.machine.fire("lost_acked")

    def lose_everything(self) -> None:
        self._lost = self.owned
        self._subs.set_revoking(self.owned, True)
        self.request_lost_callback()

    def _forget_lost(self) -> None:
        self._record("lost", self._lost)
        self._own(self.owned - self._lost)
        self._lost = frozenset()

    def leave_as_stale(self) -> None:
        """The leave heartbeat (best effort, sent once for this visit) so the group reassigns now."""
        self._lost = self.owned
        self._subs.set_revoking(self.owned, True)
        self.rebalance_started = None

    def note_poll_timer_expired(self) -> None:
        log.warning(
            "group %s: no poll() for %d ms (max_poll_interval_ms): leaving the group",
            self._config.group_id,
            self._config.max_poll_interval_ms,
        )

    def abandon_partitions(self) -> None:
        self._record("abandoned", self.owned)
        self._own(frozenset())

    def forget_membership(self) -> None:
        self._lost = frozenset()
        self.epoch = 0
        self.target = None
        self.target_unresolved = {}
        self._own(frozenset())

    def record_fatal_error(self) -> None:
        log.error("group %s: %s", self._config.group_id, self.fatal)
        self._held.hold(("group",), self.fatal)

    # -- helpers -----------------------------------------------------------------------------------
    def _ask(self, kind: str, partitions, *, fire: bool = True) -> bool:
        if self._callbacks.ask(kind, partitions, skip_if_empty=True):
            return True
        self._record(f"{kind}_done", ())
        if fire:
            self.machine.fire(ACK_TRIGGER[kind])
        return False

    def _own(self, partitions: frozenset[TopicPartition]) -> None:
        self.owned = partitions
        self._subs.set_group_assignment(partitions)
        self._held.release_where(lambda key: key[0] == "partition" and key[1] not in partitions)

    def fail(self, error: BaseException) -> None:
        self.fatal = error
        self.machine.fire("fatal_error")

    def fail_code(self, code: int, message: str | None) -> None:
        what = f"ConsumerGroupHeartbeat for group {self._config.group_id!r}"
        if message:
            what += f" (the broker says: {message})"
        self.fail(public_error(code, what))

    def _record(self, what: str, partitions) -> None:
        self.history.append((what, tuple(sorted(partitions)), self.machine.now, self.epoch))
        if self.history_file is not None:
            self.history_file.write(what, member=self.member_id, generation=self.epoch, partitions=tp_list(partitions))
        if len(self.history) > 10_000:
            del self.history[:5_000]
