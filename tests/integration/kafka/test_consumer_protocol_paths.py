"""The consumer-protocol member's other paths on Apache Kafka: leaving from each state that waits (a callback,
the revoked partitions' commit, on_partitions_lost), callbacks that outlive the rebalance timeout, a member
that stops polling, a new target during a reconciliation, fencing by the broker, and a fatal error.

As tests/integration/group/test_group_leave.py does for the classic member: the member under test is
polled by the test itself, which holds it in a state (a callback awaited and not yet run, a commit answer
held back by its FaultyTransport), then acts. Only what the broker cannot be made to do on cue is injected
through the transport (an error code on a heartbeat answer)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import kafka.errors as ke
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "group"))  # importlib mode: the group harness

from group_harness import Member, coordinator_node, counted_consumer, stop_all, wait_until  # noqa: E402

from fsm_consumer import ConsumerRebalanceListener  # noqa: E402

pytestmark = pytest.mark.brokers("kafka")
CLOSE_MS = 8000


class Recorder(ConsumerRebalanceListener):
    """Records the callbacks; ``hold`` (seconds) makes the next callback of a kind sleep that long (the next one
    with partitions, for a kind in ``hold_with_partitions``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.hold: dict[str, float] = {}
        self.hold_with_partitions: set[str] = set()

    def _note(self, kind: str, tps) -> None:
        self.calls.append((kind, sorted(tp.partition for tp in tps)))
        if not tps and kind in self.hold_with_partitions:
            return
        delay = self.hold.pop(kind, 0.0)
        if delay:
            time.sleep(delay)

    def settled(self) -> list[tuple[str, list[int]]]:
        """The calls without the empty assignments before the first with partitions. Kafka's coordinator may answer
        a member's first heartbeat before its metadata has the topic created a moment before: an empty assignment,
        the partitions a heartbeat later; the member, as Java's, tells the listener of both."""
        first = next((i for i, call in enumerate(self.calls) if call != ("assigned", [])), len(self.calls))
        return self.calls[first:]

    def on_partitions_assigned(self, assigned):
        self._note("assigned", assigned)

    def on_partitions_revoked(self, revoked):
        self._note("revoked", revoked)

    def on_partitions_lost(self, lost):
        self._note("lost", lost)


def member(kafka, group: str, topic: str, **extra):
    settings = {
        "bootstrap_servers": kafka.bootstrap_servers,
        "group_id": group,
        "client_id": "under-test",
        "group_protocol": "consumer",
        "auto_offset_reset": "earliest",
        "request_timeout_ms": 5000,
        **extra,
    }
    consumer, faults, sent = counted_consumer(settings)
    listener = Recorder()
    consumer.subscribe([topic], listener=listener)
    return consumer, faults, sent, listener


def state(consumer) -> str:
    return consumer._group.membership.machine.state


def steps(consumer) -> list[tuple[str, str, str]]:
    return [(r.source, r.trigger, r.dest) for r in consumer._group.membership.machine.log]


def poll_until(consumer, predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        consumer.poll(timeout_ms=20)
        if predicate():
            return
    raise AssertionError(f"timed out waiting for {what}: state {state(consumer)}, {steps(consumer)[-6:]}")


def stable_owning(consumer, count: int) -> None:
    poll_until(
        consumer, lambda: state(consumer) == "stable" and len(consumer.assignment()) == count, 30, f"{count} owned"
    )


def close_and_check(consumer, sent, waiting: str) -> list[tuple[str, str, str]]:
    """close() from ``waiting``: returns promptly, the member ends unsubscribed."""
    assert state(consumer) == waiting, steps(consumer)[-6:]
    started = time.monotonic()
    consumer.close(timeout_ms=CLOSE_MS)
    took = time.monotonic() - started
    log = steps(consumer)
    assert consumer._group.membership.machine.state == "unsubscribed", log[-8:]
    assert took < CLOSE_MS / 1000, f"close() from {waiting} took {took:.1f} s"
    return log


@pytest.fixture
def topic(kafka, make_topic):
    return make_topic(partitions=4)


@pytest.fixture
def others():
    made: list[Member] = []
    yield made
    stop_all(made)


def test_close_while_on_partitions_assigned_is_awaited(kafka, topic):
    c, _, sent, listener = member(kafka, f"g-{topic}", topic)
    # not polled: the assignment arrives with a heartbeat answer and its callback waits for the application
    wait_until(lambda: state(c) == "assigning", 30, "on_partitions_assigned to be awaited", lambda: steps(c)[-4:])
    log = close_and_check(c, sent, "assigning")
    # the awaited callback ran inside close(), then everything owned was revoked, then the leave heartbeat
    assert listener.calls == [("assigned", [0, 1, 2, 3]), ("revoked", [0, 1, 2, 3])]
    assert ("assigning", "leave_requested", "assigning_then_leave") in log
    assert ("assigning_then_leave", "assign_acked", "leave_committing") in log
    assert ("leaving", "left", "unsubscribed") in log


def test_close_while_a_revocation_is_awaited_then_revokes_the_rest(kafka, topic, others):
    group = f"g-{topic}"
    c, _, sent, listener = member(kafka, group, topic)
    stable_owning(c, 4)
    others.append(Member(kafka.bootstrap_servers, group, topic, "other", group_protocol="consumer"))
    deadline = time.monotonic() + 30
    while not (state(c) == "revoking" and c._group.membership._callbacks.kind == "revoke"):
        assert time.monotonic() < deadline, steps(c)[-6:]
        time.sleep(0.02)  # not polling: the broker's new target waits for this member's callback
    log = close_and_check(c, sent, "revoking")
    assert ("revoking", "leave_requested", "revoking_then_leave") in log
    assert ("revoking_then_leave", "revoke_acked", "leave_committing") in log  # the rest, committed and revoked next
    assert ("leave_committing", "revocation_completed", "prepare_leaving") in log
    calls = listener.settled()
    assert [k for k, _ in calls] == ["assigned", "revoked", "revoked"], listener.calls
    assert sorted(calls[1][1] + calls[2][1]) == [0, 1, 2, 3]


def test_close_while_the_revoked_partitions_commit_is_in_flight(kafka, topic, others, produce):
    group = f"g-{topic}"
    produce(topic, 40)
    c, faults, sent, listener = member(kafka, group, topic, auto_commit_interval_ms=600_000)
    stable_owning(c, 4)
    poll_until(c, lambda: sum(c.position(tp) for tp in c.assignment()) >= 40, 20, "every record read")
    faults.delay("OffsetCommit", 1500)
    others.append(Member(kafka.bootstrap_servers, group, topic, "other", group_protocol="consumer"))
    poll_until(c, lambda: state(c) == "committing_revoked", 30, "the revoked partitions' commit")
    assert [k for k, _ in listener.settled()] == ["assigned"], listener.calls  # committed before on_partitions_revoked
    log = close_and_check(c, sent, "committing_revoked")
    assert ("committing_revoked", "leave_requested", "committing_then_leave") in log
    assert ("committing_then_leave", "revocation_completed", "leave_committing") in log  # all it owns, at once
    assert [k for k, _ in listener.settled()] == ["assigned", "revoked"] and listener.calls[-1][1] == [0, 1, 2, 3]


def test_an_assignment_callback_that_outlives_the_rebalance_timeout_makes_the_member_stale(kafka, topic):
    c, _, _, listener = member(kafka, f"g-{topic}", topic, max_poll_interval_ms=1500)
    listener.hold["assigned"] = 2.5  # longer than the rebalance timeout (max_poll_interval_ms)
    # the partitions' callback: a coordinator that has not read a fresh topic's metadata yet answers the join with
    # an empty assignment first, whose callback (nothing to lose) would take the hold
    listener.hold_with_partitions.add("assigned")
    try:
        # the poll timer runs while the callback is awaited (as Java's): it runs out before the assignment's
        # own timeout, both max_poll_interval_ms, the poll's having started earlier
        poll_until(c, lambda: ("assigning", "poll_timer_expired", "stale") in steps(c), 30, "stale")
        poll_until(c, lambda: state(c) == "stable" and c.assignment(), 30, "rejoined after losing them")
        calls = [call for call in listener.calls if call != ("assigned", [])]
        # what the held callback was given is lost (another member may own it by now), before anything else
        assert calls[:2] == [("assigned", [0, 1, 2, 3]), ("lost", [0, 1, 2, 3])], listener.calls
    finally:
        c.close(timeout_ms=CLOSE_MS)


@pytest.mark.parametrize("kind, waiting", [("revoked", "prepare_leaving"), ("assigned", "assigning_then_leave")])
def test_a_callback_that_outlives_the_rebalance_timeout_while_leaving_is_abandoned(kafka, topic, kind, waiting):
    c, _, sent, listener = member(kafka, f"g-{topic}", topic, max_poll_interval_ms=1500)
    if kind == "revoked":
        stable_owning(c, 4)
    else:
        wait_until(lambda: state(c) == "assigning", 30, "on_partitions_assigned to be awaited", lambda: steps(c)[-4:])
    listener.hold[kind] = 2.5
    log = close_and_check(c, sent, "stable" if kind == "revoked" else "assigning")
    timed_out = "revocation_timed_out" if kind == "revoked" else "assignment_timed_out"
    assert (waiting, timed_out, "leaving") in log, log[-8:]


def test_a_member_that_stops_polling_leaves_and_a_close_then_sends_nothing_more(kafka, topic):
    c, _, sent, listener = member(kafka, f"g-{topic}", topic, max_poll_interval_ms=1500)
    stable_owning(c, 4)
    wait_until(lambda: state(c) == "stale", 10, "the poll timer to run out", lambda: steps(c)[-4:])
    time.sleep(0.5)  # its leave heartbeat goes out meanwhile
    heartbeats = sent["ConsumerGroupHeartbeat"]
    log = close_and_check(c, sent, "stale")
    assert ("stable", "poll_timer_expired", "stale") in log and ("stale", "leave_requested", "lost_then_leave") in log
    assert listener.calls[-1] == ("lost", [0, 1, 2, 3])  # as Java: the listener is told on close
    assert sent["ConsumerGroupHeartbeat"] == heartbeats  # its leave went out when it went stale


def test_cut_off_from_the_coordinator_for_a_session_the_lease_ends_then_the_partitions_are_lost(kafka, topic, produce):
    """Its heartbeats cannot reach the coordinator for longer than the group's session (10 s here, read from
    the broker: group.consumer.session.timeout.ms) while its fetches still can: the broker drops the member
    and may give its partitions to another. The member's own lease ends first: no record is handed out past
    it, on_partitions_lost runs, and it joins again once the coordinator answers."""
    c, faults, _, listener = member(kafka, f"g-{topic}", topic)
    try:
        stable_owning(c, 4)
        membership = c._group.membership
        poll_until(c, lambda: membership.session_timeout_ms == 10_000, 10, "the group's session timeout read")
        faults.blackhole(coordinator_node(kafka))
        handed_out: list[tuple[float, int]] = []  # (engine ms, records) of every poll that returned records
        deadline = time.monotonic() + 11
        while time.monotonic() < deadline:
            got = sum(len(rs) for rs in c.poll(timeout_ms=50).values())
            if got:
                handed_out.append((c._clock.now_ms(), got))
            if len(handed_out) < 200:
                produce(topic, 5)
        assert ("stable", "session_expired", "fenced") in steps(c), steps(c)[-6:]
        expired = next(r.time for r in membership.machine.log if r.trigger == "session_expired")
        assert handed_out and all(at < expired for at, _ in handed_out), (handed_out[-3:], expired)
        faults.clear()
        poll_until(c, lambda: state(c) == "stable" and len(c.assignment()) == 4, 30, "joined again")
        assert ("lost", [0, 1, 2, 3]) in listener.calls and membership.session_expiries == 1
    finally:
        c.close(timeout_ms=CLOSE_MS)


@pytest.mark.parametrize("waiting", ["fenced", "prepare_leaving"])
def test_fenced_while_a_callback_is_awaited_then_close_loses_instead_of_leaving(kafka, topic, waiting):
    """FENCED_MEMBER_EPOCH injected on a heartbeat answer (the broker fences on its own only after a session,
    the test above): closing while on_partitions_lost is awaited, or fenced while the leave's revocation
    runs, loses the partitions and sends no leave heartbeat for an epoch that is gone."""
    c, faults, sent, listener = member(kafka, f"g-{topic}", topic)
    stable_owning(c, 4)
    if waiting == "fenced":
        faults.fail("ConsumerGroupHeartbeat", 110)
        wait_until(lambda: state(c) == "fenced", 10, "fenced", lambda: steps(c)[-4:])
        log = close_and_check(c, sent, "fenced")
        assert ("fenced", "leave_requested", "lost_then_leave") in log
    else:

        def slow_revoke(revoked):  # long enough for a heartbeat (every second) to be answered meanwhile
            listener.calls.append(("revoked", sorted(tp.partition for tp in revoked)))
            faults.fail("ConsumerGroupHeartbeat", 110)
            time.sleep(2.5)

        listener.on_partitions_revoked = slow_revoke
        log = close_and_check(c, sent, "stable")
        assert ("prepare_leaving", "fenced_error", "lost_then_leave") in log
    assert ("lost_then_leave", "lost_acked", "unsubscribed") in log
    assert listener.calls[-1] == ("lost", [0, 1, 2, 3])


def unsubscribe_unanswered(c, faults) -> None:
    """Owning all 4, unsubscribe(timeout_ms=500) while the leave heartbeat's answer is held back 2 s."""
    stable_owning(c, 4)
    faults.delay("ConsumerGroupHeartbeat", 2000, times=3)
    with pytest.raises(ke.KafkaTimeoutError, match="unsubscribed all the same"):
        c.unsubscribe(timeout_ms=500)


def test_an_unsubscribe_that_times_out_before_the_leave_is_answered_unsubscribes_all_the_same(kafka, topic):
    """unsubscribe(timeout_ms) runs out while the leave heartbeat's answer is held back (2 s): as Java's, the
    consumer is unsubscribed all the same (the call says so, KafkaTimeoutError), and the member, its intent
    recorded on the background thread, does not join again once the leave is answered (it once did: the
    subscription was still set when the leave completed, and unsubscribe() never returned)."""
    c, faults, _, listener = member(kafka, f"g-{topic}", topic)
    try:
        unsubscribe_unanswered(c, faults)
        assert listener.calls[-1] == ("revoked", [0, 1, 2, 3]) and c.subscription() is None
        wait_until(lambda: state(c) == "unsubscribed", 15, "the leave answered", lambda: steps(c)[-4:])
        assert ("leaving", "left", "unsubscribed") in steps(c) and c.assignment() == set()
    finally:
        c.close(timeout_ms=CLOSE_MS)


def test_subscribed_again_while_the_leave_is_unanswered_the_member_joins_again(kafka, topic):
    """unsubscribe() ran out before the leave was answered, then subscribe() again: once the leave is
    answered the member joins afresh (the intent the background thread holds is the latest one) and is given
    every partition back."""
    c, faults, _, listener = member(kafka, f"g-{topic}", topic)
    try:
        unsubscribe_unanswered(c, faults)
        assert state(c) == "leaving"
        c.subscribe([topic], listener=listener)
        stable_owning(c, 4)
        assert ("leaving", "left", "joining") in steps(c)
        assert [k for k, _ in listener.settled()] == ["assigned", "revoked", "assigned"], listener.calls
    finally:
        c.close(timeout_ms=CLOSE_MS)


def test_close_while_everything_owned_is_being_revoked_leaves_after_the_callback(kafka, topic, make_topic):
    """Subscribed to another topic, the member revokes all it owns; close() while that revocation's callback
    is awaited runs it, and the leave goes out at once after it: nothing is left to commit or revoke."""
    c, _, sent, listener = member(kafka, f"g-{topic}", topic)
    stable_owning(c, 4)
    c.subscribe([make_topic(partitions=2)], listener=listener)
    deadline = time.monotonic() + 30
    while not (state(c) == "revoking" and c._group.membership._callbacks.kind == "revoke"):
        assert time.monotonic() < deadline, steps(c)[-6:]
        time.sleep(0.02)  # not polling: the revocation's callback waits for the application
    log = close_and_check(c, sent, "revoking")
    assert ("revoking", "leave_requested", "revoking_then_leave") in log
    assert ("revoking_then_leave", "revoke_acked", "leaving") in log
    assert listener.settled() == [("assigned", [0, 1, 2, 3]), ("revoked", [0, 1, 2, 3])], listener.calls


def test_a_member_owning_nothing_leaves_at_once(kafka, make_topic, others):
    topic = make_topic(partitions=1)
    group = f"g-{topic}"
    others.append(Member(kafka.bootstrap_servers, group, topic, "owner", group_protocol="consumer"))
    wait_until(lambda: others[0].owned() == {0}, 30, "the first member to own the partition")
    c, _, sent, listener = member(kafka, group, topic)
    poll_until(c, lambda: state(c) == "stable", 30, "stable, owning nothing")
    log = close_and_check(c, sent, "stable")
    # on_partitions_assigned is called with nothing, as Java calls it (the review's point 10)
    assert ("stable", "leave_requested", "leaving") in log and listener.calls == [("assigned", [])]


def test_a_new_target_during_a_reconciliation_is_reconciled_after_it(kafka, make_topic, others):
    """While this member's on_partitions_assigned runs (slowly), a third member joins: the coordinator's newer
    target arrives in a heartbeat answer during the assignment (Kafka holds a new target back only while a
    member still has partitions to revoke) and is reconciled once the first is acknowledged; no partition
    is assigned or revoked twice."""
    topic = make_topic(partitions=6)
    group = f"g-{topic}"
    others.append(Member(kafka.bootstrap_servers, group, topic, "first", group_protocol="consumer"))
    wait_until(lambda: len(others[0].owned()) == 6, 30, "the first member to own everything")
    c, _, _, listener = member(kafka, group, topic)
    listener.hold["assigned"] = 2.5  # heartbeats go on meanwhile (every second)
    try:

        def third_joins_while_assigning():
            wait_until(lambda: state(c) == "assigning", 30, "the assignment to start")
            others.append(Member(kafka.bootstrap_servers, group, topic, "third", group_protocol="consumer"))

        joiner = threading.Thread(target=third_joins_while_assigning, daemon=True)
        joiner.start()
        poll_until(
            c,
            lambda: (
                len(others) == 2
                and len(c.assignment()) == 2
                and state(c) == "stable"
                and all(len(m.owned()) == 2 for m in others)
            ),
            60,
            "three members owning two partitions each",
        )
        joiner.join(5)
        log = steps(c)
        assert ("assigning", "target_changed", "assigning") in log, "\n".join(map(str, log))
        assert ("acknowledging", "acknowledgement_sent", "reconciling") in log
        assigned = [p for k, ps in listener.calls if k == "assigned" for p in ps]
        revoked = [p for k, ps in listener.calls if k == "revoked" for p in ps]
        assert len(assigned) == len(set(assigned)) and len(revoked) == len(set(revoked)), listener.calls
        assert set(assigned) - set(revoked) == {tp.partition for tp in c.assignment()}
    finally:
        c.close(timeout_ms=CLOSE_MS)


def test_a_second_static_member_with_the_same_instance_id_is_told_it_is_not_released(kafka, topic, others):
    group = f"g-{topic}"
    others.append(
        Member(kafka.bootstrap_servers, group, topic, "first", group_protocol="consumer", group_instance_id="i1")
    )
    wait_until(lambda: others[0].owned() == {0, 1, 2, 3}, 30, "the first static member to own everything")
    c, _, _, _ = member(kafka, group, topic, group_instance_id="i1")
    try:
        with pytest.raises(ke.UnreleasedInstanceIdError, match="group_instance_id"):
            poll_until(c, lambda: False, 10, "the error")
        assert state(c) == "fatal"
    finally:
        c.close(timeout_ms=2000)


def offset_fetches(faults) -> list:
    """Every OffsetFetch the member sends, as sent (the counting wrapper of counted_consumer kept)."""
    seen: list = []
    counting = faults.send

    def send(request, *args, **kw):
        if type(request).__name__ == "OffsetFetchRequest":
            seen.append(request)
        return counting(request, *args, **kw)

    faults.send = send
    return seen


def read_all(consumer, count: int, timeout_s: float = 30) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(r for recs in consumer.poll(timeout_ms=100).values() for r in recs)
    return got


def test_the_committed_offsets_are_fetched_under_the_member_epoch_and_a_stale_epoch_is_asked_again(
    kafka, topic, produce
):
    """OffsetFetch v9 carries the member id and epoch (KIP-848); the broker takes them (the starting
    positions are the group's commits), and an answer of STALE_MEMBER_EPOCH (injected: the broker gives it
    only in the moment an epoch moves) is asked again rather than failing the partitions."""
    group = f"g-{topic}"
    produce(topic, 40)
    first, _, _, _ = member(kafka, group, topic)
    try:
        assert len(read_all(first, 40)) == 40
        first.commit()
    finally:
        first.close(timeout_ms=CLOSE_MS)
    produce(topic, 40, value=lambda i: f"after-{i}")
    c, faults, _, _ = member(kafka, group, topic)
    fetches = offset_fetches(faults)
    faults.fail("OffsetFetch", 113)
    try:
        got = read_all(c, 40)
        assert sorted(r.value for r in got) == sorted(f"after-{i}".encode() for i in range(40))
        assert not read_all(c, 1, timeout_s=1.0)  # nothing below the commits came
        assert len(fetches) >= 2, fetches  # the stale answer, then asked again
        epochs = [(g.member_id, g.member_epoch) for f in fetches for g in f.groups]
        membership = c._group.membership
        assert len(epochs) == len(fetches), "an OffsetFetch without the member"
        assert all(m == membership.member_id and e > 0 for m, e in epochs), epochs
    finally:
        c.close(timeout_ms=CLOSE_MS)


def test_a_coordinator_that_moves_is_found_again_without_a_rebalance(kafka, topic, produce):
    """NOT_COORDINATOR on a heartbeat and on a commit (injected: one broker cannot move its coordinator):
    the member looks the coordinator up again and goes on at the same epoch; no callback runs, nothing is
    lost, and the commit lands once the coordinator is found."""
    c, faults, sent, listener = member(kafka, f"g-{topic}", topic)
    try:
        stable_owning(c, 4)
        epoch, calls, lookups = c._group.membership.epoch, list(listener.calls), sent["FindCoordinator"]
        produce(topic, 20)
        assert len(read_all(c, 20)) == 20
        faults.fail("ConsumerGroupHeartbeat", 16)
        faults.fail("OffsetCommit", 16)
        c.commit()  # NOT_COORDINATOR: found again, sent again, within the call
        poll_until(c, lambda: sent["FindCoordinator"] >= lookups + 2, 15, "the coordinator looked up twice")
        heartbeat = c._group.membership.heartbeat
        found = heartbeat.last_ok
        poll_until(c, lambda: (heartbeat.last_ok or 0) > (found or 0), 5, "a heartbeat answered after it")
        assert state(c) == "stable" and c._group.membership.epoch == epoch
        assert listener.calls == calls
        assert sum(c.committed(tp) or 0 for tp in c.assignment()) == 20
    finally:
        c.close(timeout_ms=CLOSE_MS)
