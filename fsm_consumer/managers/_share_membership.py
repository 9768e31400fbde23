"""Membership of a share group (KIP-932): the model of specs/share_membership.yaml, sans-IO.

Who the member is (its own member id, a Kafka Uuid; the epoch the coordinator gave), what it subscribes to,
the target assignment the coordinator sent and the part of it applied (what the share fetching reads, as
the spec's ``fetching`` attribute allows), and what it does on the spec's transitions. ShareGroupHeartbeat is
built and its answers read by ``ShareHeartbeatManager`` (_share_heartbeat.py); the application's calls
(subscribe, poll, close) come in through the methods below, each firing a trigger the spec declares as an
event, so an intent is never dropped by a state check here.

As Java's ShareMembershipManager: no callbacks, no commit; a target is applied at once, the part whose
topics the metadata knows, the rest when it does.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..machines import SpecMachine, shipped_spec
from ._share_session import TopicIdPartition

log = logging.getLogger("fsm_consumer.share")


def new_member_id() -> str:
    """A member id as the Java client makes it (KIP-1082): Kafka's Uuid.randomUuid().toString(), 22 characters of
    URL-safe base64. Not str(uuid4()) as the consumer protocol's: the broker parses the member id of a
    ShareFetch with Uuid.fromString, which refuses the dashed form. One starting with '-' is drawn again, as
    Kafka's Uuid does (it reads as an option on a command line)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


class ShareMembershipManager:
    """The member of one share group; its machine is ``self.machine``."""

    SPEC = "share_membership"

    def __init__(
        self,
        group_id: str,
        *,
        config: Any = None,
        rack_id: str | None = None,
        topic_known: Callable[[str], bool] = lambda topic_id: True,
        close_sessions: Callable[[float], bool] | None = None,
        now: float = 0.0,
        member_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.rack_id = rack_id or None
        self.member_id = member_id or new_member_id()  # kept for the member's whole life
        self.epoch = 0
        self.joins = 0  # memberships begun: an answer to a heartbeat of an earlier one is dropped
        self.subscription: tuple[str, ...] = ()
        self.target: dict[str, tuple[int, ...]] | None = None  # topic id -> partitions, the newest one received
        self.target_epoch = -1
        self.assignment: frozenset[TopicIdPartition] = frozenset()  # the part of the target applied
        self.heartbeat_interval_ms = 0.0  # the coordinator's; 0 until its first answer (the spec's default)
        self.heartbeat_due = False
        self.fatal: BaseException | None = None
        self._topic_known = topic_known  # the metadata knows this topic id (its name and leaders)
        self._close_sessions = close_sessions  # close every share session; True when none is left open
        self._wanted = False  # subscribe() since the last unsubscribe()/close(): a completed leave rejoins
        self._epoch_gone = False
        self.machine = SpecMachine(shipped_spec(self.SPEC), self, config=config, now=now, instance=group_id)

    @property
    def state(self) -> str:
        return self.machine.state

    # -- what the application asks -----------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str], now: float) -> None:
        self.subscription = tuple(sorted(set(topics)))
        if not self.subscription:
            self.leave(now)
            return
        self._wanted = True
        self.machine.restart_timer("poll", now)
        self.machine.fire("join_requested", now)

    def leave(self, now: float) -> None:
        """close() or unsubscribe()."""
        self._wanted = False
        self.machine.fire("leave_requested", now)
        if self.state != "prepare_leaving" and self._close_sessions is not None:
            # out of the group already (stale: its leave went when it became stale; fatal): no prepare_leaving
            # closes the share sessions, so they close here - what the member still holds is released at once,
            # and close() does not wait out its timeout for sessions nobody would close
            self._close_sessions(now)

    def on_poll(self, now: float) -> None:
        """The application called poll(): the poll timer restarts; a stale member joins again."""
        self.machine.restart_timer("poll", now)
        self.machine.fire("poll_resumed", now)

    def on_metadata_changed(self, now: float) -> None:
        """The metadata may name more of the target: applied at once."""
        if self.target is not None and self._resolved(self.target) != self.assignment:
            self.machine.fire("target_changed", now)

    def on_sessions_closed(self, now: float) -> None:
        """Every share session answered its closing request (or ended otherwise)."""
        if self.machine.may("sessions_closed"):
            self.machine.fire("sessions_closed", now)

    def tick(self, now: float) -> None:
        self.machine.tick(now)

    def fetch_assignment(self) -> frozenset[TopicIdPartition]:
        """What the share fetching lists: the applied assignment while the spec's ``fetching`` attribute says so."""
        return self.assignment if self.machine.attribute("fetching") == "assignment" else frozenset()

    # -- what the coordinator's answers say (called by the heartbeat manager) -------------------------------
    def take_target(self, epoch: int, assigned: Mapping[str, Sequence[int]]) -> bool:
        """A heartbeat answer carried an assignment (topic id -> partitions): the newest target. True when it
        differs from what is applied."""
        self.target_epoch = epoch
        self.target = {tid: tuple(sorted(parts)) for tid, parts in assigned.items()}
        return self._resolved(self.target) != self.assignment or not self._complete()

    def fail(self, error: BaseException) -> None:
        if self.fatal is None:  # the first fatal error is the one reported
            self.fatal = error
        self.machine.fire("fatal_error")

    # -- conditions and durations named in the spec ----------------------------------------------------------
    def target_differs(self) -> bool:
        return self.target is not None and (self._resolved(self.target) != self.assignment or not self._complete())

    def epoch_gone(self) -> bool:
        return self._epoch_gone

    def wants_membership(self) -> bool:
        return self._wanted and bool(self.subscription)

    def broker_heartbeat_interval_ms(self, configured: float) -> float:
        return self.heartbeat_interval_ms or configured

    # -- actions named in the spec ------------------------------------------------------------------------
    def prepare_join(self) -> None:
        self.epoch = 0
        self.joins += 1
        self._epoch_gone = False
        log.info("share group %s: joining as %s", self.group_id, self.member_id)

    def apply_target(self) -> None:
        """Apply what the metadata names of the target at once (no revocation, no callback); complete: acknowledge."""
        target = self.target or {}
        applied = self._resolved(target)
        if applied != self.assignment:
            log.info(
                "share group %s: epoch %d assigns %s (was %s)",
                self.group_id,
                self.target_epoch,
                sorted(applied),
                sorted(self.assignment),
            )
        self.assignment = applied
        if self._complete():
            self.machine.fire("reconciled")

    def heartbeat_wanted(self) -> None:
        self.heartbeat_due = True

    def drop_membership(self) -> None:
        """Fenced: the epoch is gone, and the assignment with it; join again at once with the same member id."""
        log.info("share group %s: epoch %d fenced, joining again", self.group_id, self.epoch)
        self._drop()
        self.machine.fire("rejoin")

    def leave_as_stale(self) -> None:
        log.warning(
            "share group %s: poll() not called for max_poll_interval_ms; leaving the group until the next poll()",
            self.group_id,
        )
        self._drop()

    def start_leaving(self) -> None:
        self.assignment = frozenset()
        self.target = None
        done = True if self._close_sessions is None else self._close_sessions(self.machine.now)
        if done:
            self.machine.fire("sessions_closed")

    def forget_epoch(self) -> None:
        self._epoch_gone = True
        self.epoch = 0

    def forget_membership(self) -> None:
        self._drop()

    def record_fatal_error(self) -> None:
        self.assignment = frozenset()
        log.error("share group %s: %s", self.group_id, self.fatal)

    # -- helpers --------------------------------------------------------------------------------------------
    def _drop(self) -> None:
        self.epoch = 0
        self.target = None
        self.assignment = frozenset()

    def _resolved(self, target: Mapping[str, Sequence[int]]) -> frozenset[TopicIdPartition]:
        return frozenset(
            TopicIdPartition(tid, p) for tid, parts in target.items() if self._topic_known(tid) for p in parts
        )

    def _complete(self) -> bool:
        return all(self._topic_known(tid) for tid in (self.target or {}))
