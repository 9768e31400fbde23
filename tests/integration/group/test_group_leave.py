"""close() in each rebalance state sends LeaveGroup and returns well within its timeout (issue 12, defect 2).

The member under test never polls on its own: the test holds it in a state (a callback awaited
and not yet run, a JoinGroup held by the coordinator, a SyncGroup held back, a JoinGroup failing
into backoff), then calls close(timeout_ms=8000) on the application thread. Leaving is legal from
every state of the membership spec, so the leave is never lost: the callback runs inside close(),
then on_partitions_revoked for what is still owned, then LeaveGroup.
"""

import time

import pytest
from group_harness import FAST, coordinator_node, counted_consumer, wait_until

from fsm_consumer import Consumer, ConsumerRebalanceListener, TopicPartition

pytestmark = pytest.mark.integration
CLOSE_MS = 8000


class Recorder(ConsumerRebalanceListener):
    def __init__(self):
        self.calls = []

    def on_partitions_assigned(self, assigned):
        self.calls.append(("assigned", sorted(tp.partition for tp in assigned)))

    def on_partitions_revoked(self, revoked):
        self.calls.append(("revoked", sorted(tp.partition for tp in revoked)))


def _member(bootstrap, group, topic, strategy, **extra):
    """A consumer whose transport counts every request it sends, by API."""
    settings = {
        **FAST,
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "client_id": "under-test",
        "partition_assignment_strategy": [strategy],
        **extra,
    }
    consumer, faults, sent = counted_consumer(settings)
    listener = Recorder()
    consumer.subscribe([topic], listener=listener)
    return consumer, faults, sent, listener


def _state(consumer):
    return consumer._group.membership.machine.state


def _poll_until_stable(consumer, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        consumer.poll(timeout_ms=50)
        if _state(consumer) == "stable" and consumer.assignment():
            return
    raise AssertionError(f"not stable: {_state(consumer)}")


def _close_and_check(consumer, sent, listener, state):
    assert _state(consumer) == state
    leaves = sent["LeaveGroup"]
    started = time.monotonic()
    consumer.close(timeout_ms=CLOSE_MS)
    took = time.monotonic() - started
    log = [r.trigger for r in consumer._group.membership.machine.log]
    steps = [(r.source, r.trigger, r.dest) for r in consumer._group.membership.machine.log]
    assert sent["LeaveGroup"] == leaves + 1, f"{state}: {steps}"
    assert consumer._group.membership.machine.state == "unjoined", log
    assert took < CLOSE_MS / 2000, f"close() in {state} took {took:.1f} s: {log}"
    return log


def test_close_in_assigning_partitions(broker, make_topic):
    topic = make_topic(partitions=2)
    c, _, sent, listener = _member(broker.bootstrap_servers, f"g-{topic}", topic, "range")
    wait_until(lambda: _state(c) == "assigning_partitions", 20, "the assignment callback to be awaited")
    log = _close_and_check(c, sent, listener, "assigning_partitions")
    # the awaited callback ran inside close(), then everything owned was revoked before leaving
    assert listener.calls == [("assigned", [0, 1]), ("revoked", [0, 1])]
    assert "leave_requested" in log and log[log.index("leave_requested") :][:2] == ["leave_requested", "assign_acked"]


def test_close_in_revoking_partitions(broker, make_topic, members):
    topic = make_topic(partitions=2)
    group = f"g-{topic}"
    c, _, sent, listener = _member(broker.bootstrap_servers, group, topic, "range")
    _poll_until_stable(c)
    members(broker.bootstrap_servers, group, topic, "other", partition_assignment_strategy=["range"])
    # the revoked partitions' auto-commit goes first (the Java client's order), then the callback waits
    wait_until(lambda: _state(c) == "revoking_partitions", 20, "the revocation callback to be awaited")
    _close_and_check(c, sent, listener, "revoking_partitions")
    assert listener.calls[-1] == ("revoked", [0, 1])


def test_close_while_the_revoked_partitions_commit_is_in_flight(broker, make_topic, members, produce):
    """committing_revoked -> committing_then_leave: close() waits for the auto-commit of what is being revoked
    (its answer held back 1.5 s; sent before on_partitions_revoked, the partitions still owned), then commits
    and revokes what is left and leaves; the commit is not dropped for the leave."""
    topic = make_topic(partitions=2)
    group = f"g-{topic}"
    produce(topic, 20)
    # no periodic auto-commit in the way: the only OffsetCommit is the revocation's
    c, faults, sent, listener = _member(broker.bootstrap_servers, group, topic, "range", auto_commit_interval_ms=600000)
    _poll_until_stable(c)
    deadline = time.monotonic() + 20
    while sum(c.position(tp) for tp in c.assignment()) < 20 and time.monotonic() < deadline:
        c.poll(timeout_ms=100)  # (some were read already while waiting for the assignment)
    assert sum(c.position(tp) for tp in c.assignment()) == 20
    faults.delay("OffsetCommit", 1500)
    members(broker.bootstrap_servers, group, topic, "other", partition_assignment_strategy=["range"])
    deadline = time.monotonic() + 20
    while _state(c) != "committing_revoked" and time.monotonic() < deadline:
        c.poll(timeout_ms=10)  # the commit goes out and is held; on_partitions_revoked waits for it
    assert listener.calls[-1][0] == "assigned"  # no callback before the commit is answered
    log = _close_and_check(c, sent, listener, "committing_revoked")
    steps = [(r.source, r.trigger, r.dest) for r in c._group.membership.machine.log]
    at = steps.index(("committing_revoked", "leave_requested", "committing_then_leave"))
    assert steps[at + 1] == ("committing_then_leave", "revocation_completed", "leave_committing"), log
    assert listener.calls[-1] == ("revoked", [0, 1])  # once, after the commits
    check = Consumer(bootstrap_servers=broker.bootstrap_servers, group_id=group, enable_auto_commit=False)
    try:
        committed = {tp.partition: check.committed(tp) for tp in (TopicPartition(topic, 0), TopicPartition(topic, 1))}
    finally:
        check.close()
    assert sum(committed.values()) == 20, committed  # the held commit was acknowledged, not given up


def test_close_in_joining_keeps_no_partition(broker, make_topic, members):
    topic = make_topic(partitions=2)
    group = f"g-{topic}"
    c, faults, sent, listener = _member(broker.bootstrap_servers, group, topic, "cooperative-sticky")
    _poll_until_stable(c)
    if broker.kind == "kafka":  # it answers the JoinGroup at once (Tansu holds it): slow its answers to see the round
        faults.add_latency(coordinator_node(broker), 1500)
    members(broker.bootstrap_servers, group, topic, "other", partition_assignment_strategy=["cooperative-sticky"])
    wait_until(lambda: _state(c) == "joining", 20, "a cooperative rejoin")
    faults.add_latency(coordinator_node(broker), 0)
    _close_and_check(c, sent, listener, "joining")
    assert listener.calls[-1] == ("revoked", [0, 1])  # cooperative: kept while joining, revoked to leave


def test_close_in_syncing(broker, make_topic, members):
    topic = make_topic(partitions=2)
    group = f"g-{topic}"
    members(broker.bootstrap_servers, group, topic, "leader", partition_assignment_strategy=["range"])
    time.sleep(0.5)
    # a follower holding its SyncGroup back far longer than the test waits
    c, _, sent, listener = _member(broker.bootstrap_servers, group, topic, "range", follower_sync_delay_ms=60000)
    wait_until(lambda: _state(c) == "syncing", 30, "the follower to hold its SyncGroup")
    _close_and_check(c, sent, listener, "syncing")
    assert listener.calls == []  # never owned anything


def test_close_in_join_backoff(broker, make_topic):
    topic = make_topic(partitions=2)
    # a backoff to close in, as long as the session allows (the config validator requires retry_backoff_ms below
    # session_timeout_ms: specs/membership.yaml's join_backoff_within_session); the close comes within ms of it
    c, faults, sent, listener = _member(broker.bootstrap_servers, f"g-{topic}", topic, "range", retry_backoff_ms=2500)
    _poll_until_stable(c)
    faults.fail("Heartbeat", 27, times=1)  # REBALANCE_IN_PROGRESS: rejoin
    faults.fail("JoinGroup", 15, times=1)  # COORDINATOR_NOT_AVAILABLE: back off
    deadline = time.monotonic() + 20
    # COORDINATOR_NOT_AVAILABLE also sends the member to find the coordinator again: wait for it too, as a
    # close without a coordinator gives the LeaveGroup up (as Java's maybeLeaveGroup does)
    while (_state(c) != "join_backoff" or c._group.coordinator.node is None) and time.monotonic() < deadline:
        c.poll(timeout_ms=20)  # the eager revocation callback runs here
    _close_and_check(c, sent, listener, "join_backoff")


def test_fenced_while_leaving_loses_the_partitions_and_still_closes(broker, make_topic):
    """The membership ends while close() runs on_partitions_revoked (a heartbeat answered UNKNOWN_MEMBER_ID,
    as after a session expiry): the partitions are lost, nothing is committed for them, no LeaveGroup is
    sent for a membership that is gone, and close() still returns promptly."""
    topic = make_topic(partitions=2)
    c, faults, sent, listener = _member(broker.bootstrap_servers, f"g-{topic}", topic, "range")
    _poll_until_stable(c)

    def slow_revoke(revoked):  # long enough for a heartbeat (every 300 ms) to be answered meanwhile
        listener.calls.append(("revoked", sorted(tp.partition for tp in revoked)))
        if len(listener.calls) == 2:  # the first revocation, inside close(): leave_revoking
            faults.fail("Heartbeat", 25)  # UNKNOWN_MEMBER_ID
        time.sleep(1.0)

    listener.on_partitions_revoked = slow_revoke
    leaves = sent["LeaveGroup"]
    started = time.monotonic()
    c.close(timeout_ms=CLOSE_MS)
    log = [(r.source, r.trigger, r.dest) for r in c._group.membership.machine.log]
    assert ("leave_revoking", "fenced_error", "leave_lost") in log, log  # after leave_committing's commit
    assert c._group.membership.machine.state == "unjoined" and sent["LeaveGroup"] == leaves, log
    assert time.monotonic() - started < CLOSE_MS / 2000
