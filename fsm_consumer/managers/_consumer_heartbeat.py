"""ConsumerGroupHeartbeat for one consumer-protocol member (KIP-848): when it goes out, what it carries,
and what each answer means for the member.

When a heartbeat goes and which epoch it carries are the ``heartbeat`` and ``epoch`` attributes of
specs/consumer_membership.yaml. The request is full (every field) when joining and after any failure;
otherwise only the fields that changed since the last one sent (subscription, owned partitions), as
the Java client's heartbeat state does. One heartbeat is in flight at a time; a failed one is retried
after the error policy's backoff.
"""

from __future__ import annotations

import logging
import uuid
from functools import partial
from typing import Any

import kafka.errors as ke

from ..policy import Action, Backoffs, broker_lacks, classify, keeps_coordinator, public_error
from ..protocol import ConsumerGroupHeartbeatRequest
from ._base import FOREVER, Outgoing
from ._consumer_session import SessionTimeoutLookup

log = logging.getLogger("fsm_consumer.membership")

_UNSUPPORTED_VERSION = 35
_TOPIC_AUTHORIZATION_FAILED = 29
_COORDINATOR_LOAD_IN_PROGRESS = 14
_GROUP_MAX_SIZE_REACHED = 81
_LEAVE_EPOCH, _STATIC_LEAVE_EPOCH = -1, -2
_NO_KIP_848 = (
    "the broker does not support the consumer group protocol (KIP-848: no ConsumerGroupHeartbeat API); use "
    "group_protocol='classic', or a broker that serves it (Apache Kafka 4.0 or later, where it is on by default)"
)


class HeartbeatExchange:
    """The heartbeat in flight, what the last one sent carried, and when the next may go."""

    def __init__(self, member: Any) -> None:
        self.m = member  # the ConsumerMembershipManager (typed Any: it imports this module)
        self.full = True  # the next heartbeat carries every field
        self.leave_in_flight = False
        self._in_flight = False
        self._sent_visit = -1  # the machine visit whose at-once heartbeat went out
        self._sent_subscription: tuple[Any, ...] | None = None
        self._sent_owned: frozenset | None = None
        self._backoff = Backoffs(member._config.retry_backoff_ms, member._config.retry_backoff_max_ms)
        self._metadata_version = -1
        self.lease_from: float | None = None  # when the last heartbeat answered OK was sent
        config = member._config
        self._session = SessionTimeoutLookup(config.group_id, config.retry_backoff_ms, config.retry_backoff_max_ms)

    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        m = self.m
        self._publish_lease()
        # the lease needs the group's session timeout, which no heartbeat answer carries
        lookup = self._session.poll(now, m._coordinator.node, self._learned) if m.epoch > 0 else []
        wait, out = self._heartbeat_poll(now)
        return wait, lookup + out

    # -- the lease (the spec's session timer) ------------------------------------------------------
    def _publish_lease(self) -> None:
        """The collector hands out records only within the lease (see SubscriptionState.lease_until)."""
        deadline = self.m.machine.timer_deadline("session")
        self.m._subs.lease_until = FOREVER if deadline is None else deadline

    def joining(self) -> None:
        """A new join: every field goes, at once, even while a heartbeat of the lost epoch is unanswered."""
        self.full = True
        self._in_flight = False

    def _renew(self, sent: float) -> None:
        """A heartbeat answered OK: the broker heard from the member after ``sent``."""
        self.lease_from = sent if self.lease_from is None else max(self.lease_from, sent)
        self.m.machine.restart_timer("session", sent)
        self._publish_lease()

    def _learned(self, session_ms: float) -> None:
        self.m.session_timeout_ms = session_ms
        if self.lease_from is not None:
            self.m.machine.restart_timer("session", self.lease_from)
        self._publish_lease()

    def _heartbeat_poll(self, now: float) -> tuple[float, list[Outgoing]]:
        m = self.m
        mode = m.machine.attribute("heartbeat")
        if mode == "none":
            return FOREVER, []
        self._watch_metadata()
        at_once = mode == "at_once" and self._sent_visit != m.machine.visit
        # the leave goes at once, as Java's close: never behind an ordinary heartbeat in flight (a coordinator
        # holding one held close() with it) nor a backoff
        leave = at_once and m.machine.attribute("epoch") == "leave"
        if not (at_once or (mode == "interval" and m.heartbeat_due)) or (self._in_flight and not leave):
            return FOREVER, []
        wait = 0.0 if leave else self._backoff.wait("heartbeat", now)
        if wait > 0:
            return wait, []
        node = m._coordinator.node
        if node is None:
            m._coordinator.needed()
            if m.machine.state == "stale":
                self._sent_visit = m.machine.visit  # best effort only: no coordinator, no leave
            return FOREVER, []
        return FOREVER, [self._heartbeat(node, now)]

    def _watch_metadata(self) -> None:
        """A pattern's new match goes out with the next heartbeat; a target naming unknown topics waits."""
        m = self.m
        if m._metadata.version == self._metadata_version:
            return
        self._metadata_version = m._metadata.version
        if m._subs.pattern is not None:
            m._metadata.all_topics_wanted = True
        if m.resolve_target():
            m.machine.fire("target_changed")

    def _subscription(self) -> tuple[Any, ...]:
        """The topic names the heartbeat subscribes to. A pattern is resolved here, against the metadata of every
        topic, as the Java client resolves a java.util.regex.Pattern: with Python's semantics and flags, and
        leaving out internal topics (exclude_internal_topics). Sent as the broker's regex (RE2J) it matched
        __consumer_offsets under ".*" and ignored flags."""
        return ("names", self.m.subscribed_topics())

    def _heartbeat(self, node: int, now: float) -> Outgoing:
        m = self.m
        config = m._config
        epoch_kind = m.machine.attribute("epoch")
        state, visit = m.machine.state, m.machine.visit
        if epoch_kind == "leave":
            epoch = _STATIC_LEAVE_EPOCH if config.group_instance_id is not None else _LEAVE_EPOCH
            request = ConsumerGroupHeartbeatRequest(
                group_id=config.group_id,
                member_id=m.member_id,
                member_epoch=epoch,
                instance_id=config.group_instance_id,
            )
            self.leave_in_flight = True
        else:
            epoch = 0 if epoch_kind == "join" else m.epoch
            full = self.full or epoch == 0
            subscription = self._subscription()
            # a static member names its instance in every heartbeat (as Java): without it the broker took it for
            # a dynamic one, and a member whose id another instance took ended with UNRELEASED_INSTANCE_ID
            fields: dict[str, Any] = {"instance_id": config.group_instance_id}
            if full:
                fields.update(
                    rack_id=config.client_rack or None,
                    rebalance_timeout_ms=config.max_poll_interval_ms,
                    server_assignor=config.group_remote_assignor,
                )
            if full or subscription != self._sent_subscription:
                fields["subscribed_topic_names"] = list(subscription[1])
                self._sent_subscription = subscription
            if full or m.owned != self._sent_owned:
                fields["topic_partitions"] = self._owned_by_id()
                self._sent_owned = m.owned
            request = ConsumerGroupHeartbeatRequest(
                group_id=config.group_id, member_id=m.member_id, member_epoch=epoch, **fields
            )
            self.full = False
        if m.machine.attribute("heartbeat") == "at_once":
            self._sent_visit = visit
        m.heartbeat_due = False
        m.heartbeat.sent(now)
        self._in_flight = True
        m.machine.restart_timer("heartbeat", now)
        log.debug("group %s: heartbeat epoch %d (state %s)", config.group_id, epoch, state)
        if m.machine.may("acknowledgement_sent"):
            m.machine.fire("acknowledgement_sent", now)  # the coordinator hears the reconciled assignment
        answer = partial(self._on_answer, epoch=epoch, visit=visit, sent=now, joins=m.joins)
        return Outgoing(request, node, answer)

    def _owned_by_id(self) -> list:
        m = self.m
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(m.owned):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        parts = []
        for topic, partitions in by_topic.items():
            topic_id = m.topic_ids.get(topic) or _metadata_id(m, topic)
            if topic_id is not None:
                parts.append(
                    ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=uuid.UUID(topic_id), partitions=partitions)
                )
        return parts

    # -- answers -------------------------------------------------------------------------------------
    def _on_answer(self, pending, now: float, epoch: int, visit: int, sent: float, joins: int) -> None:
        m = self.m
        leaving = epoch < 0
        if leaving:
            self.leave_in_flight = False
        elif joins != m.joins:
            # sent before the member joined again (its lease ran out meanwhile): about an epoch gone; the
            # join reset what is in flight, so this one is not counted
            return
        self._in_flight = False
        if not leaving and m.machine.attribute("epoch") == "leave":
            return  # an ordinary heartbeat answered after the leave went out: nothing of it matters now
        if pending.error is not None:
            self._failed(pending.error, now, leaving, visit)
            return
        r = pending.response
        code = r.error_code
        m.heartbeat.answered(now, ok=code == 0)
        if leaving:
            log.info("group %s: left (%s)", m._config.group_id, ke.for_code(code).__name__ if code else "ok")
            self._left(visit, now)
            return
        if code:
            self._error(code, r.error_message, now)
            return
        self._backoff.succeeded("heartbeat")
        if m.machine.attribute("heartbeat") == "none" or m.machine.attribute("epoch") == "leave":
            return  # an answer about an epoch this member has left behind (fenced, leaving, gone)
        if m.machine.timer_ran_out("session"):  # the next tick fires session_expired
            log.info("group %s: a heartbeat answer read after the lease ran out proves nothing", m._config.group_id)
            return
        if r.member_id:
            m.member_id = r.member_id
        m.epoch = r.member_epoch
        if r.heartbeat_interval_ms > 0:
            m.heartbeat_interval_ms = float(r.heartbeat_interval_ms)
        changed = False
        if r.assignment is not None:
            assigned = {str(t.topic_id): tuple(t.partitions) for t in r.assignment.topic_partitions}
            changed = m.take_target(r.member_epoch, assigned)
        # the lease first: the spec's session timer is restarted before joined (restarted_by), so the state the
        # join enters (stable, reconciling) never runs without it, also when it ran out in joining (ignored there)
        self._renew(sent)
        if m.machine.attribute("epoch") == "join":
            if epoch == 0:
                log.info("group %s: joined at epoch %d as %s", m._config.group_id, m.epoch, m.member_id)
                m._record("joined", ())
                m.machine.fire("joined", now)
        elif changed:
            m.machine.fire("target_changed", now)

    def _left(self, visit: int, now: float) -> None:
        m = self.m
        if m.machine.may("left") and m.machine.visit == visit:
            m.machine.fire("left", now)

    def _failed(self, error: BaseException, now: float, leaving: bool, visit: int) -> None:
        m = self.m
        m.heartbeat.answered(now, ok=False)
        if broker_lacks(error):
            m.fail(ke.UnsupportedVersionError(f"group {m._config.group_id!r}: {_NO_KIP_848}"))
            return
        if classify(error) is Action.FATAL:
            m.fail(error)
            return
        if leaving:
            self._left(visit, now)  # best effort: the session runs out on the broker otherwise
            return
        log.info("group %s: heartbeat failed: %s", m._config.group_id, error)
        self._retry(now)
        if not keeps_coordinator(error):  # as Java: a timeout keeps the coordinator, a disconnect not
            m._coordinator.mark_unknown()

    def _retry(self, now: float) -> None:
        self.full = True
        self._sent_visit = -1  # an at-once heartbeat goes again
        self.m.heartbeat_due = True  # and an interval one, without waiting out another interval
        self._backoff.failed("heartbeat", now)

    def _error(self, code: int, message: str | None, now: float) -> None:
        """What an error code in a heartbeat answer does, as the error policy table says."""
        m = self.m
        name = ke.for_code(code).__name__
        action = classify(code)
        if code == _UNSUPPORTED_VERSION:  # the API is listed but the consumer protocol is switched off
            m.fail(ke.UnsupportedVersionError(f"group {m._config.group_id!r}: {_NO_KIP_848} ({message})"))
        elif code == _TOPIC_AUTHORIZATION_FAILED:
            # as Java: raised once by the next poll(), the member stays in its state and heartbeats on, so that
            # granting the ACL lets it recover (it was fatal for good: every poll() raised it after the grant)
            what = f"ConsumerGroupHeartbeat for group {m._config.group_id!r}" + (f" ({message})" if message else "")
            m.raise_once(public_error(code, what))
            self._retry(now)
        elif action is Action.FENCED:
            log.info("group %s: heartbeat says epoch %d is fenced: %s", m._config.group_id, m.epoch, name)
            self.full = True
            m.machine.fire("fenced_error", now)
        elif code == _COORDINATOR_LOAD_IN_PROGRESS:
            # the same coordinator, later (as Java: backoff and retry, no new FindCoordinator)
            log.info("group %s: heartbeat: the coordinator is loading the group; retried", m._config.group_id)
            self._retry(now)
        elif code == _GROUP_MAX_SIZE_REACHED:
            what = f"ConsumerGroupHeartbeat for group {m._config.group_id!r}"
            m.fail(
                ke.for_code(code)(
                    f"{what} failed: the group is full (the broker's group.consumer.max.size): use another group_id "
                    f"or raise the broker's limit{f' ({message})' if message else ''}"
                )
            )
        elif action is Action.REDISCOVER:
            log.info("group %s: heartbeat: %s, finding the coordinator again", m._config.group_id, name)
            m._coordinator.mark_unknown()
            self._retry(now)
        elif action in (Action.RETRY, Action.REFRESH_METADATA):
            log.info("group %s: heartbeat failed: %s %s", m._config.group_id, name, message or "")
            self._retry(now)
        else:
            m.fail_code(code, message)


def _metadata_id(m: Any, topic: str) -> str | None:
    info = m._metadata.topics.get(topic)
    return None if info is None else info.topic_id
