"""The group protocol's exchange for one member: which request its membership state asks for (the spec's
``request`` and ``heartbeat`` attributes) and when it may go, and what each answer means for the member.

``GroupExchange.poll(now)`` is the membership manager's ``poll``: it returns ``(wait, requests)``, and each
answer's handler fires the member's triggers. The member (``MembershipManager``, the model of
specs/membership.yaml) holds who it is in the group and what it owns; this holds what is in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import kafka.errors as ke

from ..assignors import Assignment, RebalanceProtocol, decode_assignment
from ..policy import keeps_coordinator
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
from ._leader import LeaderRound, partition_counts
from ._slow_wait import SlowWait

if TYPE_CHECKING:
    from .._config import ConsumerConfig
    from ..assignors import Assignor
    from ..machines import SpecMachine
    from ..state import SubscriptionState
    from ..structs import TopicPartition
    from ._coordinator import CoordinatorManager
    from ._heartbeat import HeartbeatTimer
    from ._metadata import MetadataManager

log = logging.getLogger("fsm_consumer.membership")


class GroupMember(Protocol):
    """What ``GroupExchange`` uses of its member (``MembershipManager`` is one): properties are only read,
    attributes are also written (what the coordinator's answers say about the member)."""

    member_id: str
    former_member_id: str | None  # the id this member gave up last
    generation: int
    group_protocol: str | None
    leader_id: str | None
    fatal: BaseException | None
    _joined_topics: tuple[str, ...]  # the topics of the last JoinGroup
    _new: frozenset[TopicPartition]  # the assignment of the last SyncGroup
    _synced: Assignment | None  # and as decoded, for the assignors once it is installed

    @property
    def _config(self) -> ConsumerConfig: ...

    @property
    def _metadata(self) -> MetadataManager: ...

    @property
    def _subs(self) -> SubscriptionState: ...

    @property
    def _coordinator(self) -> CoordinatorManager: ...

    @property
    def machine(self) -> SpecMachine: ...

    @property
    def heartbeat(self) -> HeartbeatTimer: ...

    @property
    def protocol(self) -> RebalanceProtocol: ...

    @property
    def assignors(self) -> Sequence[Assignor]: ...

    @property
    def owned(self) -> frozenset[TopicPartition]: ...

    @property
    def _joined_counts(self) -> Mapping[str, int]: ...

    def _subscribed_topics(self) -> tuple[str, ...]: ...

    def _request_rejoin(self, why: str) -> None: ...

    def _record(self, what: str, partitions: Iterable[TopicPartition]) -> None: ...

    def _fail(self, code: int, what: str) -> None: ...


class GroupExchange:
    """The requests in flight for one member, the round's leader data, and when the next may go."""

    def __init__(self, member: GroupMember) -> None:
        self.m = member  # the MembershipManager
        config = member._config
        self._round = LeaderRound(config.group_id, member._metadata, config.request_timeout_ms)
        self._request_in_flight = False  # a JoinGroup or SyncGroup
        self.leave_in_flight = False
        self._sent_visit = -1  # the machine visit whose request went out
        self.sync_not_before = 0.0
        self.join_not_before = 0.0
        self.joined_at = 0.0  # when this round's JoinGroup was answered
        self._metadata_version = -1
        self._slow = SlowWait()  # a JoinGroup or SyncGroup the coordinator takes long to answer
        self._stand_ins: list[str] = []  # member ids given up at once for a former one (leader_is_former_self)

    def sent_this_visit(self) -> bool:
        """Whether the request of the machine's current visit of its state went out."""
        return self._sent_visit == self.m.machine.visit

    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        m = self.m
        # the collector hands out records only within the session (see SubscriptionState.lease_until)
        lease = m.machine.timer_deadline("session")
        m._subs.lease_until = FOREVER if lease is None else lease
        state = m.machine.state
        if state in ("unjoined", "fatal"):
            return FOREVER, []
        wait = FOREVER
        self._watch_metadata()
        state = m.machine.state
        request: str | None = m.machine.attribute("request")
        if request == "none" or self._sent_visit == m.machine.visit:
            request = None  # this visit's request went out already
        heartbeats = m.machine.attribute("heartbeat") == "send"
        node = m._coordinator.node
        out: list[Outgoing] = []
        if node is None:
            if request is not None or heartbeats:
                m._coordinator.needed()
                if request == "leave" and state == "stale":
                    self._sent_visit = m.machine.visit  # best effort only: no coordinator, no leave
            return wait, out
        while self._stand_ins:  # best effort, answer ignored: else the coordinator waits on it until its session ends
            out.append(Outgoing(leave_group_request(m._config, self._stand_ins.pop()), node, lambda pending, now: None))
        if request == "join":
            if now < self.join_not_before:
                wait = min(wait, self.join_not_before - now)
            elif not self._request_in_flight:
                self._sent_visit = m.machine.visit
                out.append(self._join_request(node))
        elif request == "sync" and not self._request_in_flight:
            if now < self.sync_not_before:
                wait = min(wait, self.sync_not_before - now)
            else:
                out.extend(self._sync_request(node))
                if out:
                    self._sent_visit = m.machine.visit
        elif request == "leave":
            # not held behind a JoinGroup in flight: leaving must not wait out a rebalance
            self._sent_visit = m.machine.visit
            out.append(self._leave_request(node))
        if self._request_in_flight and request is None and m.machine.attribute("request") in ("join", "sync"):
            self._tell_slow(now)
            wait = min(wait, self._slow.wait(now))
        if heartbeats and m.generation >= 0:
            if m.heartbeat.due(now):
                m.heartbeat.sent(now)
                out.append(
                    Outgoing(
                        heartbeat_request(m._config, m.generation, m.member_id),
                        node,
                        # mypy cannot type a lambda with default arguments (python/mypy#15459)
                        lambda pending, answered, sent=(m.member_id, m.generation), at=now: self._on_heartbeat(  # type: ignore[misc]
                            pending, answered, sent, at
                        ),
                    )
                )
            wait = min(wait, m.heartbeat.wait(now))
        return wait, out

    def _tell_slow(self, now: float) -> None:
        """A JoinGroup or SyncGroup unanswered for seconds: say what the member waits for, and why a broker
        may hold it, once after SlowWait.FIRST_MS and then every EVERY_MS (no records come meanwhile)."""
        waited = self._slow.due(now)
        if waited is None:
            return
        m = self.m
        group, what = m._config.group_id, self._slow.what
        if self._slow.told > 1:
            log.warning("group %s: still waiting for the coordinator to answer %s (%.0f s)", group, what, waited / 1000)
            return
        host = m._coordinator.brokers.get(m._coordinator.node) if m._coordinator.node is not None else None
        where = f" at {host[0]}:{host[1]}" if host else ""
        if what == "JoinGroup":
            why = (
                "a broker holds JoinGroup while the group forms: Apache Kafka for group.initial.rebalance.delay.ms "
                "(3 s by default) or until the other members rejoin; Tansu, the embedded broker, for half of "
                f"session_timeout_ms ({m._config.session_timeout_ms / 2000:.1f} s here; a smaller "
                "session_timeout_ms shortens it)"
            )
        else:
            why = (
                f"it answers once the leader ({m.leader_id}) has sent the assignment; a member of an earlier run "
                "that ended without close() can hold the group up until its session_timeout_ms runs out"
            )
        log.warning(
            "group %s: waiting %.0f s for the coordinator%s to answer %s, no records until then: %s",
            group,
            waited / 1000,
            where,
            what,
            why,
        )

    def _watch_metadata(self) -> None:
        """A new topic matching the pattern, or a partition count change, means a new assignment."""
        m = self.m
        if m._metadata.version == self._metadata_version or m.machine.state == "leaving":
            return
        self._metadata_version = m._metadata.version
        if m._subs.pattern is not None:
            m._metadata.all_topics_wanted = True
        if m.machine.state != "stable":
            return
        topics = m._subscribed_topics()
        if (
            topics != m._joined_topics
            or partition_counts(m._metadata, topics) != m._joined_counts
            or self.assignment_outdated()
        ):
            m._request_rejoin("subscribed topics or their partitions changed")

    def _join_request(self, node: int) -> Outgoing:
        m = self.m
        topics = m._subscribed_topics()
        m._joined_topics = topics
        owned = tuple(sorted(m.owned)) if m.protocol is RebalanceProtocol.COOPERATIVE else ()
        request = join_group_request(m._config, m.member_id, m.generation, topics, owned, m.assignors)
        self._request_in_flight = True
        self._slow.start("JoinGroup", m.machine.now)
        log.info(
            "group %s: JoinGroup (generation %d, owned %s)",
            m._config.group_id,
            m.generation,
            sorted(tp.partition for tp in owned),
        )
        # the coordinator holds JoinGroup until the group rebalances: allow the rebalance timeout
        timeout = max(m._config.request_timeout_ms, m._config.max_poll_interval_ms + 5000)
        visit, sent = m.machine.visit, m.machine.now
        return Outgoing(
            request, node, lambda pending, now: self._on_join(pending, now, visit, sent), timeout_ms=timeout
        )

    def _round_answer(self, pending, visit: int) -> int | None:
        """The error code of a JoinGroup or SyncGroup answer; None when there is nothing to do (the
        machine has left the visit that sent it, or the request failed and the round is retried after
        join_backoff)."""
        m = self.m
        self._request_in_flight = False
        self._slow.stop()
        if m.machine.visit != visit:
            return None
        if pending.error is not None:
            m._coordinator.mark_unknown()
            m.machine.fire("join_failed")
            return None
        return pending.response.error_code

    def _on_join(self, pending, now: float, visit: int, sent: float) -> None:
        m = self.m
        code = self._round_answer(pending, visit)
        if code is None:
            return
        r = pending.response
        if code == 0 and r.leader and r.leader != r.member_id and r.leader == m.former_member_id:
            self._take_back_former_id(r.member_id, r.generation_id, now)
            return
        if code == 0:
            m.member_id = r.member_id
            m.generation = r.generation_id
            m.group_protocol = r.protocol_name
            m.leader_id = r.leader
            self._round.joined(r.members)
            self.joined_at = now
            m.heartbeat.reset(now)
            m.machine.restart_timer("session", heard(pending, sent))
            log.info(
                "group %s: joined generation %d as %s (leader %s, %d members)",
                m._config.group_id,
                m.generation,
                m.member_id,
                m.leader_id,
                len(self._round.members),
            )
            m._record("joined", ())
            m.machine.fire("joined", now)
        elif code == MEMBER_ID_REQUIRED:
            m.member_id = r.member_id
            m.machine.fire("member_id_required", now)
        else:
            self._round_failed(code, "JoinGroup")

    def _take_back_former_id(self, given: str, generation: int, now: float) -> None:
        """The group's leader is this member's former id, which it gave up: join again under it (the spec's
        leader_is_former_self), and leave the id just given."""
        m = self.m
        former, m.former_member_id = m.former_member_id, None  # once: a second time takes the ordinary path
        assert former is not None
        log.warning(
            "group %s: the coordinator names as leader of generation %d this member's former id %s, which it gave "
            "up (a broker that keeps a leader that left during a rebalance, as Tansu does: nobody else can "
            "assign); joining again under that id, leaving %s",
            m._config.group_id,
            generation,
            former,
            given,
        )
        self._stand_ins.append(given)
        m.member_id = former
        m.machine.fire("leader_is_former_self", now)

    def _sync_request(self, node: int) -> list[Outgoing]:
        m = self.m
        assignment: dict[str, Assignment] = {}
        if m.leader_id == m.member_id:
            assigned = self._assign()
            if assigned is None:
                return []  # waiting for metadata of topics other members subscribe to
            assignment = assigned
        self._request_in_flight = True
        self._slow.start("SyncGroup", m.machine.now)
        request = sync_group_request(m._config, m.generation, m.member_id, m.group_protocol, assignment)
        visit, sent = m.machine.visit, m.machine.now
        return [Outgoing(request, node, lambda pending, now: self._on_sync(pending, now, visit, sent))]

    def _assign(self) -> dict[str, Assignment] | None:
        m = self.m
        assignor = next((a for a in m.assignors if a.name == m.group_protocol), None)
        if assignor is None:
            m.fatal = ke.InconsistentGroupProtocolError(
                f"the group chose {m.group_protocol!r}, which this member does not offer"
            )
            m.machine.fire("fatal_error")
            return None
        return self._round.assign(assignor, m.machine.now)

    def assignment_outdated(self) -> bool:
        """The leader's: the group's topics now have other partition counts than it assigned by."""
        m = self.m
        return m.leader_id == m.member_id and self._round.outdated()

    def _on_sync(self, pending, now: float, visit: int, sent: float) -> None:
        m = self.m
        code = self._round_answer(pending, visit)
        if code is None:
            return
        r = pending.response
        if code == 0:
            data = r.assignment
            assignment = decode_assignment(bytes(data) if data is not None else b"")
            m._new, m._synced = frozenset(assignment.partitions), assignment
            log.info(
                "group %s: generation %d assigns %s",
                m._config.group_id,
                m.generation,
                sorted(tp.partition for tp in m._new),
            )
            m.machine.restart_timer("session", heard(pending, sent))
            m.machine.fire("synced", now)
        else:
            self._round_failed(code, "SyncGroup")

    def _round_failed(self, code: int, what: str) -> None:
        """A JoinGroup or SyncGroup error: fenced, fatal, or retried after join_backoff."""
        m = self.m
        if code in FENCED:
            log.info(
                "group %s: %s says this member is fenced: %s", m._config.group_id, what, ke.for_code(code).__name__
            )
            m.machine.fire("fenced_error")
        elif code in FATAL:
            m._fail(code, what)
        else:
            log.info("group %s: %s failed: %s", m._config.group_id, what, ke.for_code(code).__name__)
            if code in COORDINATOR_ERRORS:
                m._coordinator.mark_unknown()
            m.machine.fire("join_failed")

    def _on_heartbeat(self, pending, now: float, sent: tuple[str, int], sent_at: float) -> None:
        m = self.m
        state = m.machine.state
        if sent != (m.member_id, m.generation) or m.machine.attribute("heartbeat") != "send":
            # an answer about a membership this member has already left behind (Java: generationUnchanged)
            log.debug("group %s: stale heartbeat answer ignored (state %s)", m._config.group_id, state)
            return
        if pending.error is not None:
            m.heartbeat.answered(now, ok=False)
            if not keeps_coordinator(pending.error):  # as Java: a timeout keeps the coordinator
                m._coordinator.mark_unknown()
            return
        code = pending.response.error_code
        m.heartbeat.answered(now, ok=code == 0)
        if code in (0, REBALANCE_IN_PROGRESS):
            # the coordinator holds this member's session (Java counts a rebalance answer too)
            m.machine.restart_timer("session", heard(pending, sent_at))
        if code == 0:
            return
        if code == REBALANCE_IN_PROGRESS:
            log.info("group %s: heartbeat says the group rebalances (state %s)", m._config.group_id, state)
            m.machine.fire("rejoin_needed", now)  # ignored mid-round: the next heartbeat says it again
        elif code in FENCED:
            log.info(
                "group %s: heartbeat says this member is fenced: %s (state %s)",
                m._config.group_id,
                ke.for_code(code).__name__,
                state,
            )
            m.machine.fire("fenced_error", now)
        elif code in FATAL:
            m._fail(code, "Heartbeat")
        elif code in COORDINATOR_ERRORS:
            m._coordinator.mark_unknown()

    def _leave_request(self, node: int) -> Outgoing:
        m = self.m
        request = leave_group_request(m._config, m.member_id)
        self.leave_in_flight = True
        log.info("group %s: LeaveGroup as %s (state %s)", m._config.group_id, m.member_id, m.machine.state)
        # mypy cannot type a lambda with default arguments (python/mypy#15459)
        return Outgoing(request, node, lambda pending, now, visit=m.machine.visit: self._on_leave(pending, now, visit))  # type: ignore[misc]

    def _on_leave(self, pending, now: float, visit: int) -> None:
        m = self.m
        self.leave_in_flight = False
        code = pending.response.error_code if pending.error is None else None
        log.info("group %s: LeaveGroup answered: %s", m._config.group_id, pending.error or ke.for_code(code).__name__)
        if m.machine.state == "leaving" and m.machine.visit == visit:
            m.machine.fire("left", now)
