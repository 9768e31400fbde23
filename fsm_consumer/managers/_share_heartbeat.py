"""ShareGroupHeartbeat for one share-group member (KIP-932), sans-IO: Java's ShareHeartbeatRequestManager (and
the AbstractHeartbeatRequestManager it builds on), as plain data in and out.

``poll(now)`` returns at most one ``ShareHeartbeat``: when it goes and which epoch it carries are the
``heartbeat`` and ``epoch`` attributes of specs/share_membership.yaml. It carries the member id and epoch
always, the rack and the subscribed topic names when joining, after a failure or (the names) when they
changed, as Java's HeartbeatState. ``on_answer`` reads a ``ShareHeartbeatAnswer`` as Java's onResponse and
onErrorResponse do; ``on_failure`` a request that got no answer; ``on_api_versions`` a broker that lacks the
share APIs. The wiring layer turns the plain data into ShareGroupHeartbeat requests and back.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import attrs
import kafka.errors as ke

from ..policy import Action, Backoffs, broker_lacks, classify, keeps_coordinator, public_error
from ._share_membership import ShareMembershipManager
from ._share_session import NO_SHARE_GROUPS

log = logging.getLogger("fsm_consumer.share")

FOREVER = math.inf
LEAVE_EPOCH = -1
SHARE_API_KEYS = {76: "ShareGroupHeartbeat", 78: "ShareFetch", 79: "ShareAcknowledge"}
_COORDINATOR_LOAD_IN_PROGRESS, _COORDINATOR_NOT_AVAILABLE, _NOT_COORDINATOR = 14, 15, 16
_UNKNOWN_MEMBER_ID, _FENCED_MEMBER_EPOCH = 25, 110
_GROUP_AUTHORIZATION_FAILED, _UNSUPPORTED_VERSION, _INVALID_REQUEST, _GROUP_MAX_SIZE_REACHED = 30, 35, 42, 81


@attrs.frozen
class ShareHeartbeat:
    """A ShareGroupHeartbeat to send (``node``: the coordinator, None when the wiring picks it)."""

    node: int | None
    group_id: str
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...] | None  # None: unchanged since the last one, not sent
    rack_id: str | None  # sent once per membership (and after a failure), as Java's
    full: bool
    joins: int = 0  # the membership it belongs to (an answer to an earlier one is dropped)
    visit: int = -1  # the machine visit it went out in (a leave is answered for that visit only)

    @property
    def leave(self) -> bool:
        return self.member_epoch == LEAVE_EPOCH


@attrs.frozen
class ShareHeartbeatAnswer:
    """A ShareGroupHeartbeat response as plain data; ``assignment`` topic id -> partitions, None: unchanged."""

    error: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Mapping[str, Sequence[int]] | None = None


class ShareHeartbeatManager:
    """The heartbeat in flight, what the last one sent carried, and when the next may go."""

    def __init__(
        self,
        member: ShareMembershipManager,
        *,
        coordinator: Any = None,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 1000,
        backoffs: Backoffs | None = None,
    ) -> None:
        self.m = member
        self._coordinator = coordinator  # .node, .needed(), .mark_unknown(); None: the wiring finds it
        self._backoff = backoffs or Backoffs(retry_backoff_ms, retry_backoff_max_ms)
        self.full = True  # the next heartbeat carries every field (Java's SentFields reset)
        self._sent_subscription: tuple[str, ...] | None = None
        self._in_flight: int | None = None  # the membership (joins) whose ordinary heartbeat is in flight
        self.leave_in_flight = False
        self._sent_visit = -1  # the machine visit whose at-once heartbeat went out

    # -- requests ----------------------------------------------------------------------------------------
    def poll(self, now: float) -> tuple[float, list[ShareHeartbeat]]:
        """The heartbeat to send now, if any, and how long until one may be due."""
        m = self.m
        m.tick(now)
        mode = m.machine.attribute("heartbeat")
        if mode == "none":
            return FOREVER, []
        if m.epoch_gone():
            # fenced while the sessions close (prepare_leaving): the epoch is gone, and a heartbeat at epoch 0 would
            # join the group again - a member nothing takes out, since no leave goes (as Java: it stops heartbeating)
            return FOREVER, []
        at_once = mode == "at_once" and self._sent_visit != m.machine.visit
        # the leave goes at once (as Java: LEAVING heartbeats now), never behind a heartbeat in flight or a backoff
        leave = at_once and m.machine.attribute("epoch") == "leave"
        if not (at_once or (mode == "interval" and m.heartbeat_due)):
            due = m.machine.timer_deadline("heartbeat")
            return (FOREVER if due is None else max(0.0, due - now)), []
        if self._in_flight == m.joins and not leave:  # one of an earlier membership does not hold a join back
            return FOREVER, []
        wait = 0.0 if leave else self._backoff.wait("heartbeat", now)
        if wait > 0:
            return wait, []
        node = None
        if self._coordinator is not None:
            node = self._coordinator.node
            if node is None:
                self._coordinator.needed()
                if m.state == "stale":
                    self._sent_visit = m.machine.visit  # best effort only: no coordinator, no leave
                return FOREVER, []
        return FOREVER, [self._heartbeat(node, now)]

    def _heartbeat(self, node: int | None, now: float) -> ShareHeartbeat:
        m = self.m
        kind = m.machine.attribute("epoch")
        if kind == "leave":
            hb = ShareHeartbeat(node, m.group_id, m.member_id, LEAVE_EPOCH, None, None, False, m.joins, m.machine.visit)
            self.leave_in_flight = True
        else:
            epoch = 0 if kind == "join" else m.epoch
            full = self.full or epoch == 0  # as Java: every field when joining
            names = m.subscription if full or m.subscription != self._sent_subscription else None
            if names is not None:
                self._sent_subscription = names
            hb = ShareHeartbeat(
                node, m.group_id, m.member_id, epoch, names, m.rack_id if full else None, full, m.joins, m.machine.visit
            )
            self.full = False
            self._in_flight = m.joins
        if m.machine.attribute("heartbeat") == "at_once":
            self._sent_visit = m.machine.visit
        m.heartbeat_due = False
        m.machine.restart_timer("heartbeat", now)
        log.debug("share group %s: heartbeat epoch %d (state %s)", m.group_id, hb.member_epoch, m.state)
        if m.machine.may("acknowledgement_sent"):
            m.machine.fire("acknowledgement_sent", now)
        return hb

    # -- answers ---------------------------------------------------------------------------------------
    def on_api_versions(self, api_keys: Collection[int], now: float) -> bool:
        """The coordinator's ApiVersions: False (and the member fatal) when a share API is missing from it."""
        missing = [name for key, name in SHARE_API_KEYS.items() if key not in api_keys]
        if missing:
            self._fail_unsupported(f"no {', '.join(missing)} in its ApiVersions", now)
            return False
        return True

    def on_answer(self, hb: ShareHeartbeat, answer: ShareHeartbeatAnswer, now: float) -> None:
        m = self.m
        if hb.leave:
            self.leave_in_flight = False
            if answer.error:
                log.info("share group %s: the leave heartbeat answered error %d", m.group_id, answer.error)
            self._left(hb, now)
            return
        if self._in_flight == hb.joins:
            self._in_flight = None
        if hb.joins != m.joins:
            return  # sent before the member joined again: about an epoch gone
        if m.machine.attribute("epoch") == "leave":
            return  # answered after the leave went out (as Java: ignored while LEAVING)
        if answer.error:
            self._error(answer.error, answer.error_message, now)
            return
        self._backoff.succeeded("heartbeat")
        if m.machine.attribute("heartbeat") == "none":
            return  # not in the group (fenced, stale, out of it, fatal): as Java's isNotInGroup
        if answer.member_id:
            m.member_id = answer.member_id
        m.epoch = answer.member_epoch
        if answer.heartbeat_interval_ms > 0:
            m.heartbeat_interval_ms = float(answer.heartbeat_interval_ms)
        changed = answer.assignment is not None and m.take_target(answer.member_epoch, answer.assignment)
        if m.machine.attribute("epoch") == "join":
            if hb.member_epoch == 0:
                log.info("share group %s: joined at epoch %d as %s", m.group_id, m.epoch, m.member_id)
                m.machine.fire("joined", now)
        elif changed:
            m.machine.fire("target_changed", now)

    def on_failure(self, hb: ShareHeartbeat, error: BaseException, now: float) -> None:
        """The heartbeat got no answer (connection lost, timed out) or could not be sent."""
        m = self.m
        if broker_lacks(error):
            self._fail_unsupported(f"{type(error).__name__}: {error}", now)
            return
        if hb.leave:
            self.leave_in_flight = False
            self._left(hb, now)  # best effort: the session runs out on the broker otherwise
            return
        if self._in_flight == hb.joins:
            self._in_flight = None
        if hb.joins != m.joins:
            return
        if classify(error) is Action.FATAL:
            m.fail(error)
            return
        log.info("share group %s: heartbeat failed: %s", m.group_id, error)
        self._retry(now)
        if self._coordinator is not None and not keeps_coordinator(error):  # as Java: a timeout keeps it
            self._coordinator.mark_unknown()

    def _left(self, hb: ShareHeartbeat, now: float) -> None:
        m = self.m
        if m.machine.may("left") and m.machine.visit == hb.visit:
            m.machine.fire("left", now)

    def _retry(self, now: float, *, backoff: bool = True) -> None:
        self.full = True  # Java's heartbeatState.reset(): every field again
        self._sent_visit = -1  # an at-once heartbeat goes again
        self.m.heartbeat_due = True  # and an interval one, without waiting out another interval
        if backoff:
            self._backoff.failed("heartbeat", now)
        else:
            self._backoff.succeeded("heartbeat")  # Java's heartbeatRequestState.reset(): no backoff

    def _error(self, code: int, message: str | None, now: float) -> None:
        """An error code in the answer, as Java's onErrorResponse."""
        m = self.m
        said = f" ({message})" if message else ""
        if code in (_NOT_COORDINATOR, _COORDINATOR_NOT_AVAILABLE):
            log.info("share group %s: heartbeat error %d, finding the coordinator again%s", m.group_id, code, said)
            if self._coordinator is not None:
                self._coordinator.mark_unknown()
            self._retry(now, backoff=False)  # as Java: sent as soon as the coordinator is found
        elif code == _COORDINATOR_LOAD_IN_PROGRESS:
            log.info("share group %s: the coordinator is loading the group; retried%s", m.group_id, said)
            self._retry(now)
        elif code in (_FENCED_MEMBER_EPOCH, _UNKNOWN_MEMBER_ID):
            log.info("share group %s: epoch %d fenced (error %d)%s", m.group_id, m.epoch, code, said)
            self._retry(now, backoff=False)  # as Java: the join goes at once
            m.machine.fire("fenced_error", now)
        elif code == _UNSUPPORTED_VERSION:
            self._fail_unsupported(message or "UNSUPPORTED_VERSION", now)
        elif code == _GROUP_MAX_SIZE_REACHED:
            m.fail(
                ke.for_code(code)(
                    f"ShareGroupHeartbeat for group {m.group_id!r} failed: the group is full (the broker's "
                    f"group.share.max.size): use another group_id or raise the broker's limit{said}"
                )
            )
        elif code in (_GROUP_AUTHORIZATION_FAILED, _INVALID_REQUEST):
            m.fail(public_error(code, f"ShareGroupHeartbeat for group {m.group_id!r}{said}"))
        elif classify(code) in (Action.RETRY, Action.REFRESH_METADATA, Action.REDISCOVER):
            # Differs from Java on purpose: Java's default makes every other code fatal; here a code the error
            # policy calls retriable is retried after a backoff in every manager alike (one table decides)
            log.info("share group %s: heartbeat error %d; retried%s", m.group_id, code, said)
            if classify(code) is Action.REDISCOVER and self._coordinator is not None:
                self._coordinator.mark_unknown()
            self._retry(now)
        else:
            m.fail(public_error(code, f"ShareGroupHeartbeat for group {m.group_id!r}{said}"))

    def _fail_unsupported(self, detail: str, now: float) -> None:
        m = self.m
        m.fail(ke.UnsupportedVersionError(f"share group {m.group_id!r}: {NO_SHARE_GROUPS} ({detail})"))
