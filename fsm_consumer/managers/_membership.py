"""Group membership with the classic protocol: the model of specs/membership.yaml.

JoinGroup, SyncGroup, Heartbeat and LeaveGroup are sent from ``poll(now)``; their answers fire the
spec's triggers. Rebalance callbacks run on the application thread: the hooks post them as
background events and the machine waits in revoking_partitions / assigning_partitions / fenced
for the acknowledgement, which comes back as a CallbackAckEvent carrying the request's token (a
late acknowledgement of an abandoned callback has a stale token and is ignored).
"""

from __future__ import annotations

import logging

import kafka.errors as ke

from ..assignors import (
    Assignment,
    RebalanceProtocol,
    decode_assignment,
    resolve,
)
from ..events import CallbackAckEvent, CallbackEvent
from ..machines import SpecMachine, shipped_spec
from ..policy import public_error
from ..structs import TopicPartition
from ._base import FOREVER, Outgoing
from ._group_requests import (
    COORDINATOR_ERRORS,
    FATAL,
    FENCED,
    MEMBER_ID_REQUIRED,
    REBALANCE_IN_PROGRESS,
    heard,
    heartbeat_request,
    join_group_request,
    leave_group_request,
    sync_group_request,
)
from ._heartbeat import HeartbeatTimer
from ._history import MemberHistory
from ._leader import LeaderRound, partition_counts, subscribed_topics

log = logging.getLogger("fsm_consumer.membership")

_ACK_TRIGGER = {"revoke": "revoke_acked", "assign": "assign_acked", "lost": "lost_acked"}
# Which states heartbeat, which request a state sends, which acknowledgement it waits for and what a
# commit may do there are attributes of the states in specs/membership.yaml (machine.attribute).


class MembershipManager:
    def __init__(
        self, config, *, subscription, metadata, coordinator, commits, background_events, post_app_event, metrics, held
    ) -> None:
        self._config = config
        self._subs = subscription
        self._metadata = metadata
        self._coordinator = coordinator
        self._commits = commits
        self._bg = background_events
        self._post = post_app_event
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
        self._to_revoke: frozenset[TopicPartition] = frozenset()
        self._added: frozenset[TopicPartition] = frozenset()
        self._lost: frozenset[TopicPartition] = frozenset()
        self._revoked_this_round = False
        self._commit_on_revoke = True  # False once close(autocommit=False) began
        self._closing = False  # close() began: a completed leave does not rejoin
        self._round = LeaderRound(config.group_id, metadata, config.request_timeout_ms)
        self._request_in_flight = False  # a JoinGroup or SyncGroup
        self._leave_in_flight = False
        self._sent_visit = -1  # the machine visit whose request went out
        self._sync_not_before = 0.0
        self._join_not_before = 0.0
        self._joined_at = 0.0  # when this round's JoinGroup was answered
        self._token = 0  # identifies the callback request last posted
        self._token_kind: str | None = None  # and what it was (revoke, assign, lost)
        self._last_poll: float | None = None
        self._joined_topics: tuple[str, ...] = ()
        self._joined_counts: dict[str, int] = {}
        self._metadata_version = -1
        self.fatal: BaseException | None = None
        self.heartbeat = HeartbeatTimer(config.heartbeat_interval_ms, config.retry_backoff_ms)
        self.rebalance_started: float | None = None
        self.rebalances = 0
        self.rebalance_last_ms: float | None = None
        self.rebalance_total_ms = 0.0
        self.history: list = []  # (event, partitions, time, generation), bounded
        self.history_file = (
            MemberHistory(config.debug_history_path, config.client_id) if config.debug_history_path else None
        )
        # no clock: the engine ticks this machine each loop and passes `now` to every fire
        self.machine = SpecMachine(shipped_spec("membership"), self, config=config, instance=config.client_id)
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
        return self.machine.state in ("unjoined", "fatal") and not self._leave_in_flight

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
        if self.history_file is not None:
            self.history_file.write("poll", self.member_id, self.generation, now)
        self.machine.restart_timer("poll", now)
        self.machine.fire("poll_resumed", now)

    def on_callback_ack(self, event: CallbackAckEvent, now: float) -> None:
        event.complete(None)
        kind = self._token_kind
        if event.token != self._token or kind is None or self.machine.attribute("awaits") != kind:
            # an abandoned callback finished late (the state no longer waits for it: timed out, fenced,
            # fatal, or another callback was asked for since): nothing waits for it any more
            log.debug(
                "group %s: late acknowledgement of %s ignored (state %s)",
                self._config.group_id,
                kind,
                self.machine.state,
            )
            return
        self._token_kind = None  # each request is acknowledged once
        self._record(f"{kind}_done", ())
        if kind == "lost":
            self._forget_lost()
        self.machine.fire(_ACK_TRIGGER[kind], now)

    def _request_rejoin(self, why: str) -> None:
        if self.machine.state == "stable":
            log.info("rejoining group %s: %s", self._config.group_id, why)
        self.machine.fire("rejoin_needed")

    # -- conditions named in the spec -----------------------------------------------------------
    def must_revoke(self) -> bool:
        return self.protocol is RebalanceProtocol.COOPERATIVE and bool(self.owned - self._new)

    def eager_protocol(self) -> bool:
        return self.protocol is RebalanceProtocol.EAGER

    def owns_partitions(self) -> bool:
        return bool(self.owned)

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
            self._join_not_before = self._joined_at + 2 * self._config.follower_sync_delay_ms
        self._revoked_this_round = False

    def send_sync_group(self) -> None:
        if self.leader_id != self.member_id:  # see follower_sync_delay_ms
            self._sync_not_before = self.machine.now + self._config.follower_sync_delay_ms

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
        if positions and self._config.enable_auto_commit and self._commit_on_revoke and self.generation >= 0:
            visit = self.machine.visit
            self._commits.commit_positions(positions, on_done=lambda error: self._revocation_committed(visit))
        else:
            self.machine.fire("revocation_completed")

    def _revocation_committed(self, visit: int) -> None:
        # the commit outlived its visit when revocation_commit_timeout fired first: nothing waits for it
        if self.machine.visit == visit:
            self.machine.fire("revocation_completed")

    def install_assignment(self) -> None:
        self._added = self._new - self.owned
        self._own(self._new)
        self._record("assigned", self._added)

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
        elif self._assignment_outdated():
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
        if not self._leave_needed():
            # static members keep their place across restarts: no LeaveGroup (KIP-345); a member
            # that never got an id, or lost it, has nothing to leave
            self.machine.fire("left")

    def _leave_needed(self) -> bool:
        return self._config.group_instance_id is None and bool(self.member_id)

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
        listener = self._subs.listener
        fn = getattr(listener, method, None) if listener is not None else None
        if fn is None and kind == "lost" and listener is not None:
            fn = getattr(listener, "on_partitions_revoked", None)  # Java's default for lost
        trigger = {"revoke": "revoke_acked", "assign": "assign_acked", "lost": "lost_acked"}[kind]
        if fn is None or (skip_if_empty and not partitions):
            self._record(f"{kind}_done", ())
            if fire:
                self.machine.fire(trigger)
            return False
        self._token += 1
        token, self._token_kind = self._token, kind
        post = self._post

        def ack(error, token=token):
            post(CallbackAckEvent(future=None, token=token, error=error))

        self._bg.put(CallbackEvent(fn, (set(partitions),), ack))
        return True

    # -- the manager loop ---------------------------------------------------------------------------
    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        # the collector hands out records only within the session (see SubscriptionState.lease_until)
        lease = self.machine.timer_deadline("session")
        self._subs.lease_until = FOREVER if lease is None else lease
        state = self.machine.state
        if state in ("unjoined", "fatal"):
            return FOREVER, []
        wait = FOREVER
        self._watch_metadata()
        state = self.machine.state
        request = self.machine.attribute("request")
        if request == "none" or self._sent_visit == self.machine.visit:
            request = None  # this visit's request went out already
        if request == "leave" and not self._leave_needed():
            request = None
        heartbeats = self.machine.attribute("heartbeat") == "send"
        node = self._coordinator.node
        out: list[Outgoing] = []
        if node is None:
            if request is not None or heartbeats:
                self._coordinator.needed()
                if request == "leave" and state == "stale":
                    self._sent_visit = self.machine.visit  # best effort only: no coordinator, no leave
            return wait, out
        if request == "join":
            if now < self._join_not_before:
                wait = min(wait, self._join_not_before - now)
            elif not self._request_in_flight:
                self._sent_visit = self.machine.visit
                out.append(self._join_request(node))
        elif request == "sync" and not self._request_in_flight:
            if now < self._sync_not_before:
                wait = min(wait, self._sync_not_before - now)
            else:
                out.extend(self._sync_request(node))
                if out:
                    self._sent_visit = self.machine.visit
        elif request == "leave":
            # not held behind a JoinGroup in flight: leaving must not wait out a rebalance
            self._sent_visit = self.machine.visit
            out.append(self._leave_request(node))
        if heartbeats and self.generation >= 0:
            if self.heartbeat.due(now):
                self.heartbeat.sent(now)
                out.append(
                    Outgoing(
                        heartbeat_request(self._config, self.generation, self.member_id),
                        node,
                        lambda pending, answered, sent=(self.member_id, self.generation), at=now: self._on_heartbeat(
                            pending, answered, sent, at
                        ),
                    )
                )
            wait = min(wait, self.heartbeat.wait(now))
        return wait, out

    def _subscribed_topics(self) -> tuple[str, ...]:
        return subscribed_topics(self._subs, self._metadata, self._config.exclude_internal_topics)

    def _watch_metadata(self) -> None:
        """A new topic matching the pattern, or a partition count change, means a new assignment."""
        if self._metadata.version == self._metadata_version or self.machine.state == "leaving":
            return
        self._metadata_version = self._metadata.version
        if self._subs.pattern is not None:
            self._metadata.all_topics_wanted = True
        if self.machine.state != "stable":
            return
        topics = self._subscribed_topics()
        if (
            topics != self._joined_topics
            or partition_counts(self._metadata, topics) != self._joined_counts
            or self._assignment_outdated()
        ):
            self._request_rejoin("subscribed topics or their partitions changed")

    def _join_request(self, node: int) -> Outgoing:
        topics = self._subscribed_topics()
        self._joined_topics = topics
        owned = tuple(sorted(self.owned)) if self.protocol is RebalanceProtocol.COOPERATIVE else ()
        request = join_group_request(self._config, self.member_id, self.generation, topics, owned, self.assignors)
        self._request_in_flight = True
        log.info(
            "group %s: JoinGroup (generation %d, owned %s)",
            self._config.group_id,
            self.generation,
            sorted(tp.partition for tp in owned),
        )
        # the coordinator holds JoinGroup until the group rebalances: allow the rebalance timeout
        timeout = max(self._config.request_timeout_ms, self._config.max_poll_interval_ms + 5000)
        visit, sent = self.machine.visit, self.machine.now
        return Outgoing(
            request, node, lambda pending, now: self._on_join(pending, now, visit, sent), timeout_ms=timeout
        )

    def _round_answer(self, pending, visit: int) -> int | None:
        """The error code of a JoinGroup or SyncGroup answer; None when there is nothing to do (the
        machine has left the visit that sent it, or the request failed and the round is retried after
        join_backoff)."""
        self._request_in_flight = False
        if self.machine.visit != visit:
            return None
        if pending.error is not None:
            self._coordinator.mark_unknown()
            self.machine.fire("join_failed")
            return None
        return pending.response.error_code

    def _on_join(self, pending, now: float, visit: int, sent: float) -> None:
        code = self._round_answer(pending, visit)
        if code is None:
            return
        r = pending.response
        if code == 0:
            self.member_id = r.member_id
            self.generation = r.generation_id
            self.group_protocol = r.protocol_name
            self.leader_id = r.leader
            self._round.joined(r.members)
            self._joined_at = now
            self.heartbeat.reset(now)
            self.machine.restart_timer("session", heard(pending, sent))
            log.info(
                "group %s: joined generation %d as %s (leader %s, %d members)",
                self._config.group_id,
                self.generation,
                self.member_id,
                self.leader_id,
                len(self._round.members),
            )
            self._record("joined", ())
            self.machine.fire("joined", now)
        elif code == MEMBER_ID_REQUIRED:
            self.member_id = r.member_id
            self.machine.fire("member_id_required", now)
        else:
            self._round_failed(code, "JoinGroup")

    def _sync_request(self, node: int) -> list[Outgoing]:
        assignment: dict[str, Assignment] = {}
        if self.leader_id == self.member_id:
            assignment = self._assign()
            if assignment is None:
                return []  # waiting for metadata of topics other members subscribe to
        self._request_in_flight = True
        request = sync_group_request(self._config, self.generation, self.member_id, self.group_protocol, assignment)
        visit, sent = self.machine.visit, self.machine.now
        return [Outgoing(request, node, lambda pending, now: self._on_sync(pending, now, visit, sent))]

    def _assign(self) -> dict[str, Assignment] | None:
        assignor = next((a for a in self.assignors if a.name == self.group_protocol), None)
        if assignor is None:
            self.fatal = ke.InconsistentGroupProtocolError(
                f"the group chose {self.group_protocol!r}, which this member does not offer"
            )
            self.machine.fire("fatal_error")
            return None
        return self._round.assign(assignor, self.machine.now)

    def _assignment_outdated(self) -> bool:
        """The leader's: the group's topics now have other partition counts than it assigned by."""
        return self.leader_id == self.member_id and self._round.outdated()

    def _on_sync(self, pending, now: float, visit: int, sent: float) -> None:
        code = self._round_answer(pending, visit)
        if code is None:
            return
        r = pending.response
        if code == 0:
            data = r.assignment
            assignment = decode_assignment(bytes(data) if data is not None else b"")
            self._new = frozenset(assignment.partitions)
            log.info(
                "group %s: generation %d assigns %s",
                self._config.group_id,
                self.generation,
                sorted(tp.partition for tp in self._new),
            )
            for a in self.assignors:
                if a.name == self.group_protocol:
                    a.on_assignment(assignment, self.generation)
            self.machine.restart_timer("session", heard(pending, sent))
            self.machine.fire("synced", now)
        else:
            self._round_failed(code, "SyncGroup")

    def _round_failed(self, code: int, what: str) -> None:
        """A JoinGroup or SyncGroup error: fenced, fatal, or retried after join_backoff."""
        if code in FENCED:
            log.info(
                "group %s: %s says this member is fenced: %s", self._config.group_id, what, ke.for_code(code).__name__
            )
            self.machine.fire("fenced_error")
        elif code in FATAL:
            self._fail(code, what)
        else:
            log.info("group %s: %s failed: %s", self._config.group_id, what, ke.for_code(code).__name__)
            if code in COORDINATOR_ERRORS:
                self._coordinator.mark_unknown()
            self.machine.fire("join_failed")

    def _on_heartbeat(self, pending, now: float, sent: tuple[str, int], sent_at: float) -> None:
        state = self.machine.state
        if sent != (self.member_id, self.generation) or self.machine.attribute("heartbeat") != "send":
            # an answer about a membership this member has already left behind (Java: generationUnchanged)
            log.debug("group %s: stale heartbeat answer ignored (state %s)", self._config.group_id, state)
            return
        if pending.error is not None:
            self.heartbeat.answered(now, ok=False)
            self._coordinator.mark_unknown()
            return
        code = pending.response.error_code
        self.heartbeat.answered(now, ok=code == 0)
        if code in (0, REBALANCE_IN_PROGRESS):
            # the coordinator holds this member's session (Java counts a rebalance answer too)
            self.machine.restart_timer("session", heard(pending, sent_at))
        if code == 0:
            return
        if code == REBALANCE_IN_PROGRESS:
            log.info("group %s: heartbeat says the group rebalances (state %s)", self._config.group_id, state)
            self.machine.fire("rejoin_needed", now)  # ignored mid-round: the next heartbeat says it again
        elif code in FENCED:
            log.info(
                "group %s: heartbeat says this member is fenced: %s (state %s)",
                self._config.group_id,
                ke.for_code(code).__name__,
                state,
            )
            self.machine.fire("fenced_error", now)
        elif code in FATAL:
            self._fail(code, "Heartbeat")
        elif code in COORDINATOR_ERRORS:
            self._coordinator.mark_unknown()

    def _leave_request(self, node: int) -> Outgoing:
        request = leave_group_request(self._config, self.member_id)
        self._leave_in_flight = True
        log.info("group %s: LeaveGroup as %s (state %s)", self._config.group_id, self.member_id, self.machine.state)
        return Outgoing(
            request, node, lambda pending, now, visit=self.machine.visit: self._on_leave(pending, now, visit)
        )

    def _on_leave(self, pending, now: float, visit: int) -> None:
        self._leave_in_flight = False
        code = pending.response.error_code if pending.error is None else None
        log.info(
            "group %s: LeaveGroup answered: %s", self._config.group_id, pending.error or ke.for_code(code).__name__
        )
        if self.machine.state == "leaving" and self.machine.visit == visit:
            self.machine.fire("left", now)

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
                what,
                self.member_id,
                self.generation,
                self.machine.now,
                partitions=[[tp.topic, tp.partition] for tp in sorted(partitions)],
            )
        if len(self.history) > 10_000:
            del self.history[:5_000]
