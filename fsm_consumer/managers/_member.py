"""What a group member does whatever its protocol: the base of the classic member (``MembershipManager``,
specs/membership.yaml) and the consumer-protocol member (``ConsumerMembershipManager``, KIP-848,
specs/consumer_membership.yaml).

Both hold what the member owns, ask the application to run rebalance callbacks and wait for their
acknowledgement (_callbacks.py), auto-commit what they revoke, lose what they can no longer own, and
leave; the hooks below carry the same names in both specs. Each subclass adds its protocol: the requests,
the answers, and the conditions its spec names.
"""

from __future__ import annotations

import logging

from .._history_writer import HistoryWriter, tp_list
from ..events import CallbackAckEvent
from ..machines import SpecMachine, shipped_spec
from ..structs import TopicPartition
from ._callbacks import ACK_TRIGGER, RebalanceCallbacks

log = logging.getLogger("fsm_consumer.membership")


class MemberBase:
    SPEC = ""  # the spec this member is the model of
    generation: int
    member_id: str

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
        self._background_events = background_events  # an error raised once by the next poll() (ErrorEvent)
        self.owned: frozenset[TopicPartition] = frozenset()
        self._to_revoke: frozenset[TopicPartition] = frozenset()
        self._added: frozenset[TopicPartition] = frozenset()
        self._lost: frozenset[TopicPartition] = frozenset()
        self._commit_on_revoke = True  # False once close(autocommit=False) began
        self._closing = False  # close() began: a completed leave does not rejoin
        self._unsubscribing = False  # unsubscribe() began, and no subscribe() since: nor does it then
        self._revocation_commit = 0  # identifies the revoked partitions' auto-commit last awaited
        self._last_poll: float | None = None
        self.fatal: BaseException | None = None
        self.rebalance_started: float | None = None
        self.rebalances = 0
        self.rebalance_last_ms: float | None = None
        self.rebalance_total_ms = 0.0
        self.session_expiries = 0
        self.history: list = []  # (event, partitions, time, generation), bounded
        self.history_file = history  # the consumer's history (history_path), or None
        # no clock: the engine ticks this machine each loop and passes `now` to every fire
        self.machine = SpecMachine(shipped_spec(self.SPEC), self, config=config, instance=config.client_id)
        self._revocation_waits = frozenset(self.machine.spec.events["revocation_completed"].arrives_in)

    # -- what the application asks (through events) ---------------------------------------------
    # Every one of these fires a trigger the spec declares as an event: legal (or declared
    # ignorable) in every state, so an intent is never dropped by a state check here.
    def on_subscription_changed(self, now: float) -> None:
        self._unsubscribing = False  # subscribe() after unsubscribe(): a member again
        self._last_poll = now
        self.machine.restart_timer("poll", now)
        self.machine.fire("join_requested", now)

    def on_unsubscribe(self, now: float) -> None:
        # the intent is recorded here, on this thread: the application thread clears the subscription only
        # once this leave completed, and a leave that saw it still set rejoined (unsubscribe() never returned)
        self._unsubscribing = True
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
            # an abandoned callback finished late (the state no longer waits for it: timed out, fenced,
            # fatal, or another callback was asked for since): nothing waits for it any more
            log.debug("group %s: late acknowledgement ignored (state %s)", self._config.group_id, self.machine.state)
            return
        self._record(f"{kind}_done", ())
        if kind == "lost":
            self._forget_lost()
        self.machine.fire(ACK_TRIGGER[kind], now)

    @property
    def last_poll(self) -> float | None:
        """When the application last polled (engine ms), for metrics."""
        return self._last_poll

    def commit_stamp(self) -> tuple[int, str]:
        """The membership a commit is accepted under, compared again before it is sent."""
        return self.generation, self.member_id

    def commit_epoch(self) -> int:
        """What an OffsetCommit carries as GenerationIdOrMemberEpoch."""
        return self.generation

    def fetch_member(self) -> tuple[str, int] | None:
        """The member id and epoch an OffsetFetch carries. Classic: none (OffsetFetch names the group only)."""
        return None

    def no_longer_owned(self, partitions) -> frozenset[TopicPartition]:
        """Of a commit's partitions, those this member may no longer commit. Classic: none (a commit is
        refused as a whole once the generation it was accepted under moved; revoking takes a new one)."""
        return frozenset()

    # -- conditions named in both specs -----------------------------------------------------------
    def owns_partitions(self) -> bool:
        return bool(self.owned)

    def keeps_partitions(self) -> bool:
        """Owns partitions besides those being revoked."""
        return bool(self.owned - self._to_revoke)

    def wants_membership(self) -> bool:
        """A subscription no close() or unsubscribe() has ended: subscribed again after leaving."""
        return not self._closing and not self._unsubscribing and self._subs.kind in ("topics", "pattern")

    # -- actions named in both specs -----------------------------------------------------------------
    def request_revoke_callback(self) -> None:
        self._ask("revoke", self._to_revoke)

    def request_leave_commit(self) -> None:
        """Leaving: every partition still owned stops fetching and its position is auto-committed (then the
        callback, then the release)."""
        self._to_revoke = self.owned
        self._subs.set_revoking(self._to_revoke, True)
        self.commit_revoked()

    def commit_revoked(self) -> None:
        """The partitions to revoke, still this member's, have their positions auto-committed (the Java
        client's order: commit, callback, release); revocation_completed when the commit is answered, at
        once when there is nothing to commit."""
        positions = {tp: off for tp, off in self._subs.positions().items() if tp in self._to_revoke}
        self._revocation_commit += 1
        if positions and self._config.enable_auto_commit and self._commit_on_revoke and self._may_commit():
            sent = self._revocation_commit
            self._commits.commit_positions(positions, on_done=lambda error: self._revocation_committed(sent))
        else:
            self.machine.fire("revocation_completed")

    def release_revoked(self) -> None:
        """on_partitions_revoked returned: the revoked partitions leave the assignment, only now (their
        positions were committed before the callback): no other member is given them while this one may
        still commit them."""
        revoked = self._to_revoke
        self._own(self.owned - revoked)
        self._record("revoked", revoked)
        self._to_revoke = frozenset()

    def _may_commit(self) -> bool:
        """A member of a generation (an epoch) may commit what it revokes."""
        return self.generation >= 0

    def _revocation_committed(self, sent: int) -> None:
        # awaited where the spec's revocation_completed arrives (after a leave_requested, a new visit of a
        # twin state); an answer that outlived its wait (the commit timeout fired, a later round began) is
        # dropped
        if sent == self._revocation_commit and self.machine.state in self._revocation_waits:
            self._revocation_commit += 1  # answered once
            self.machine.fire("revocation_completed")

    def _count_rebalance(self) -> None:
        """A rebalance (a reconciliation) this member took part in ended: its figures for metrics()."""
        if self.rebalance_started is not None:
            took = self.machine.now - self.rebalance_started
            self.rebalances += 1
            self.rebalance_last_ms = took
            self.rebalance_total_ms += took
            self.rebalance_started = None

    def request_lost_callback(self) -> None:
        if not self._ask("lost", self._lost, fire=False):
            self._forget_lost()
            self.machine.fire("lost_acked")

    def _forget_lost(self) -> None:
        self._record("lost", self._lost)
        self._own(self.owned - self._lost)
        self._lost = frozenset()

    def leave_as_stale(self) -> None:
        """The leave (best effort, sent by poll() once for this visit) so the group reassigns now."""
        self._lost = self.owned
        self._subs.set_revoking(self.owned, True)
        self.rebalance_started = None

    def session_said(self) -> tuple[float, str]:
        """The member's session length (ms) and what sets it, for the log line of its expiry."""
        raise NotImplementedError

    def note_session_expired(self) -> None:
        self.session_expiries += 1
        ms, what = self.session_said()
        log.warning(
            "group %s: no heartbeat answered OK for %d ms (%s): the group may have moved on without member %s; "
            "its partitions %s are lost and it joins again",
            self._config.group_id,
            ms,
            what,
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

    def raise_once(self, error: BaseException) -> None:
        """An error the user must see, but that ends nothing (Java's ErrorEvent): the next poll() raises it once
        and the member goes on in its state (an ACL granted later lets it recover)."""
        from ..events import ErrorEvent

        log.error("group %s: %s", self._config.group_id, error)
        self._background_events.put(ErrorEvent(error))

    def record_fatal_error(self) -> None:
        log.error("group %s: %s", self._config.group_id, self.fatal)
        self._held.hold(("group",), self.fatal)  # raised by every call until close()
        if self.owned:
            # as Java: the listener is told the partitions are lost (nothing waits for it: the state is final)
            self._lost = self.owned
            self._subs.set_revoking(self._lost, True)
            self._callbacks.ask("lost", self._lost, skip_if_empty=True)
            self._forget_lost()

    # -- helpers -----------------------------------------------------------------------------------
    def _ask(self, kind: str, partitions, *, skip_if_empty: bool = True, fire: bool = True) -> bool:
        """Ask the application thread for a callback; when there is none to run, go on at once."""
        if self._callbacks.ask(kind, partitions, skip_if_empty=skip_if_empty):
            return True
        self._record(f"{kind}_done", ())
        if fire:
            self.machine.fire(ACK_TRIGGER[kind])
        return False

    def _own(self, partitions: frozenset[TopicPartition]) -> None:
        """The one place the member's partitions change: errors held for partitions it gives up go with
        them (the user could not clear them: a seek of a partition not assigned is refused)."""
        self.owned = partitions
        self._subs.set_group_assignment(partitions)
        self._held.release_where(lambda key: key[0] == "partition" and key[1] not in partitions)

    def _record(self, what: str, partitions) -> None:
        self.history.append((what, tuple(sorted(partitions)), self.machine.now, self.generation))
        if self.history_file is not None:
            self.history_file.write(
                what, member=self.member_id, generation=self.generation, partitions=tp_list(partitions)
            )
        if len(self.history) > 10_000:
            del self.history[:5_000]
