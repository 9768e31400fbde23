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
import math
import uuid

from ..policy import public_error
from ..structs import TopicPartition
from ._base import Outgoing
from ._consumer_heartbeat import HeartbeatExchange
from ._heartbeat import HeartbeatTimer
from ._leader import subscribed_topics
from ._member import MemberBase

log = logging.getLogger("fsm_consumer.membership")


class ConsumerMembershipManager(MemberBase):
    SPEC = "consumer_membership"

    def __init__(self, config, **parts) -> None:
        # KIP-1082: the member makes its own id, kept for its whole life (a rejoin after fencing keeps it)
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        super().__init__(config, **parts)
        self.joins = 0  # memberships begun: a commit is accepted under one (the epoch moves within it)
        self.leader_id: str | None = None  # no leader in this protocol
        self.assignment_epoch = -1  # the epoch of the target the member last reconciled to
        self.target: frozenset[TopicPartition] | None = None  # the newest target, resolved to names
        self.target_epoch = -1
        self.target_unresolved: dict[str, tuple[int, ...]] = {}  # topic id -> partitions, not yet named
        self._reconciling_to: frozenset[TopicPartition] = frozenset()
        self.topic_ids: dict[str, str] = {}  # topic name -> id, of the topics assignments named
        self.heartbeat_interval_ms = 0.0  # the coordinator's; 0 until its first answer (the spec's default)
        self.session_timeout_ms: float | None = None  # the group's, once the broker said (the lease's length)
        self.heartbeat_due = False
        self.heartbeat = HeartbeatTimer(0, config.retry_backoff_ms)  # its figures, for metrics()
        self._exchange = HeartbeatExchange(self)

    # -- what the rest of the consumer reads (as of the classic member) ---------------------------
    @property
    def generation(self) -> int:  # type: ignore[override]  # read-only here
        """The member epoch: 0 before the first answer; what metrics and histories show as generation."""
        return self.epoch

    def commit_stamp(self) -> tuple[int, str]:
        return self.joins, self.member_id

    def commit_epoch(self) -> int:
        return self.epoch

    def fetch_member(self) -> tuple[str, int] | None:
        """The member id and epoch an OffsetFetch carries (v9, KIP-848): the spec's ``offset_fetch`` attribute."""
        if self.machine.attribute("offset_fetch") == "member_epoch" and self.epoch > 0:
            return self.member_id, self.epoch
        return None

    def no_longer_owned(self, partitions) -> frozenset[TopicPartition]:
        """The epoch moves within a membership and the broker does not check who owns what is committed: a
        commit accepted before a reconciliation must not go out for partitions revoked since (another member
        may have committed them further). What is being revoked stays owned, and committable, until it is
        released after its callback."""
        return frozenset(partitions) - self.owned

    @property
    def joined_topics(self) -> tuple[str, ...]:
        return self.subscribed_topics()

    @property
    def close_done(self) -> bool:
        if self._coordinator.gone_for_close:
            return True
        return self.machine.state in ("unsubscribed", "fatal") and not self._exchange.leave_in_flight

    def _may_commit(self) -> bool:
        return self.epoch > 0

    def subscribed_topics(self) -> tuple[str, ...]:
        return subscribed_topics(self._subs, self._metadata, self._config.exclude_internal_topics)

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

    def broker_heartbeat_interval_ms(self, configured: float) -> float:
        return self.heartbeat_interval_ms or configured

    def broker_session_timeout_ms(self, configured: float) -> float:
        """The group's session timeout as the broker gave it; no lease (infinite) until it has."""
        return math.inf if self.session_timeout_ms is None else self.session_timeout_ms

    # -- actions named in the spec ---------------------------------------------------------------
    def prepare_join(self) -> None:
        self.epoch = 0
        self.joins += 1
        self._exchange.joining()
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

    def pause_revoked(self) -> None:
        self._subs.set_revoking(self._to_revoke, True)  # no records of them are handed out from now on

    def install_assignment(self) -> None:
        self._added = self._reconciling_to - self.owned
        self._own(self.owned | self._added)
        self._record("assigned", self._added)

    def request_assign_callback(self) -> None:
        # every reconciliation tells the listener what it added, even nothing (Java's assignPartitions does)
        self._ask("assign", self._added, skip_if_empty=False)

    def target_known(self) -> bool:
        """The coordinator has sent a target (an empty one too): the first answer's is reconciled."""
        return self.target is not None

    def reconciliation_done(self) -> None:
        self.assignment_epoch = self.target_epoch
        self._count_rebalance()

    def session_said(self) -> tuple[float, str]:
        return self.session_timeout_ms or 0, "the group's session timeout"

    def heartbeat_wanted(self) -> None:
        self.heartbeat_due = True

    def drop_membership(self) -> None:
        """Fenced: this epoch is gone; what it owned is lost (no commit), and it joins again at epoch 0."""
        self._lost = self.owned
        self._subs.set_revoking(self.owned, True)
        self.target = None
        self.target_unresolved = {}
        self.rebalance_started = None

    def lose_everything(self) -> None:
        self._lost = self.owned
        self._subs.set_revoking(self.owned, True)
        self.request_lost_callback()

    def forget_membership(self) -> None:
        self._lost = frozenset()
        self.epoch = 0
        self.target = None
        self.target_unresolved = {}
        self._own(frozenset())

    def fail(self, error: BaseException) -> None:
        self.fatal = error
        self.machine.fire("fatal_error")

    def fail_code(self, code: int, message: str | None) -> None:
        what = f"ConsumerGroupHeartbeat for group {self._config.group_id!r}"
        if message:
            what += f" (the broker says: {message})"
        self.fail(public_error(code, what))
