"""Group membership with the classic protocol: the model of specs/membership.yaml.

This is who the member is in the group (member id, generation, what it owns) and what it does on the
spec's transitions. JoinGroup, SyncGroup, Heartbeat and LeaveGroup are sent from ``poll(now)`` by its
``GroupExchange`` (_group_exchange.py); their answers fire the spec's triggers. Rebalance callbacks run
on the application thread: the hooks post them as background events and the machine waits in
revoking_partitions / assigning_partitions / fenced for the acknowledgement, which comes back as a
CallbackAckEvent carrying the request's token (a late acknowledgement of an abandoned callback has a
stale token and is ignored).
"""

from __future__ import annotations

import logging

from ..assignors import Assignment, RebalanceProtocol, resolve
from ..events import CallbackAckEvent
from ..history._writer import HistoryWriter, tp_list
from ..machines import SpecMachine, shipped_spec
from ..policy import public_error
from ..structs import TopicPartition
from ._base import Outgoing
from ._callbacks import ACK_TRIGGER, RebalanceCallbacks
from ._group_exchange import GroupExchange
from ._heartbeat import HeartbeatTimer
from ._leader import partition_counts, subscribed_topics

log = logging.getLogger("fsm_consumer.membership")

# Which states heartbeat, which request a state sends, which acknowledgement it waits for and what a
# commit may do there are attributes of the states in specs/membership.yaml (machine.attribute).


class MembershipManager:
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
        self.assignors = [resolve(s) for s in config.partition_assignment_strategy]
        common = set.intersection(*(set(a.protocols) for a in self.assignors))
        self.protocol = (
            RebalanceProtocol.COOPERATIVE if RebalanceProtocol.COOPERATIVE in common else RebalanceProtocol.EAGER
        )
        self.member_id = ""
        self.generation = -1
        self.group_protocol: str | None = None
        self.leader_id: str | None = None
        self.owned: frozenset[TopicPartition] = frozenset()
        self._new: frozenset[TopicPartition] = frozenset()
        self._synced: Assignment | None = None  # the last SyncGroup's, told to the assignor when installed
        self._to_revoke: frozenset[TopicPartition] = frozenset()
        self._added: frozenset[TopicPartition] = frozenset()
        self._lost: frozenset[TopicPartition] = frozenset()
        self._revoked_this_round = False
        self._commit_on_revoke = True  # False once close(autocommit=False) began
        self._closing = False  # close() began: a completed leave does not rejoin
        self._callbacks = RebalanceCallbacks(subscription, background_events, post_app_event)
        self._revocation_commit = 0  # identifies the revoked partitions' auto-commit last awaited
        self._last_poll: float | None = None
        self._joined_topics: tuple[str, ...] = ()
        self._joined_counts: dict[str, int] = {}
        self.fatal: BaseException | None = None
        self.heartbeat = HeartbeatTimer(config.heartbeat_interval_ms, config.retry_backoff_ms)
        self.rebalance_started: float | None = None
        self.rebalances = 0
        self.rebalance_last_ms: float | None = None
        self.rebalance_total_ms = 0.0
        self.history: list = []  # (event, partitions, time, generation), bounded
        self.history_file = history  # the consumer's history (history_path), or None
        # no clock: the engine ticks this machine each loop and passes `now` to every fire
        self.machine = SpecMachine(shipped_spec("membership"), self, config=config, instance=config.client_id)
        self._revocation_waits = frozenset(self.machine.spec.events["revocation_completed"].arrives_in)
        self._exchange = GroupExchange(self)
        self.session_expiries = 0

    # -- what the application asks (through events) ---------------------------------------------
    # Every one of these fires a trigger the spec declares as an event: legal (or declared
    # ignorable) in every state, so an intent is never dropped by a state check here.
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

    @property
    def close_done(self) -> bool:
        if self._coordinator.gone_for_close:
            return True
        return self.machine.state in ("unjoined", "fatal") and not self._exchange.leave_in_flight

    def commit_stamp(self) -> tuple[int, str]:
        """The membership a commit is accepted under, compared again before it is sent."""
        return self.generation, self.member_id

    def commit_epoch(self) -> int:
        """What an OffsetCommit carries as GenerationIdOrMemberEpoch."""
        return self.generation

    @property
    def last_poll(self) -> float | None:
        """When the application last polled (engine ms), for metrics."""
        return self._last_poll

    @property
    def joined_topics(self) -> tuple[str, ...]:
        """The topics of this member's last JoinGroup (a pattern's matches)."""
        return self._joined_topics

    def on_app_poll(self, now: float) -> None:
        self._last_poll = now
        self.machine.restart_timer("poll", now)
        self.machine.fire("poll_resumed", now)

    def on_callback_ack(self, event: CallbackAckEvent, now: float) -> None:
        event.complete(None)
        kind = self._callbacks.take(event, self.machine.attribute("awaits"))
        if kind is None:
            # an abandoned callback finished late (the state no longer waits for it: timed out, fenced,
            # fatal, or another callback was asked for since): nothing waits for it any more
            log.debug(
                "group %s: late acknowledgement of %s ignored (state %s)",
                self._config.group_id,
                kind,
                self.machine.state,
            )
            return
        self._record(f"{kind}_done", ())
        if kind == "lost":
            self._forget_lost()
        self.machine.fire(ACK_TRIGGER[kind], now)

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

    def owns_partitions(self) -> bool:
        return bool(self.owned)

    def session_ran_out(self) -> bool:
        return self.machine.timer_ran_out("session")

    def rejoin_after_assign(self) -> bool:
        return self._revoked_this_round

    def wants_membership(self) -> bool:
        """Subscribed again after leaving (unsubscribe() then subscribe()), and not closing."""
        return not self._closing and self._subs.kind in ("topics", "pattern")

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

    def request_revoke_callback(self) -> None:
        self._ask_application("revoke", "on_partitions_revoked", self._to_revoke, skip_if_empty=True)

    def request_leave_revoke(self) -> None:
        """Leaving: every partition still owned is revoked (the callback, then the commit)."""
        self._to_revoke = self.owned
        self._subs.set_revoking(self._to_revoke, True)
        self._ask_application("revoke", "on_partitions_revoked", self._to_revoke, skip_if_empty=True)

    def finish_revocation(self) -> None:
        revoked = self._to_revoke
        positions = {tp: off for tp, off in self._subs.positions().items() if tp in revoked}
        self._own(self.owned - revoked)
        self._record("revoked", revoked)
        self._revoked_this_round = bool(revoked) and self.protocol is RebalanceProtocol.COOPERATIVE
        self._revocation_commit += 1
        if positions and self._config.enable_auto_commit and self._commit_on_revoke and self.generation >= 0:
            sent = self._revocation_commit
            self._commits.commit_positions(positions, on_done=lambda error: self._revocation_committed(sent))
        else:
            self.machine.fire("revocation_completed")

    def _revocation_committed(self, sent: int) -> None:
        # awaited in partitions_revoked and, after a leave_requested, in committing_then_leave (a new visit);
        # an answer that outlived its wait (revocation_commit_timeout fired, a later round began) is dropped
        if sent == self._revocation_commit and self.machine.state in self._revocation_waits:
            self._revocation_commit += 1  # answered once
            self.machine.fire("revocation_completed")

    def install_assignment(self) -> None:
        self._added = self._new - self.owned
        self._own(self._new)
        self._record("assigned", self._added)
        if self._synced is not None:  # a sticky assignor remembers what it was given (never a stale round's)
            for a in self.assignors:
                if a.name == self.group_protocol:
                    a.on_assignment(self._synced, self.generation)

    def request_assign_callback(self) -> None:
        # eager: always tell the listener (Java does, even when empty); cooperative: only additions
        skip = self.protocol is RebalanceProtocol.COOPERATIVE
        self._ask_application("assign", "on_partitions_assigned", self._added, skip_if_empty=skip)

    def rebalance_done(self) -> None:
        now = self.machine.now
        if self.rebalance_started is not None:
            took = now - self.rebalance_started
            self.rebalances += 1
            self.rebalance_last_ms = took
            self.rebalance_total_ms += took
            self.rebalance_started = None
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
            self.member_id = ""
        self._revoked_this_round = False
        self._new = frozenset()

    def request_lost_callback(self) -> None:
        if not self._ask_application("lost", "on_partitions_lost", self._lost, skip_if_empty=True, fire=False):
            self._forget_lost()
            self.machine.fire("lost_acked")

    def _forget_lost(self) -> None:
        self._record("lost", self._lost)
        self._own(self.owned - self._lost)
        self._lost = frozenset()

    def leave_as_stale(self) -> None:
        """LeaveGroup (best effort, sent by poll() once for this visit) so the group rebalances now."""
        self._lost = self.owned
        self._subs.set_revoking(self.owned, True)
        self.rebalance_started = None

    def send_leave_group(self) -> None:
        if self.machine.attribute("request") == "none":  # the spec's ``unless: keeps_place``: nothing to send
            self.machine.fire("left")

    def note_session_expired(self) -> None:
        self.session_expiries += 1
        log.warning(
            "group %s: no successful heartbeat for %d ms (session_timeout_ms): the group has moved on "
            "without member %s; its partitions %s are lost and it rejoins",
            self._config.group_id,
            self._config.session_timeout_ms,
            self.member_id,
            sorted(self.owned),
        )
        self._record("session_expired", self.owned)

    def note_poll_timer_expired(self) -> None:
        log.warning(
            "group %s: no poll() for %d ms (max_poll_interval_ms): leaving the group",
            self._config.group_id,
            self._config.max_poll_interval_ms,
        )

    def abandon_partitions(self) -> None:
        """Leaving and a callback did not return in time: the partitions go without it."""
        self._record("abandoned", self.owned)
        self._own(frozenset())

    def forget_membership(self) -> None:
        self._lost = frozenset()
        self._reset_after_leave()

    def record_fatal_error(self) -> None:
        log.error("group %s: %s", self._config.group_id, self.fatal)
        self._held.hold(("group",), self.fatal)  # raised by every call until close()

    # -- the application thread does the callbacks -----------------------------------------------
    def _ask_application(self, kind: str, method: str, partitions, *, skip_if_empty: bool, fire: bool = True) -> bool:
        if self._callbacks.ask(kind, partitions, skip_if_empty=skip_if_empty):
            return True
        self._record(f"{kind}_done", ())
        if fire:
            self.machine.fire(ACK_TRIGGER[kind])
        return False

    # -- the manager loop: the group protocol's requests and answers (_group_exchange.py) ------------
    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        return self._exchange.poll(now)

    def _subscribed_topics(self) -> tuple[str, ...]:
        return subscribed_topics(self._subs, self._metadata, self._config.exclude_internal_topics)

    def _reset_after_leave(self) -> None:
        self.generation = -1
        if self._config.group_instance_id is None:
            self.member_id = ""
        self._own(frozenset())

    def _own(self, partitions: frozenset[TopicPartition]) -> None:
        """The one place the member's partitions change: errors held for partitions it gives up go with
        them (the user could not clear them: a seek of a partition not assigned is refused)."""
        self.owned = partitions
        self._subs.set_group_assignment(partitions)
        self._held.release_where(lambda key: key[0] == "partition" and key[1] not in partitions)

    def _fail(self, code: int, what: str) -> None:
        self.fatal = public_error(code, f"{what} for group {self._config.group_id!r}")
        self.machine.fire("fatal_error")

    def _record(self, what: str, partitions) -> None:
        self.history.append((what, tuple(sorted(partitions)), self.machine.now, self.generation))
        if self.history_file is not None:
            self.history_file.write(
                what, member=self.member_id, generation=self.generation, partitions=tp_list(partitions)
            )
        if len(self.history) > 10_000:
            del self.history[:5_000]
