"""Share fetching (KIP-932), sans-IO: Java's ShareConsumeRequestManager, as plain data in and out.

Per broker node, one share session (_share_session.py, its spec's attributes deciding what the next request
may be) and at most one request in flight. ``poll(now)`` returns what to send: a ``ShareFetchIntent`` listing
the member's assigned partitions led by that node (only those added since, once the session is open, and
the ones dropped as forgotten), with the acknowledgements due there piggybacked; a
``ShareAcknowledgeIntent`` when acknowledgements are due and no ShareFetch is (always for a RENEW); and,
after ``close(now)``, the closing ShareAcknowledge (epoch -1) with the last acknowledgements. The answers come
back as ``ShareFetchAnswer`` (``on_fetch_answer``, ``on_acknowledge_answer``), failures through
``on_failure``; the acquired records go to the ShareBuffer. The wiring layer turns intents into
ShareFetch/ShareAcknowledge requests and their responses into answers: nothing here knows a wire class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import kafka.errors as ke

from ..machines import SpecMachine, shipped_spec
from ..policy import Action, classify, public_error
from ._share_batch import AckType, ShareBatch
from ._share_buffer import AckBatch, ShareBuffer
from ._share_session import NO_SHARE_GROUPS, SessionPlan, ShareSession, TopicIdPartition, _setting

log = logging.getLogger("fsm_consumer.share")

_NOT_LEADER_OR_FOLLOWER, _FENCED_LEADER_EPOCH = 6, 74
_GROUP_AUTHORIZATION_FAILED, _UNSUPPORTED_VERSION, _UNKNOWN_TOPIC_ID = 30, 35, 100
# a ShareFetch asks for at most twice a poll's worth: with one more poll's worth buffered and one handed out,
# that stays within the broker's default 2,000 record locks per share-partition at the default 500 a poll
MAX_SCALE = 2

Acks = Mapping[TopicIdPartition, tuple[AckBatch, ...]]


@attrs.frozen
class ShareFetchIntent:
    """A ShareFetch to send to ``node``. It never carries a RENEW: with IsRenewAck a ShareFetch must fetch nothing
    (KIP-1222), so renewals go in a ShareAcknowledge and a ShareFetch always fetches."""

    node: int
    member_id: str
    epoch: int
    topics_to_add: tuple[TopicIdPartition, ...]
    forgotten: tuple[TopicIdPartition, ...]
    acks: Acks
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    max_records: int
    batch_size: int


@attrs.frozen
class ShareAcknowledgeIntent:
    """A ShareAcknowledge to send to ``node``: acknowledgements alone, at the session's epoch, or -1 to close it."""

    node: int
    member_id: str
    epoch: int
    acks: Acks
    is_renew_ack: bool = False


@attrs.frozen
class SharePartitionAnswer:
    """One partition of an answer. In a ShareAcknowledge answer, ``error`` is the acknowledgements' outcome."""

    topic_id: str
    partition: int
    error: int = 0
    acknowledge_error: int = 0
    records_bytes: Any = None
    acquired_records: tuple[tuple[int, int, int], ...] = ()  # (first offset, last offset, delivery count)
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch) with NOT_LEADER_OR_FOLLOWER


@attrs.frozen
class ShareFetchAnswer:
    """A ShareFetch (or ShareAcknowledge) response as plain data."""

    error: int = 0
    partitions: tuple[SharePartitionAnswer, ...] = ()
    acquisition_lock_timeout_ms: int = 0  # v1+; 0: not given
    error_message: str | None = None


ShareAcknowledgeAnswer = ShareFetchAnswer


@attrs.define
class _InFlight:
    kind: str  # fetch, ack, close
    generation: int
    batches: list[ShareBatch]
    sent_at: float
    asked: int = 0  # a ShareFetch: the records it asked for
    ahead: bool = False  # a ShareFetch made ahead (the application was not waiting for it)


class ShareFetchManager:
    """Share sessions per leader, what each request carries, and what each answer means."""

    def __init__(
        self,
        *,
        assignment: Callable[[], Iterable[TopicIdPartition]],
        leader_of: Callable[[TopicIdPartition], int | None],
        buffer: ShareBuffer | None = None,
        config: Any = None,
        member_id: str | None = None,
    ) -> None:
        self._assignment = assignment  # what the membership says to fetch (its ``fetching`` attribute decides)
        self._leader_of = leader_of
        self._config = config
        self.buffer = buffer if buffer is not None else ShareBuffer()  # an empty buffer is falsy (len 0)
        self.member_id = member_id
        self.max_wait_ms = int(_setting(config, "fetch_max_wait_ms", 500))
        self.min_bytes = int(_setting(config, "fetch_min_bytes", 1))
        self.max_bytes = int(_setting(config, "fetch_max_bytes", 52_428_800))
        self.max_records = int(_setting(config, "max_poll_records", 500))
        self.batch_size = self.max_records
        # How many records a ShareFetch asks for: max_poll_records times ``scale``, and whether polls fetch ahead:
        # the model of specs/share_fetch_pacing.yaml (its attributes say whether each may happen now). Java asks
        # for one poll's worth when a poll finds nothing, so a member whose application outruns the network waits
        # a round trip per poll; here the scale doubles (up to MAX_SCALE) when a poll right after one that handed
        # records out finds none ready while the last answer gave all it was asked for (the broker had more), and
        # halves when a fetch made ahead answers before the application needed it. A slow application keeps
        # asking for one poll's worth, so records are not held from the members that wait.
        self.scale = 1
        self._last_full = False  # the last ShareFetch answer acquired all it asked for
        self._handed_at: float | None = None  # when the last poll that fetched ahead handed its records out
        self._app_ms: float | None = None  # the application's time from that hand-out to its next poll
        self.pacing = SpecMachine(
            shipped_spec("share_fetch_pacing"), self, config=config, now=0.0, instance=member_id or ""
        )
        self.lock_ms: float | None = None  # the group's lock duration, once an answer said it
        self.sessions: dict[int, ShareSession] = {}
        self._in_flight: dict[int, _InFlight] = {}
        self.fetch_more = False  # Java's fetchMoreRecords: set by the application's poll, cleared by records
        self.ahead = False  # one ShareFetch per node while the application works on what it was handed
        self._ahead_sent: set[int] = set()  # the nodes that sent theirs since fetch_ahead()
        self.metadata_wanted = False
        self.leader_hints: dict[TopicIdPartition, tuple[int, int]] = {}
        self.errors: list[BaseException] = []  # to raise once from the application's next call
        self._closing = False
        self._lost: list[ShareBatch] = []
        self.machine_observer: Any = None  # given to each session's machine (a history's transition lines)
        self.on_session: Callable[[ShareSession], None] | None = None  # each session made (the composition's linker)

    @property
    def adaptive(self) -> bool:
        """False with share_acquire_mode record_limit: one poll's worth at a time, never fetched ahead."""
        return self.pacing.state != "record_limit"

    @adaptive.setter
    def adaptive(self, value: bool) -> None:
        if not value and self.adaptive:
            self.pacing.fire("record_limit_set", self.pacing.now)

    def scale_to_one(self) -> None:
        """share_fetch_pacing's hook: one poll's worth from now on."""
        self.scale = 1

    # -- what the application asks ---------------------------------------------------------------------
    def want_records(self) -> None:
        """The application polled and the buffer has nothing to hand out: fetch (Java's fetch())."""
        self.fetch_more = True

    def poll_started(self, now: float) -> None:
        """The application's poll() begins: how long it worked on what the last poll that fetched ahead handed out
        (ahead_wait_ms reads it)."""
        if self._handed_at is not None:
            self._app_ms, self._handed_at = now - self._handed_at, None

    def ahead_wait_ms(self, configured: float) -> float:
        """share_fetch_pacing's ``ahead_wait``: how long a ShareFetch made ahead may wait at the broker for records
        (its description says why). Half the application's last time between a hand-out and its next poll, at most
        fetch_max_wait_ms; none when that time was at most ``ahead_wait_floor``, or is not known yet."""
        app = self._app_ms
        if app is None or app <= self.pacing.durations["ahead_wait_floor"]:
            return 0.0
        return min(configured, app / 2)

    def fetch_ahead(self, now: float) -> None:
        """The application was handed records and the buffer holds less than another poll's worth: one ShareFetch
        now, carrying the acknowledgements due, so the next poll finds records instead of waiting a round trip.
        Differs from Java on purpose (Java fetches only when a poll finds the buffer empty: a round trip per
        poll); one request, not a loop: a member busy with a slow record fetches once, and what the broker
        releases meanwhile goes to the members that wait."""
        if not self.ahead_allowed:
            return
        self.ahead, self._handed_at = True, now
        # a node with a ShareFetch on its way has its fetch: that answer decides whether another goes at once
        self._ahead_sent = {node for node, f in self._in_flight.items() if f.kind == "fetch"}

    @property
    def ahead_allowed(self) -> bool:
        """share_fetch_pacing's ``fetch_ahead`` attribute: whether a poll that hands records out fetches ahead now
        (never under share_acquire_mode record_limit, nor while paused)."""
        return self.pacing.attribute("fetch_ahead") == "allowed"

    @property
    def fetch_records(self) -> int:
        """The records the next ShareFetch asks for."""
        return self.max_records * self.scale

    def app_waited(self) -> None:
        """A poll right after one that handed records out found none ready: one fetch per round trip is too
        little for this application (if the broker had more to give)."""
        if self.pacing.attribute("scale") == "may_grow" and self._last_full and self.scale < MAX_SCALE:
            self.scale *= 2

    def _wants(self, node: int) -> bool:
        return self.fetch_more or (self.ahead and node not in self._ahead_sent)

    def reopen(self) -> None:
        """subscribe() after the member left: fetch again, in new sessions (the closed ones stay ended)."""
        self._closing = False
        self.sessions = {node: s for node, s in self.sessions.items() if not s.ended}

    @property
    def all_closed(self) -> bool:
        return all(s.ended for s in self.sessions.values())

    def in_flight(self, node: int) -> bool:
        return node in self._in_flight

    def session(self, node: int, now: float = 0.0) -> ShareSession:
        got = self.sessions.get(node)
        if got is None or (got.ended and not self._closing):
            # an ended session when not closing: it ended after reopen() (its closing request was still in flight
            # when the member subscribed again), and an ended one never sends again - a new one takes its place,
            # numbering its sessions on from the old one's
            fresh = ShareSession(node, config=self._config, now=now, on_ended=self._session_ended)
            fresh.machine.observer = self.machine_observer
            if got is not None:
                fresh.generation = got.generation
            if self.on_session is not None:
                self.on_session(fresh)
            got = self.sessions[node] = fresh
        return got

    # -- requests ---------------------------------------------------------------------------------------
    def poll(self, now: float) -> list[ShareFetchIntent | ShareAcknowledgeIntent]:
        """What to send now: at most one request per node, as its session allows."""
        self.tick(now)
        if not self.member_id:
            return []
        wanted = {} if self._closing else self._wanted_by_node()
        queued = {b.node for b in self.buffer.batches() if b.machine.attribute("acks") == "to_send"}
        out = []
        for node in sorted(set(self.sessions) | set(wanted) | queued):
            if node in self._in_flight:
                continue
            intent = self._build(self.session(node, now), wanted.get(node, []), now)
            if intent is not None:
                out.append(intent)
        return out

    def close(self, now: float) -> list[ShareFetchIntent | ShareAcknowledgeIntent]:
        """close() or leaving: every session closes at epoch -1 with the last acknowledgements (a session with a
        request in flight once it is answered, at a later poll); nothing more is fetched."""
        self._closing = True
        self.buffer.take_acks(now)
        for session in self.sessions.values():
            session.close(now)
        return self.poll(now)

    def _wanted_by_node(self) -> dict[int, list[TopicIdPartition]]:
        by_node: dict[int, list[TopicIdPartition]] = {}
        for tp in self._assignment():
            node = self._leader_of(tp)
            if node is None:
                self.metadata_wanted = True  # as Java: no leader known, ask the metadata and skip it
                continue
            by_node.setdefault(node, []).append(tp)
        return by_node

    def _build(
        self, session: ShareSession, wanted: list[TopicIdPartition], now: float
    ) -> ShareFetchIntent | ShareAcknowledgeIntent | None:
        plan = session.plan(wanted)
        if plan is None:
            return None
        node = session.node
        assert self.member_id is not None
        acks = self.buffer.pending_acks(node) if plan.acks_allowed else {}
        intent: ShareFetchIntent | ShareAcknowledgeIntent
        if plan.kind == "close_session":
            intent, kind = ShareAcknowledgeIntent(node, self.member_id, plan.epoch, acks, _has_renew(acks)), "close"
        elif plan.kind == "open_session":
            if self._closing or not (self._wants(node) and wanted):
                return None
            intent, kind = self._fetch(plan, {}), "fetch"
        elif acks and self.buffer.renew_pending(node):
            # a RENEW goes in a ShareAcknowledge: a ShareFetch with IsRenewAck must fetch nothing (KIP-1222)
            intent, kind = ShareAcknowledgeIntent(node, self.member_id, plan.epoch, acks, True), "ack"
        elif self._wants(node) and wanted and not self._closing:
            intent, kind = self._fetch(plan, acks), "fetch"
        elif acks:
            # Differs from Java on purpose: Java keeps acknowledgements for the next ShareFetch, which a member
            # still handing out buffered records does not send, maybe not before the records' lock runs out (the
            # broker then redelivers records already processed); here they go at once, in a ShareAcknowledge.
            intent, kind = ShareAcknowledgeIntent(node, self.member_id, plan.epoch, acks, False), "ack"
        else:
            return None
        if kind != "fetch":
            plan = attrs.evolve(plan, to_add=(), to_forget=())  # a ShareAcknowledge changes no partition
        session.sent(plan, now)
        if kind == "fetch" and self.ahead:
            self._ahead_sent.add(node)
        batches = self.buffer.acks_sent(node, now) if acks else []
        flight = _InFlight(kind, plan.generation, batches, now)
        if isinstance(intent, ShareFetchIntent):
            flight.asked, flight.ahead = intent.max_records, not self.fetch_more
        self._in_flight[node] = flight
        return intent

    def _fetch(self, plan: SessionPlan, acks: Acks) -> ShareFetchIntent:
        assert self.member_id is not None
        return ShareFetchIntent(
            plan.node,
            self.member_id,
            plan.epoch,
            plan.to_add,
            plan.to_forget,
            acks,
            # fetched ahead, nobody waits for it yet: the spec's ahead_wait says how long the broker may hold it
            self.max_wait_ms if self.fetch_more else int(self.pacing.duration_ms("ahead_wait")),
            self.min_bytes,
            self.max_bytes,
            self.fetch_records,
            self.batch_size * self.scale,
        )

    # -- answers ----------------------------------------------------------------------------------------
    def on_fetch_answer(self, node: int, answer: ShareFetchAnswer, sent_at: float, now: float) -> list[ShareBatch]:
        """The answer to the ShareFetch in flight to ``node``, sent at ``sent_at`` (the locks count from then).
        Returns the batches lost by it (a session error ends the session)."""
        return self._answered(node, answer, sent_at, now, "fetch")

    def on_acknowledge_answer(
        self, node: int, answer: ShareAcknowledgeAnswer, sent_at: float, now: float
    ) -> list[ShareBatch]:
        """The answer to the ShareAcknowledge in flight to ``node`` (the closing one too)."""
        return self._answered(node, answer, sent_at, now, "ack")

    def on_failure(self, node: int, why: str, now: float) -> list[ShareBatch]:
        """The request in flight to ``node`` got no answer (connection lost, timed out). Returns the lost batches."""
        return self.on_ended(node, why, now)

    def on_ended(self, node: int, why: str, now: float) -> list[ShareBatch]:
        """The session with ``node`` ended outside an answer (its connection went): every batch acquired under it is
        lost, and returned (their acknowledgements are reported failed)."""
        self._in_flight.pop(node, None)  # its request fails with the connection: no answer will come
        session = self.sessions.get(node)
        if session is not None:
            session.on_disconnect(why, now)
        return self._take_lost()

    def _answered(
        self, node: int, answer: ShareFetchAnswer, sent_at: float, now: float, asked: str
    ) -> list[ShareBatch]:
        flight = self._in_flight.get(node)
        if flight is None or (flight.kind == "fetch") != (asked == "fetch"):
            log.debug("share answer from node %d matches no request in flight; dropped", node)
            return []
        del self._in_flight[node]
        session = self.sessions[node]
        if answer.error:
            self._top_level_error(answer)
            if session.on_answer(answer.error, now) == "refused":
                self.buffer.acks_not_processed(flight.batches, f"top-level error {answer.error}", now)
            return self._take_lost()
        lock_ms = float(answer.acquisition_lock_timeout_ms) or None
        if lock_ms:
            self.lock_ms = lock_ms
        by_tp = {TopicIdPartition(p.topic_id, p.partition): p for p in answer.partitions}
        if flight.kind == "fetch":
            # piggybacked acknowledgements: the outcome is reported, not retried (as Java's fetch path)
            errors = {tp: p.acknowledge_error for tp, p in by_tp.items()}
            self.buffer.acks_answered(flight.batches, errors, now, lock_ms=lock_ms)
        else:
            errors = {tp: p.error for tp, p in by_tp.items()}
            retry = _retriable if flight.kind == "ack" else (lambda code: False)
            self.buffer.acks_answered(flight.batches, errors, now, retry=retry, lock_ms=lock_ms)
        if flight.kind == "fetch":
            # close() or leaving was asked while it was in flight (in_flight_then_close): the closing request goes
            # next and the broker releases what this answer acquired - buffered, it could be handed out (poll()
            # after unsubscribe() and subscribe()) under a lock the broker gives up at once
            keep = session.state != "in_flight_then_close"
            self._take_records(node, flight, by_tp, sent_at, now, keep=keep)
        session.on_answer(0, now)
        return self._take_lost()

    def _take_records(
        self,
        node: int,
        flight: _InFlight,
        by_tp: Mapping[TopicIdPartition, SharePartitionAnswer],
        sent_at: float,
        now: float,
        *,
        keep: bool = True,
    ) -> None:
        acquired = sum(last - first + 1 for p in by_tp.values() for first, last, _ in p.acquired_records)
        self._last_full = acquired >= flight.asked
        self.pacing.fire(("ahead_" if flight.ahead else "waited_") + ("filled" if acquired else "empty"), now)
        if flight.ahead and acquired and self.buffer.ready_records() >= self.max_records:
            self.scale = max(1, self.scale // 2)  # fetched ahead of need: the application is not that fast
        for tp, p in by_tp.items():
            if p.error:
                self._partition_error(tp, p)
            if p.acquired_records and keep:
                self.buffer.add(
                    node,
                    flight.generation,
                    tp,
                    p.acquired_records,
                    p.records_bytes,
                    sent_at=sent_at,
                    now=now,
                    lock_ms=self.lock_ms,
                )
                # No fetch goes ahead from here: the application's next poll sends it with the acknowledgements of
                # what it was handed before (sent now, it found those records still held: 10 of 34 answers of one
                # member's drain came back empty so)
                self.fetch_more = False  # as Java: records came, fetch again when the application asks

    def _partition_error(self, tp: TopicIdPartition, p: SharePartitionAnswer) -> None:
        if p.error in (_NOT_LEADER_OR_FOLLOWER, _FENCED_LEADER_EPOCH):
            if p.current_leader is not None and p.current_leader[0] >= 0 and p.current_leader[1] >= 0:
                self.leader_hints[tp] = p.current_leader
            self.metadata_wanted = True
        elif classify(p.error) is Action.REFRESH_METADATA:
            self.metadata_wanted = True
        elif classify(p.error) is Action.FATAL:
            self._hold(public_error(p.error, f"ShareFetch of {tp.topic_id}-{tp.partition}"))

    def _top_level_error(self, answer: ShareFetchAnswer) -> None:
        code = answer.error
        if code == _UNSUPPORTED_VERSION:
            self._hold(
                ke.UnsupportedVersionError(
                    NO_SHARE_GROUPS + (f" ({answer.error_message})" if answer.error_message else "")
                )
            )
        elif code == _UNKNOWN_TOPIC_ID:
            self.metadata_wanted = True  # as Java
        elif code == _GROUP_AUTHORIZATION_FAILED:
            self._hold(public_error(code, "ShareFetch"))

    def _hold(self, error: BaseException) -> None:
        """Keep an error for the application; the same one again (an opening refused after every backoff) once."""
        if not self.errors or (type(self.errors[-1]), str(self.errors[-1])) != (type(error), str(error)):
            self.errors.append(error)

    # -- the rest -----------------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        for session in self.sessions.values():
            session.tick(now)
        self.buffer.tick(now)

    def _session_ended(self, node: int, generation: int, why: str, now: float) -> None:
        self._lost.extend(self.buffer.lose(node, generation, why, now))

    def _take_lost(self) -> list[ShareBatch]:
        lost, self._lost = self._lost, []
        return lost


def _has_renew(acks: Acks) -> bool:
    return any(AckType.RENEW in b.acknowledge_types for batches in acks.values() for b in batches)


def _retriable(code: int) -> bool:
    """A partition's error in a ShareAcknowledge answer worth sending again (as Java's AcknowledgeRequestState): a
    retriable one, but not a leader change (the locks were released with the old leader)."""
    if code in (_NOT_LEADER_OR_FOLLOWER, _FENCED_LEADER_EPOCH):
        return False
    return bool(getattr(ke.for_code(code), "retriable", False))
