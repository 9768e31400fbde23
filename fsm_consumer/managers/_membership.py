"""Group membership with the classic protocol: the model of specs/membership.yaml.

This is who the member is in the group (member id, generation, what it owns) and what it does on the
spec's transitions. JoinGroup, SyncGroup, Heartbeat and LeaveGroup are sent from ``poll(now)`` by its
``GroupExchange`` (_group_exchange.py); their answers fire the spec's triggers. What both protocols'
members do alike (rebalance callbacks on the application thread, acknowledged back with the request's
token; the auto-commit of revoked partitions; losing and leaving) is ``MemberBase`` (_member.py).
"""

from __future__ import annotations

import logging

from ..assignors import Assignment, RebalanceProtocol, resolve
from ..policy import public_error
from ..structs import TopicPartition
from ._base import Outgoing
from ._group_exchange import GroupExchange
from ._heartbeat import HeartbeatTimer
from ._leader import partition_counts, subscribed_topics
from ._member import MemberBase

log = logging.getLogger("fsm_consumer.membership")

# Which states heartbeat, which request a state sends, which acknowledgement it waits for and what a
# commit may do there are attributes of the states in specs/membership.yaml (machine.attribute).


class MembershipManager(MemberBase):
    SPEC = "membership"

    def __init__(self, config, **parts) -> None:
        self.member_id = ""
        self.former_member_id: str | None = None  # the id given up last (see leader_is_former_self in the spec)
        self.generation = -1
        super().__init__(config, **parts)
        self.assignors = [resolve(s) for s in config.partition_assignment_strategy]
        common = set.intersection(*(set(a.protocols) for a in self.assignors))
        self.protocol = (
            RebalanceProtocol.COOPERATIVE if RebalanceProtocol.COOPERATIVE in common else RebalanceProtocol.EAGER
        )
        self.group_protocol: str | None = None
        self.leader_id: str | None = None
        self._new: frozenset[TopicPartition] = frozenset()
        self._synced: Assignment | None = None  # the last SyncGroup's, told to the assignor when installed
        self._revoked_this_round = False
        self._joined_topics: tuple[str, ...] = ()
        self._joined_counts: dict[str, int] = {}
        self.heartbeat = HeartbeatTimer(config.heartbeat_interval_ms, config.retry_backoff_ms)
        self._exchange = GroupExchange(self)

    @property
    def close_done(self) -> bool:
        if self._coordinator.gone_for_close:
            return True
        return self.machine.state in ("unjoined", "fatal") and not self._exchange.leave_in_flight

    @property
    def joined_topics(self) -> tuple[str, ...]:
        """The topics of this member's last JoinGroup (a pattern's matches)."""
        return self._joined_topics

    def _request_rejoin(self, why: str) -> None:
        if self.machine.state == "stable":
            log.info("rejoining group %s: %s", self._config.group_id, why)
        self.machine.fire("rejoin_needed")

    # -- conditions named in the spec -----------------------------------------------------------
    def must_revoke(self) -> bool:
        return self.protocol is RebalanceProtocol.COOPERATIVE and bool(self.owned - self._new)

    def keeps_place(self) -> bool:
        """No LeaveGroup (the spec's request attribute): a static member keeps its place across restarts
        (KIP-345); a member that never got an id, or lost it, has nothing to leave."""
        return self._config.group_instance_id is not None or not self.member_id

    def eager_protocol(self) -> bool:
        return self.protocol is RebalanceProtocol.EAGER

    def session_ran_out(self) -> bool:
        return self.machine.timer_ran_out("session")

    def sync_held_back(self) -> bool:
        """Syncing, and this visit's SyncGroup has not gone out yet (a follower's is held back)."""
        return not self._exchange.sent_this_visit()

    def rejoin_after_assign(self) -> bool:
        return self._revoked_this_round

    # -- actions named in the spec ---------------------------------------------------------------
    def send_join_group(self) -> None:
        if self.rebalance_started is None:
            self.rebalance_started = self.machine.now
        # a new round: whether it revokes anything is decided afresh (a cooperative round may go
        # from assigning_partitions straight back to joining, without passing through stable)
        if self._revoked_this_round:
            # A follow-up JoinGroup (after a cooperative revocation) starts a new generation at once;
            # followers still holding their SyncGroup back (follower_sync_delay_ms, theirs answered a
            # little later than ours) would miss this generation's assignment and cost more rounds.
            self._exchange.join_not_before = self._exchange.joined_at + 2 * self._config.follower_sync_delay_ms
        self._revoked_this_round = False

    def send_sync_group(self) -> None:
        if self.leader_id != self.member_id:  # see follower_sync_delay_ms
            self._exchange.sync_not_before = self.machine.now + self._config.follower_sync_delay_ms

    def pause_partitions_to_revoke(self) -> None:
        if self.protocol is RebalanceProtocol.EAGER:
            self._to_revoke = self.owned
        else:
            self._to_revoke = self.owned - self._new
        self._subs.set_revoking(self._to_revoke, True)
        self.machine.fire("revocation_prepared")

    def release_revoked(self) -> None:
        # a cooperative round that revoked something is followed by another (rejoin_after_assign)
        self._revoked_this_round = bool(self._to_revoke) and self.protocol is RebalanceProtocol.COOPERATIVE
        super().release_revoked()

    def install_assignment(self) -> None:
        self._added = self._new - self.owned
        self._own(self._new)
        self._record("assigned", self._added)
        if self._synced is not None:  # a sticky assignor remembers what it was given (never a stale round's)
            for a in self.assignors:
                if a.name == self.group_protocol:
                    a.on_assignment(self._synced, self.generation)

    def request_assign_callback(self) -> None:
        # every round tells the listener what it added, even nothing (Java's onJoinComplete does, both protocols)
        self._ask("assign", self._added, skip_if_empty=False)

    def rebalance_done(self) -> None:
        self._count_rebalance()
        self._revoked_this_round = False
        self._joined_counts = partition_counts(self._metadata, self._joined_topics)
        # a subscription change or a new matching topic during the round is seen here, from data
        # (the topics this round joined with), not from a remembered request
        if self._subscribed_topics() != self._joined_topics:
            self._request_rejoin("the subscription changed during the rebalance")
        elif self._exchange.assignment_outdated():
            self._request_rejoin("the group's topics changed since the assignment was made")

    def drop_membership(self) -> None:
        self._lost = self._lost | self.owned
        self._subs.set_revoking(self._lost, True)
        self.generation = -1
        if self._config.group_instance_id is None:
            if self.member_id:  # a later JoinGroup answer may name it leader still (leader_is_former_self)
                self.former_member_id = self.member_id
            self.member_id = ""
        self._revoked_this_round = False
        self._new = frozenset()

    def send_leave_group(self) -> None:
        if self.machine.attribute("request") == "none":  # the spec's ``unless: keeps_place``: nothing to send
            self.machine.fire("left")

    def session_said(self) -> tuple[float, str]:
        return self._config.session_timeout_ms, "session_timeout_ms"

    def forget_membership(self) -> None:
        self._lost = frozenset()
        self._reset_after_leave()

    # -- the manager loop: the group protocol's requests and answers (_group_exchange.py) ------------
    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        return self._exchange.poll(now)

    def _subscribed_topics(self) -> tuple[str, ...]:
        return subscribed_topics(self._subs, self._metadata, self._config.exclude_internal_topics)

    def _reset_after_leave(self) -> None:
        self.generation = -1
        if self._config.group_instance_id is None:
            if self.member_id:
                self.former_member_id = self.member_id
            self.member_id = ""
        self._own(frozenset())

    def _fail(self, code: int, what: str) -> None:
        self.fatal = public_error(code, f"{what} for group {self._config.group_id!r}")
        self.machine.fire("fatal_error")
