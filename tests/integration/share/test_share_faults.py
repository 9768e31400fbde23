"""ShareConsumer under injected faults, on Apache Kafka 4.2: what a member still guarantees when a share
session breaks (a session error, a refused request, a lost connection), when an acknowledgement or a renewal
is refused, when it is fenced or stops polling, and when it leaves with a leader that does not answer.

Faults go through a FaultyTransport around the consumer's own (``_Faults`` below adds what these tests need,
each decided on the consumer's network thread so that it hits the request meant, never a neighbour):
- ``rewrite``: a request changed before it goes, so that the broker itself refuses it without processing it
  (a skewed session epoch: INVALID_SHARE_SESSION_EPOCH; a member id it does not know: SHARE_SESSION_NOT_FOUND);
- ``misroute``: a ShareAcknowledge's partitions renamed to ones the topic lacks, and the answer's named back -
  the broker refuses those acknowledgements for real (UNKNOWN_TOPIC_OR_PARTITION, retriable), processing none;
- ``fail`` / ``fail_when``: an error code patched into a real answer (FaultyTransport's ``fail``), only where the
  broker acquired records and applied no acknowledgement (an opening ShareFetch, a ShareFetch without
  acknowledgements, a closing request carrying none): a patched answer to acknowledgements the broker DID apply
  would report failed what took effect, which no test here relies on;
- ``cut_after_send``: the connection closed right after a request is queued on it, before any byte of it is
  written (the broker never sees it, and ends the member's share session with the connection);
- ``cut_when`` / ``cut_soon``: the connection closed as the network thread next polls.

Each test uses a fresh group (``share.auto.offset.reset`` earliest, a lock as short as it needs) and asserts what
the application relies on: every record accepted exactly once in the end (acceptances the broker confirmed, via
the acknowledgement commit callback), acknowledgements lost with a session reported failed (never as done) and
their records delivered again with a higher delivery count, a fenced or stale member consuming again, close()
within its timeout. ``fired`` checks that the fault took the path meant.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import pytest

from fsm_consumer.errors import AcknowledgementFailedError
from fsm_consumer.machines._log import TransitionRecord, add_observer, remove_observer
from fsm_consumer.share import AcknowledgeType, ShareConsumer, ShareRecord, share_config
from fsm_consumer.share._admin import ShareGroupAdmin, set_group_config
from fsm_consumer.transport import FaultyTransport, KafkaTransport
from fsm_consumer.transport._faulty import _Rule

LEADER = 1  # KafkaBroker's node id: the leader of every partition
COORDINATOR = 2**31 - 1 - LEADER  # the coordinator connection's synthetic node id (managers/_coordinator.py)
_SHIFT = 1000  # what misroute adds to a partition index: a partition no test topic has
_FOREIGN_MEMBER = "AAAAAAAAAAAAAAAAAAAAAA"  # a well-formed member id (a Kafka Uuid) no share session belongs to

pytestmark = pytest.mark.brokers("kafka")


# -- the fault injector -------------------------------------------------------------------------------------
def _api(request: Any) -> str:
    return type(request).name.removesuffix("Request")


@attrs.define
class _When(_Rule):
    """A FaultyTransport rule for the answers to requests ``when(request)`` says yes to (decided on the
    network thread as the answer arrives)."""

    when: Callable[[Any], bool] = lambda request: True

    def matches(self, pending: Any) -> bool:
        return super().matches(pending) and self.when(pending.request)


@attrs.define
class _OnSend:
    """A rule applied to a request as it is sent: ``apis`` names joined by '|'."""

    apis: str
    when: Callable[[Any], bool]
    times: int = 1
    change: Callable[[Any], None] | None = None

    def take(self, request: Any) -> bool:
        if self.times > 0 and _api(request) in self.apis.split("|") and self.when(request):
            self.times -= 1
            return True
        return False


class _Faults(FaultyTransport):
    """FaultyTransport plus faults decided per request on the network thread; ``sent`` logs every request
    (monotonic time, api, node, request as sent), ``hidden`` the answers a patched error hid from the member,
    ``misrouted`` the answers whose partitions were renamed back, ``acquired`` the offsets each ShareFetch answer
    acquired (as the broker sent it), ``patched`` each (request, answer) an error code was patched into."""

    def __init__(self, inner: KafkaTransport) -> None:
        super().__init__(inner)
        self._rewrites: list[_OnSend] = []
        self._misroutes: list[_OnSend] = []
        self._cuts: list[_OnSend] = []
        self._cut_when: list[tuple[int, Callable[[], bool]]] = []
        self._shifted: set[Any] = set()
        self.sent: list[tuple[float, str, int | None, Any]] = []
        self.patched: list[tuple[Any, Any]] = []
        self.misrouted: list[Any] = []
        self.acquired: list[set[int]] = []

    # -- switches (any thread) --
    def fail_when(self, api: str, code: int, when: Callable[[Any], bool], node: int | None = None) -> None:
        self._fail_rules.append(_When(api, 1, node, error_code=code, when=when))

    def delay_when(self, api: str, ms: float, when: Callable[[Any], bool]) -> None:
        self._delay_rules.append(_When(api, 1, None, delay_ms=float(ms), when=when))

    def rewrite(self, apis: str, change: Callable[[Any], None], when: Callable[[Any], bool]) -> None:
        self._rewrites.append(_OnSend(apis, when, change=change))

    def misroute(self, when: Callable[[Any], bool]) -> None:
        self._misroutes.append(_OnSend("ShareAcknowledge", when))

    def cut_after_send(self, apis: str, when: Callable[[Any], bool]) -> None:
        """Close the connection of the next such request right after it is queued on a ready connection: it is
        never written, and the broker ends the share session of that connection."""
        self._cuts.append(_OnSend(apis, when))

    def cut_when(self, node: int, when: Callable[[], bool]) -> None:
        self._cut_when.append((node, when))
        self.wakeup()

    def cut_soon(self, node: int) -> None:
        self.cut_when(node, lambda: True)

    def spent(self) -> bool:
        """Every one-shot fault switched on so far has fired."""
        rules = [*self._fail_rules, *self._delay_rules, *self._rewrites, *self._misroutes, *self._cuts]
        return all(r.times <= 0 for r in rules) and not self._cut_when

    def requests(self, api: str) -> list[Any]:
        return [request for _, name, _, request in self.sent if name == api]

    @property
    def hidden(self) -> list[Any]:
        """The answers a patched error code hid from the member."""
        return [answer for _, answer in self.patched]

    def held(self) -> set[int]:
        """Every offset a ShareFetch answer acquired so far."""
        return set().union(*self.acquired)

    # -- the network thread --
    def send(self, request: Any, node: int | None = None, **kw: Any) -> Any:
        for rule in self._rewrites:
            if rule.take(request):
                assert rule.change is not None
                rule.change(request)
                break
        shifted = any(rule.take(request) for rule in self._misroutes)
        if shifted:
            for topic in request.topics:
                for partition in topic.partitions:
                    partition.partition_index += _SHIFT
        self.sent.append((time.monotonic(), _api(request), node, request))
        pending = super().send(request, node, **kw)
        if shifted:
            self._shifted.add(pending)
        if node is not None and self.inner.ready(node) and any(rule.take(request) for rule in self._cuts):
            self.cut(node)  # nothing is written before the next poll: the request never reaches the broker
        return pending

    def poll(self, timeout_ms: float) -> list[Any]:
        for entry in list(self._cut_when):
            node, when = entry
            if when():
                self._cut_when.remove(entry)
                self.cut(node)
        ready = super().poll(timeout_ms)
        for pending in ready:
            if _api(pending.request) == "ShareFetch" and pending.response is not None:
                self.acquired.append(_acquired([pending.response]))
            if pending in self._shifted:
                self._shifted.discard(pending)
                if pending.response is not None:
                    for topic in pending.response.responses:
                        for partition in topic.partitions:
                            partition.partition_index -= _SHIFT
                    self.misrouted.append(pending.response)
        return ready

    def _apply_fail(self, pending: Any) -> None:
        before = self.injected["fail"]
        super()._apply_fail(pending)
        if self.injected["fail"] != before:
            self.patched.append((pending.request, pending.response))


def _acquired(responses: Iterable[Any]) -> set[int]:
    """The offsets these ShareFetch answers acquired (each topic here has one partition)."""
    return {
        offset
        for response in responses
        for topic in response.responses
        for partition in topic.partitions
        for a in partition.acquired_records
        for offset in range(a.first_offset, a.last_offset + 1)
    }


def _has_acks(request: Any) -> bool:
    return any(p.acknowledgement_batches for t in request.topics for p in t.partitions)


def _in_session(request: Any) -> bool:
    return request.share_session_epoch > 0


# -- the group, the consumer, what it reports ----------------------------------------------------------------
def _group(broker, lock_ms: int | None = None) -> str:
    group = f"share-{uuid.uuid4().hex[:10]}"
    settings = {"share.auto.offset.reset": "earliest"}
    if lock_ms is not None:
        settings["share.record.lock.duration.ms"] = str(lock_ms)
    set_group_config(broker.bootstrap_servers, group, settings)
    return group


class _Outcomes:
    """The acknowledgement commit callback: offsets whose acceptance the broker confirmed (a list: an offset
    confirmed twice would show twice), and each failure reported."""

    def __init__(self) -> None:
        self.accepted: list[int] = []
        self.failed: list[tuple[set[int], BaseException]] = []

    def __call__(self, offsets: dict, error: BaseException | None) -> None:
        for done in offsets.values():
            if error is None:
                self.accepted.extend(sorted(done))
            else:
                self.failed.append((set(done), error))


def _faulty(broker, group: str, topic: str, **config: Any) -> tuple[ShareConsumer, _Faults, _Outcomes]:
    settings = {"bootstrap_servers": broker.bootstrap_servers, "group_id": group, **config}
    faults = _Faults(KafkaTransport(share_config(**settings)[0]))
    consumer = ShareConsumer(topic, transport=faults, **settings)
    outcomes = _Outcomes()
    consumer.set_acknowledgement_commit_callback(outcomes)
    return consumer, faults, outcomes


def _poll_until(consumer: ShareConsumer, want: int, timeout_s: float = 20.0) -> list[ShareRecord]:
    got: list[ShareRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=200)
        got.extend(batch)
    return got


def _until_accepted(
    consumer: ShareConsumer, outcomes: _Outcomes, offsets: Iterable[int], timeout_s: float = 20.0, explicit=False
) -> list[ShareRecord]:
    """Poll (accepting what is handed out) until the broker confirmed every offset of ``offsets``; what was
    handed out meanwhile."""
    want = set(offsets)
    handed: list[ShareRecord] = []
    deadline = time.monotonic() + timeout_s
    while not want <= set(outcomes.accepted) and time.monotonic() < deadline:
        got = consumer.poll(timeout_ms=200)
        handed.extend(got)
        if explicit:
            for r in got:
                consumer.acknowledge(r)
        if got:
            consumer.commit_sync(timeout_ms=10_000)  # at once: a poll() with nothing to hand out long-polls
    return handed


def _wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def _session_state(consumer: ShareConsumer) -> str | None:
    """The state of the member's share session with the leader (read without the share lock: the fault rules
    ask it on the network thread too)."""
    session = consumer._parts.fetch.sessions.get(LEADER)
    return None if session is None else session.state


def _members(broker, group: str) -> list[str]:
    with ShareGroupAdmin(broker.bootstrap_servers, timeout_ms=10_000) as admin:
        return [m.member_id for m in admin.describe_group(group).members]


@pytest.fixture
def fired() -> Iterable[list[TransitionRecord]]:
    """Every transition any machine fires during the test."""
    seen: list[TransitionRecord] = []
    add_observer(seen.append)
    try:
        yield seen
    finally:
        remove_observer(seen.append)


def _ahead_answered(fired: list[TransitionRecord], timeout_s: float = 5.0) -> None:
    """Wait for the answer to the fetch the last hand-out sent ahead (empty: nothing more was produced), so the
    acknowledgements made next go alone, in a ShareAcknowledge, rather than with that fetch."""
    deadline = time.monotonic() + timeout_s
    while not _did(fired, "share_fetch_pacing", "fetching_ahead", "ahead_empty"):
        assert time.monotonic() < deadline, "the fetch made ahead was never answered"
        time.sleep(0.01)


def _did(fired: list[TransitionRecord], machine: str, source: str, trigger: str, dest: str | None = None) -> bool:
    return any(
        r.machine == machine and r.source == source and r.trigger == trigger and dest in (None, r.dest) for r in fired
    )


def _path(fired: list[TransitionRecord], machine: str) -> list[tuple[str, str, str]]:
    return [(r.source, r.trigger, r.dest) for r in fired if r.machine == machine]


# -- share sessions ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "change"),
    [
        ("INVALID_SHARE_SESSION_EPOCH", lambda r: setattr(r, "share_session_epoch", r.share_session_epoch + 5)),
        ("SHARE_SESSION_NOT_FOUND", lambda r: setattr(r, "member_id", _FOREIGN_MEMBER)),
    ],
    ids=["INVALID_SHARE_SESSION_EPOCH", "SHARE_SESSION_NOT_FOUND"],
)
def test_a_session_the_broker_refuses_fails_its_acknowledgements_and_its_records_come_back(
    broker, make_topic, produce, fired, error, change
):
    """The broker refuses a request of the session (for real: its epoch skewed, or a member id it has no session
    for), processing none of the acknowledgements it carried: they are reported failed, never done, and the
    records come back, one delivery count higher, once their lock runs out (the broker keeps them for the session
    it lost track of); the member opens a new session at once and every record ends accepted exactly once."""
    topic = make_topic()
    produce(topic, 3)
    consumer, faults, outcomes = _faulty(broker, _group(broker, lock_ms=2000), topic)
    with consumer:
        first = _poll_until(consumer, 3)
        assert sorted(r.offset for r in first) == [0, 1, 2]
        produce(topic, 3)
        # the next request in the session carries the acceptance of 0..2 (with a ShareFetch, or alone)
        faults.rewrite("ShareFetch|ShareAcknowledge", change, when=lambda r: _in_session(r) and _has_acks(r))
        handed = _until_accepted(consumer, outcomes, range(6))
    assert faults.spent()
    assert _did(fired, "share_session", "in_flight", "session_error", "closed"), _path(fired, "share_session")
    carried = [(o, f) for o, f in outcomes.failed if o & {0, 1, 2}]
    assert len(carried) == 1, outcomes.failed
    offsets, failure = carried[0]
    assert offsets == {0, 1, 2} and isinstance(failure, AcknowledgementFailedError) and error in str(failure)
    # records fetched ahead in the same session (3..5, acquired while 0..2 were handed out) are lost with it:
    # their acknowledgements fail the same way, never reported done, and they come back too
    for other, why in outcomes.failed:
        if other & {0, 1, 2}:
            continue
        assert other <= {3, 4, 5} and isinstance(why, AcknowledgementFailedError) and error in str(why), other
    assert sorted((r.offset, r.delivery_count) for r in handed if r.offset < 3) == [(0, 2), (1, 2), (2, 2)]
    assert sorted(outcomes.accepted) == list(range(6)), "every record accepted exactly once"


@pytest.mark.parametrize(("code", "trigger"), [(133, "session_error"), (100, "refused")])
def test_an_opening_the_broker_refuses_is_tried_again_after_a_backoff(
    broker, make_topic, produce, fired, code, trigger
):
    """SHARE_SESSION_LIMIT_REACHED (133) or another top-level error (UNKNOWN_TOPIC_ID, 100) to the ShareFetch that
    opens the session: no session is open, the next opening waits out retry_backoff_ms, and what the refused
    answer acquired (the member never saw it) comes back with a higher delivery count once its lock runs out;
    every record is accepted exactly once."""
    topic = make_topic()
    produce(topic, 4)
    consumer, faults, outcomes = _faulty(
        broker, _group(broker, lock_ms=1000), topic, retry_backoff_ms=1000, retry_backoff_max_ms=1000
    )
    faults.fail_when("ShareFetch", code, when=lambda r: r.share_session_epoch == 0, node=LEADER)
    with consumer:
        handed = _until_accepted(consumer, outcomes, range(4))
    assert faults.spent() and outcomes.failed == []
    assert _did(fired, "share_session", "opening", trigger, "backoff"), _path(fired, "share_session")
    assert _did(fired, "share_session", "backoff", "backoff_elapsed", "closed")
    openings = [at for at, api, _, r in faults.sent if api == "ShareFetch" and r.share_session_epoch == 0]
    assert len(openings) >= 2 and openings[1] - openings[0] >= 0.75, "the next opening waited out the backoff"
    hidden = _acquired(faults.hidden)
    assert sorted(outcomes.accepted) == [0, 1, 2, 3], "every record accepted exactly once"
    assert all(r.delivery_count == (2 if r.offset in hidden else 1) for r in handed), [
        (r.offset, r.delivery_count, r.offset in hidden) for r in handed
    ]


def test_a_fetch_refused_in_its_session_keeps_the_session(broker, make_topic, produce, fired):
    """A top-level error (UNKNOWN_TOPIC_ID) to a ShareFetch of an open session: the session goes on (its epoch
    moves on, as Java's), and what that answer acquired comes back with a higher delivery count after its lock."""
    topic = make_topic()
    produce(topic, 3)
    consumer, faults, outcomes = _faulty(
        broker, _group(broker, lock_ms=1000), topic, share_acknowledgement_mode="explicit"
    )
    with consumer:
        first = _poll_until(consumer, 3)
        for r in first:
            consumer.acknowledge(r)
        assert all(e is None for e in consumer.commit_sync(timeout_ms=10_000).values())
        produce(topic, 3)
        faults.fail_when("ShareFetch", 100, when=lambda r: _in_session(r) and not _has_acks(r))
        handed = _until_accepted(consumer, outcomes, range(6), explicit=True)
        assert consumer._parts.fetch.sessions[LEADER].generation == 1, "the session was kept"
    assert faults.spent()
    assert _did(fired, "share_session", "in_flight", "refused", "open"), _path(fired, "share_session")
    hidden = _acquired(faults.hidden)
    assert hidden, "the refused answer acquired records"
    assert all(r.delivery_count == (2 if r.offset in hidden else 1) for r in handed), (
        hidden,
        [(r.offset, r.delivery_count) for r in handed],
    )
    assert sorted(outcomes.accepted) == list(range(6)) and outcomes.failed == []


def test_acknowledgements_refused_with_a_retriable_error_go_again(broker, make_topic, produce, fired):
    """The broker refuses a ShareAcknowledge's partition with a retriable error (UNKNOWN_TOPIC_OR_PARTITION,
    processing none of it): the acknowledgements go again in the same session, and commit_sync() reports the
    outcome of the retry - done; the records are never delivered again."""
    topic = make_topic()
    produce(topic, 5)
    consumer, faults, outcomes = _faulty(broker, _group(broker), topic, share_acknowledgement_mode="explicit")
    with consumer:
        got = _poll_until(consumer, 5)
        _ahead_answered(fired)
        for r in got:
            consumer.acknowledge(r)
        faults.misroute(when=_in_session)
        results = consumer.commit_sync(timeout_ms=10_000)
        assert list(results.values()) == [None], results
        assert _poll_until(consumer, 1, timeout_s=2) == []
    assert faults.spent()
    assert [p.error_code for r in faults.misrouted for t in r.responses for p in t.partitions] == [3]
    acks = faults.requests("ShareAcknowledge")
    assert len([r for r in acks if _in_session(r) and _has_acks(r)]) == 2, "sent again once"
    assert _did(fired, "share_batch", "ack_in_flight", "ack_retry", "ack_queued")
    assert sorted(outcomes.accepted) == [0, 1, 2, 3, 4] and outcomes.failed == []


def test_acknowledgements_answered_after_the_lock_ran_out_are_what_the_broker_says(broker, make_topic, produce, fired):
    """Sent well within a 1 s lock, their answer held back 1.5 s: the lock runs out with them in flight
    (ack_in_flight_late), and the broker's answer decides - it applied them, so they are done (as Java reports
    them), never reported failed; the records are never delivered again."""
    topic = make_topic()
    produce(topic, 5)
    consumer, faults, outcomes = _faulty(
        broker, _group(broker, lock_ms=1000), topic, share_acknowledgement_mode="explicit"
    )
    with consumer:
        got = _poll_until(consumer, 5)
        _ahead_answered(fired)
        for r in got:
            consumer.acknowledge(r)
        faults.delay_when("ShareAcknowledge", 1500, when=_has_acks)
        results = consumer.commit_sync(timeout_ms=10_000)
        assert list(results.values()) == [None], results
        assert _poll_until(consumer, 1, timeout_s=2) == []
    assert faults.spent()
    assert _did(fired, "share_batch", "ack_in_flight", "lock_expired", "ack_in_flight_late")
    assert _did(fired, "share_batch", "ack_in_flight_late", "ack_answered", "settled")
    assert sorted(outcomes.accepted) == [0, 1, 2, 3, 4] and outcomes.failed == []


def test_acknowledgements_not_processed_before_the_lock_ran_out_fail_and_their_records_come_back(
    broker, make_topic, produce, fired
):
    """Refused with a retriable error (UNKNOWN_TOPIC_OR_PARTITION: nothing processed) in an answer read after the
    1 s lock ran out: they may not go again (the broker would refuse them) - reported failed, and the records
    come back with delivery count 2, then accepted."""
    topic = make_topic()
    produce(topic, 5)
    consumer, faults, outcomes = _faulty(
        broker, _group(broker, lock_ms=1000), topic, share_acknowledgement_mode="explicit"
    )
    with consumer:
        got = _poll_until(consumer, 5)
        _ahead_answered(fired)
        for r in got:
            consumer.acknowledge(r)
        faults.misroute(when=_in_session)
        faults.delay_when("ShareAcknowledge", 1500, when=_in_session)
        results = consumer.commit_sync(timeout_ms=10_000)
        assert [type(e).__name__ for e in results.values()] == ["AcknowledgementFailedError"], results
        again = _until_accepted(consumer, outcomes, range(5), explicit=True)
    assert faults.spent()
    assert _did(fired, "share_batch", "ack_in_flight_late", "ack_retry", "lost")
    assert sorted((r.offset, r.delivery_count) for r in again) == [(o, 2) for o in range(5)]
    assert sorted(outcomes.accepted) == [0, 1, 2, 3, 4] and [sorted(f) for f, _ in outcomes.failed] == [[0, 1, 2, 3, 4]]


def test_a_refused_renewal_loses_the_batch_and_its_records_come_back(broker, make_topic, produce, fired):
    """A RENEW the broker refuses (for real: UNKNOWN_TOPIC_OR_PARTITION, nothing renewed): commit_sync() reports
    the batch failed, its records are not handed out again under the old lock, and they come back with a higher
    delivery count once that lock runs out; accepted then, they stay accepted."""
    topic = make_topic()
    produce(topic, 2)
    consumer, faults, outcomes = _faulty(
        broker, _group(broker, lock_ms=1500), topic, share_acknowledgement_mode="explicit"
    )
    with consumer:
        got = _poll_until(consumer, 2)
        first_lock = max(r.lock_deadline for r in got)
        consumer.acknowledge(got[0], AcknowledgeType.RENEW)
        consumer.acknowledge(got[1], AcknowledgeType.ACCEPT)
        faults.misroute(when=lambda r: r.is_renew_ack)
        results = consumer.commit_sync(timeout_ms=10_000)
        assert [type(e) for e in results.values()] == [AcknowledgementFailedError], results
        again: list[ShareRecord] = []
        while len(again) < 2 and time.monotonic() < first_lock + 10:
            got = consumer.poll(timeout_ms=100)
            assert not got or time.monotonic() >= first_lock, "handed out again under the lock it failed to renew"
            again.extend(got)
        assert sorted((r.offset, r.delivery_count) for r in again) == [(0, 2), (1, 2)]
        for r in again:
            consumer.acknowledge(r)
        assert list(consumer.commit_sync(timeout_ms=10_000).values()) == [None]
    assert faults.spent()
    assert _did(fired, "share_batch", "renewing", "renew_failed", "lost")
    assert sorted(outcomes.accepted) == [0, 1]


@pytest.mark.parametrize("where", ["in_flight", "opening"])
def test_a_lost_connection_fails_the_acknowledgements_it_carried_and_releases_at_once(
    broker, make_topic, produce, fired, where
):
    """The leader's connection is lost with a request of the session queued on it (never written): the
    session ended with it, so its acknowledgements are reported failed in commit_sync()'s result (never None)
    and every record it held comes back at once (the broker releases a session's records with its connection,
    long before their 20 s lock), one delivery count higher; all end accepted exactly once.

    ``opening``: the opening ShareFetch is the one lost (after a first opening answered SHARE_SESSION_NOT_FOUND,
    whose records the broker holds for the member until that connection goes)."""
    topic = make_topic()
    produce(topic, 6)
    consumer, faults, outcomes = _faulty(broker, _group(broker, lock_ms=20_000), topic, max_poll_records=3)
    with consumer:
        if where == "opening":
            faults.fail("ShareFetch", 122, node=LEADER)
            faults.cut_after_send("ShareFetch", when=lambda r: r.share_session_epoch == 0 and bool(faults.hidden))
            started = time.monotonic()
            handed = _until_accepted(consumer, outcomes, range(6), timeout_s=10)
            assert time.monotonic() - started < 8, "released by the connection, not by the lock"
            assert _did(fired, "share_session", "opening", "disconnected", "closed"), _path(fired, "share_session")
            hidden = _acquired(faults.hidden)
            assert hidden and all(r.delivery_count == (2 if r.offset in hidden else 1) for r in handed)
        else:
            first = _poll_until(consumer, 3)
            assert [r.delivery_count for r in first] == [1, 1, 1]
            held = faults.held()  # acquired under the session about to end: 0..2 handed out, the rest buffered
            faults.cut_after_send("ShareFetch|ShareAcknowledge", when=lambda r: _in_session(r) and _has_acks(r))
            results = consumer.commit_sync(timeout_ms=10_000)
            assert [type(e) for e in results.values()] == [AcknowledgementFailedError], results
            assert _did(fired, "share_session", "in_flight", "disconnected", "closed"), _path(fired, "share_session")
            started = time.monotonic()
            handed = _until_accepted(consumer, outcomes, range(6), timeout_s=10)
            assert time.monotonic() - started < 5, "released by the connection, not by the lock"
            assert sorted(r.offset for r in handed) == list(range(6))
            assert all(r.delivery_count == (2 if r.offset in held else 1) for r in handed)
            assert [(offsets, type(e)) for offsets, e in outcomes.failed] == [({0, 1, 2}, AcknowledgementFailedError)]
    assert faults.spent()
    assert sorted(outcomes.accepted) == list(range(6)), "every record accepted exactly once"


def test_a_connection_lost_while_idle_ends_the_session_before_its_records_are_handed_out(
    broker, make_topic, produce, fired
):
    """The leader's connection goes while nothing is in flight (the member busy with what it holds): the broker
    ended the session and released its records, maybe to another member already. The member must see it before
    its next request: no record buffered under that session is handed out (at delivery count 1, under a lock that
    is no longer its), the acknowledgements of what it held are reported failed, and everything comes back at
    once one delivery count higher."""
    topic = make_topic()
    produce(topic, 6)
    consumer, faults, outcomes = _faulty(
        broker, _group(broker, lock_ms=20_000), topic, max_poll_records=3, share_acknowledgement_mode="explicit"
    )
    with consumer:
        first = _poll_until(consumer, 3)
        assert [(r.offset, r.delivery_count) for r in first] == [(0, 1), (1, 1), (2, 1)]
        _wait_until(lambda: _session_state(consumer) == "open", 5, "nothing in flight")
        held = faults.held()  # acquired under the session about to end: 0..2 handed out, the rest buffered
        assert held > {0, 1, 2}, "records buffered, not handed out yet"
        faults.cut_soon(LEADER)
        _wait_until(
            lambda: _did(fired, "share_session", "open", "disconnected", "closed"),
            5,
            "the member to see its session end with the connection",
        )
        for r in first:
            consumer.acknowledge(r)  # of a lost batch: reported failed at once, never sent
        results = consumer.commit_sync(timeout_ms=10_000)
        assert [type(e) for e in results.values()] == [AcknowledgementFailedError], results
        started = time.monotonic()
        handed = _until_accepted(consumer, outcomes, range(6), timeout_s=10, explicit=True)
        assert time.monotonic() - started < 5, "released by the connection, not by the lock"
    assert faults.spent()
    assert sorted(r.offset for r in handed) == list(range(6))
    assert all(r.delivery_count == (2 if r.offset in held else 1) for r in handed), "none of the lost session"
    assert set().union(*(offsets for offsets, _ in outcomes.failed)) == {0, 1, 2}, outcomes.failed
    assert all(isinstance(e, AcknowledgementFailedError) for _, e in outcomes.failed)
    assert sorted(outcomes.accepted) == list(range(6))


# -- closing share sessions -------------------------------------------------------------------------------------
def _long_poll_in_flight(consumer: ShareConsumer) -> None:
    """Every record accepted; a ShareFetch waits on the broker (fetch_max_wait_ms, nothing to fetch)."""
    assert consumer.poll(timeout_ms=100) == []
    _wait_until(lambda: _session_state(consumer) == "in_flight", 5, "a ShareFetch in flight")


@pytest.mark.parametrize(
    ("fault", "dest"), [("refused", "close_due"), ("session_error", "ended"), ("disconnected", "ended")]
)
def test_close_with_a_fetch_in_flight_completes_whatever_its_answer(broker, make_topic, produce, fired, fault, dest):
    """close() while a ShareFetch waits on the broker: its answer comes first, then the session closes. Refused
    (UNKNOWN_TOPIC_ID), answered SHARE_SESSION_NOT_FOUND, or its connection lost: close() still completes well
    within its timeout and the member leaves the group."""
    topic = make_topic()
    produce(topic, 2)
    group = _group(broker)
    consumer, faults, outcomes = _faulty(broker, group, topic, fetch_max_wait_ms=3000)
    closing = lambda *_: _session_state(consumer) == "in_flight_then_close"  # noqa: E731
    try:
        _until_accepted(consumer, outcomes, range(2))
        _long_poll_in_flight(consumer)
        if fault == "disconnected":
            faults.cut_when(LEADER, closing)
        else:
            faults.fail_when("ShareFetch", 100 if fault == "refused" else 122, when=closing, node=LEADER)
        started = time.monotonic()
        consumer.close(timeout_ms=8000)
        took = time.monotonic() - started
    finally:
        consumer.close(timeout_ms=1000)
    assert faults.spent()
    assert _did(fired, "share_session", "in_flight_then_close", fault, dest), _path(fired, "share_session")
    assert took < 4.5, f"close() took {took:.1f} s"
    assert consumer.metrics_flat()["share-sessions"] == {LEADER: "ended"}
    assert _members(broker, group) == [], "the member left the group"
    assert sorted(outcomes.accepted) == [0, 1]


@pytest.mark.parametrize(("fault", "trigger"), [(100, "refused"), (122, "session_error"), (None, "disconnected")])
def test_close_releases_what_it_holds_whatever_becomes_of_its_closing_request(
    broker, make_topic, produce, fired, fault, trigger
):
    """close() with records acquired and not acknowledged: the closing ShareAcknowledge (epoch -1) answered with a
    top-level error or SHARE_SESSION_NOT_FOUND, or its connection lost before it went: close() completes at once,
    and another member gets the records at once, one delivery count higher (released by the close or with the
    connection, not by their 20 s lock)."""
    topic = make_topic()
    produce(topic, 3)
    group = _group(broker, lock_ms=20_000)
    consumer, faults, _ = _faulty(broker, group, topic, share_acknowledgement_mode="explicit")
    closing = lambda r: r.share_session_epoch == -1  # noqa: E731
    try:
        held = _poll_until(consumer, 3)
        assert [r.delivery_count for r in held] == [1, 1, 1]
        if fault is None:
            faults.cut_after_send("ShareAcknowledge", when=closing)
        else:
            faults.fail_when("ShareAcknowledge", fault, when=closing, node=LEADER)
        started = time.monotonic()
        consumer.close(timeout_ms=8000)
        took = time.monotonic() - started
    finally:
        consumer.close(timeout_ms=1000)
    assert faults.spent() and took < 2, f"close() took {took:.1f} s"
    assert _did(fired, "share_session", "closing", trigger, "ended"), _path(fired, "share_session")
    started = time.monotonic()
    with ShareConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=group) as other:
        again = _poll_until(other, 3, timeout_s=10)
    assert sorted((r.offset, r.delivery_count) for r in again) == [(0, 2), (1, 2), (2, 2)]
    assert time.monotonic() - started < 8, "released at the close, not by the lock"


def test_close_while_backing_off_after_a_refused_opening_is_prompt(broker, make_topic, produce, fired):
    """close() while the session waits out the backoff (2-2.5 s) after SHARE_SESSION_LIMIT_REACHED: there is no
    session to close, close() does not wait for the backoff, and what the refused answer acquired is released
    with the member's connection - another member gets it at once, not after the 20 s lock."""
    topic = make_topic()
    produce(topic, 3)
    group = _group(broker, lock_ms=20_000)
    consumer, faults, _ = _faulty(broker, group, topic, retry_backoff_ms=2500, retry_backoff_max_ms=2500)
    faults.fail("ShareFetch", 133, node=LEADER)
    try:
        consumer.poll(timeout_ms=0)  # the application polls: the member fetches once it has an assignment
        _wait_until(lambda: _session_state(consumer) == "backoff", 10, "the session to back off")
        started = time.monotonic()
        consumer.close(timeout_ms=8000)
        took = time.monotonic() - started
    finally:
        consumer.close(timeout_ms=1000)
    assert took < 1.5, f"close() took {took:.2f} s"
    assert _did(fired, "share_session", "backoff", "close_requested", "ended"), _path(fired, "share_session")
    assert _acquired(faults.hidden) == {0, 1, 2}
    started = time.monotonic()
    with ShareConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=group) as other:
        again = _poll_until(other, 3, timeout_s=10)
    assert sorted((r.offset, r.delivery_count) for r in again) == [(0, 2), (1, 2), (2, 2)]
    assert time.monotonic() - started < 8, "released with the connection, not by the lock"


# -- membership -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [110, 25], ids=["FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID"])
def test_a_fenced_member_joins_again_and_keeps_consuming(broker, make_topic, produce, fired, code):
    """A heartbeat answered FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: the member drops its assignment, joins again
    at once with the same member id, and consumes what is produced afterwards; every record accepted once."""
    topic = make_topic()
    produce(topic, 3)
    consumer, faults, outcomes = _faulty(broker, _group(broker), topic)
    with consumer:
        _until_accepted(consumer, outcomes, range(3))
        member, epoch = consumer.metrics_flat()["member-id"], consumer.metrics_flat()["member-epoch"]
        faults.fail_when("ShareGroupHeartbeat", code, when=lambda r: r.member_epoch > 0, node=COORDINATOR)
        _wait_until(lambda: _did(fired, "share_membership", "fenced", "rejoin", "joining"), 10, "the fence")
        produce(topic, 3)
        handed = _until_accepted(consumer, outcomes, range(6))
        after = consumer.metrics_flat()
    assert faults.spent()
    assert any(r.source == "stable" and r.trigger == "fenced_error" for r in fired if r.machine == "share_membership")
    assert sorted(r.offset for r in handed) == [3, 4, 5]
    # the fence was the injector's: the coordinator still had the member, and gives it its epoch back
    assert after["member-id"] == member and after["member-epoch"] >= epoch and after["member-state"] == "stable", after
    ((fence, _),) = faults.patched
    beats = faults.requests("ShareGroupHeartbeat")
    rejoins = [r for r in beats[next(i for i, r in enumerate(beats) if r is fence) + 1 :] if r.member_epoch == 0]
    assert [r.member_id for r in rejoins] == [member], "joined again once, with the same member id"
    assert sorted(outcomes.accepted) == list(range(6)) and outcomes.failed == []


def test_a_member_that_stops_polling_leaves_and_joins_again_when_it_polls(broker, make_topic, produce, fired):
    """No poll() for max_poll_interval_ms: the member leaves the group (its leave heartbeat goes at once); the
    next poll() joins it again, and it consumes what was produced meanwhile."""
    topic = make_topic()
    produce(topic, 3)
    group = _group(broker)
    consumer, faults, outcomes = _faulty(broker, group, topic, max_poll_interval_ms=1000)
    with consumer:
        _until_accepted(consumer, outcomes, range(3))
        member = consumer.metrics_flat()["member-id"]
        _wait_until(lambda: consumer.metrics_flat()["member-state"] == "stale", 5, "the member to go stale")
        _wait_until(lambda: _members(broker, group) == [], 5, "the stale member to be out of the group")
        produce(topic, 3)
        handed = _until_accepted(consumer, outcomes, range(6))
        assert consumer.metrics_flat()["member-state"] == "stable"
        assert _members(broker, group) == [member]
        leaves = [r for r in faults.requests("ShareGroupHeartbeat") if r.member_epoch == -1]
        assert len(leaves) == 1, "the stale member's leave"
    assert _did(fired, "share_membership", "stable", "poll_timer_expired", "stale")
    assert _did(fired, "share_membership", "stale", "poll_resumed", "joining")
    assert sorted(r.offset for r in handed) == [3, 4, 5]
    assert sorted(outcomes.accepted) == list(range(6))


def test_closing_a_stale_member_is_prompt_and_releases_what_it_holds(broker, make_topic, produce, fired):
    """close() of a member that stopped polling (out of the group already) while it holds records: close() does
    not wait out its timeout, and the records go to another member at once (its sessions close at the close,
    releasing them), not after their 20 s lock."""
    topic = make_topic()
    produce(topic, 3)
    group = _group(broker, lock_ms=20_000)
    consumer, _, _ = _faulty(broker, group, topic, max_poll_interval_ms=1000, share_acknowledgement_mode="explicit")
    try:
        held = _poll_until(consumer, 3)
        assert len(held) == 3
        _wait_until(lambda: consumer.metrics_flat()["member-state"] == "stale", 5, "the member to go stale")
        started = time.monotonic()
        consumer.close(timeout_ms=10_000)
        took = time.monotonic() - started
    finally:
        consumer.close(timeout_ms=1000)
    assert _did(fired, "share_membership", "stale", "leave_requested", "unsubscribed")
    assert took < 3, f"close() of a stale member took {took:.1f} s"
    started = time.monotonic()
    with ShareConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=group) as other:
        again = _poll_until(other, 3, timeout_s=10)
    assert sorted((r.offset, r.delivery_count) for r in again) == [(0, 2), (1, 2), (2, 2)]
    assert time.monotonic() - started < 8, "released at the close, not by the lock"


@pytest.mark.parametrize("timeout_ms", [3000, 6000])
def test_close_with_the_leader_blackholed_completes_within_its_timeout(broker, make_topic, produce, fired, timeout_ms):
    """The leader stops answering while a ShareFetch waits on it: close() cannot close that session, so the leave
    goes once request_timeout_ms has passed, and close() returns within its timeout (3 s: before the fetch's own
    deadline, 4.5 s; 6 s: once that deadline ended the session) - the member out of the group either way."""
    topic = make_topic()
    produce(topic, 1)
    group = _group(broker)
    consumer, faults, outcomes = _faulty(broker, group, topic, request_timeout_ms=1500, fetch_max_wait_ms=3000)
    try:
        _until_accepted(consumer, outcomes, range(1))
        _long_poll_in_flight(consumer)
        faults.blackhole(LEADER)
        started = time.monotonic()
        consumer.close(timeout_ms=timeout_ms)
        took = time.monotonic() - started
    finally:
        consumer.close(timeout_ms=1000)
    assert took < timeout_ms / 1000 + 0.5, f"close() took {took:.1f} s"
    assert _did(fired, "share_membership", "prepare_leaving", "close_timed_out", "leaving")
    assert _did(fired, "share_membership", "leaving", "left", "unsubscribed")
    assert [r.member_epoch for r in faults.requests("ShareGroupHeartbeat")][-1] == -1, "the leave went"
    assert _members(broker, group) == []


@pytest.mark.parametrize("blackholed", [False, True], ids=["sessions_closed", "close_timed_out"])
def test_fenced_while_closing_sends_no_heartbeat_any_more(broker, make_topic, produce, fired, blackholed):
    """FENCED_MEMBER_EPOCH while close() waits for the share sessions (a ShareFetch in flight; with the leader
    blackholed, until request_timeout_ms): the sessions close all the same, close() completes, and the member,
    out of the group, sends no heartbeat any more - neither a leave nor one at epoch 0, which would join it
    again."""
    topic = make_topic()
    produce(topic, 1)
    group = _group(broker)
    # the closing waits for the ShareFetch in flight: answered after 2 s, or (blackholed) past request_timeout_ms
    timing = {"request_timeout_ms": 2000, "fetch_max_wait_ms": 2500} if blackholed else {"fetch_max_wait_ms": 2000}
    consumer, faults, outcomes = _faulty(broker, group, topic, **timing)
    membership = consumer._parts.membership
    try:
        _until_accepted(consumer, outcomes, range(1))
        _long_poll_in_flight(consumer)
        faults.fail_when(
            "ShareGroupHeartbeat",
            110,
            when=lambda r: r.member_epoch > 0 and membership.state == "prepare_leaving",
            node=COORDINATOR,
        )
        if blackholed:
            faults.blackhole(LEADER)
        started = time.monotonic()
        consumer.close(timeout_ms=8000)
        took = time.monotonic() - started
    finally:
        consumer.close(timeout_ms=1000)
    # the ShareFetch in flight is answered after 2 s; blackholed, it fails at its deadline, 4.5 s after it went
    assert faults.spent() and took < (6 if blackholed else 3.5), f"close() took {took:.1f} s"
    assert _did(fired, "share_membership", "prepare_leaving", "fenced_error")
    done = "close_timed_out" if blackholed else "sessions_closed"
    assert _did(fired, "share_membership", "prepare_leaving", done, "unsubscribed"), _path(fired, "share_membership")
    ((fenced, _),) = faults.patched
    beats = faults.requests("ShareGroupHeartbeat")
    after = [r.member_epoch for r in beats[next(i for i, r in enumerate(beats) if r is fenced) + 1 :]]
    assert after == [], f"heartbeats (their epochs) after the fence: {after}"


def test_subscribing_again_while_the_leave_is_under_way_consumes_on(broker, make_topic, produce, fired):
    """unsubscribe() then subscribe() at once, with a ShareFetch waiting on the broker: it is answered first (with
    records produced meanwhile, which the closing request that follows releases), then the share session's
    closing request and the leave heartbeat go (their answers held 300 / 800 ms). The member joins again when
    the leave completes, opens a new share session and consumes: each record handed out once, in the new session
    (none of the closing one, whose lock the broker gave up), and accepted exactly once."""
    topic = make_topic()
    produce(topic, 3)
    consumer, faults, outcomes = _faulty(broker, _group(broker), topic, fetch_max_wait_ms=1500)
    with consumer:
        _until_accepted(consumer, outcomes, range(3))
        member = consumer.metrics_flat()["member-id"]
        _long_poll_in_flight(consumer)
        faults.delay_when("ShareAcknowledge", 300, when=lambda r: r.share_session_epoch == -1)
        faults.delay_when("ShareGroupHeartbeat", 800, when=lambda r: r.member_epoch == -1)
        consumer.unsubscribe()
        consumer.subscribe([topic])
        produce(topic, 3)
        handed = _until_accepted(consumer, outcomes, range(6), timeout_s=10)
        assert consumer.metrics_flat()["member-id"] == member
    assert faults.spent()
    assert _did(fired, "share_session", "in_flight_then_close", "answered", "close_due")
    assert _did(fired, "share_session", "closing", "answered", "ended")
    assert _did(fired, "share_membership", "leaving", "left", "joining"), _path(fired, "share_membership")
    assert sorted(r.offset for r in handed) == [3, 4, 5], [(r.offset, r.delivery_count) for r in handed]
    assert sorted(outcomes.accepted) == list(range(6)) and outcomes.failed == []
