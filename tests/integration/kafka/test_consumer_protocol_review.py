"""The review of the consumer-protocol member beside Java's (issue 47), the findings only KIP-848 has, on
Apache Kafka: each as the review saw it, now answered as Java answers it. Only what the broker cannot be
made to do on cue is injected through the member's FaultyTransport (an error code on an answer, an answer
held back); the broker is real.

- The leave goes out at once, whatever heartbeat is in flight (close() took 8 s behind a held answer).
- TOPIC_AUTHORIZATION_FAILED on a heartbeat is raised once; the member stays and goes on heartbeating.
- A static member names its instance in every heartbeat, not only in full ones.
- COORDINATOR_LOAD_IN_PROGRESS and a heartbeat that times out keep the coordinator (no FindCoordinator).
- GROUP_MAX_SIZE_REACHED names the broker's group.consumer.max.size; any broker assignor name is sent as
  given and the broker's refusal names the setting.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import kafka.errors as ke
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "group"))  # importlib mode: the group harness
sys.path.insert(0, str(Path(__file__).parent))

from test_consumer_protocol_paths import member, poll_until, stable_owning, state  # noqa: E402

pytestmark = pytest.mark.brokers("kafka")
CLOSE_MS = 8000


@pytest.fixture
def topic(kafka, make_topic):
    return make_topic(partitions=4)


def heartbeats_of(faults) -> list:
    """Every ConsumerGroupHeartbeat the member sends, as sent."""
    seen: list = []
    counting = faults.send

    def send(request, *args, **kw):
        if type(request).__name__ == "ConsumerGroupHeartbeatRequest":
            seen.append(request)
        return counting(request, *args, **kw)

    faults.send = send
    return seen


def test_the_leave_goes_out_at_once_though_a_heartbeat_answer_is_held(kafka, topic):
    """The review: close() took 8 s with an ordinary heartbeat's answer held 8 s (the leave waited for it);
    with an unresponsive coordinator the leave was never sent. As Java: the leave heartbeat goes out at once
    and close() returns once it is answered; the held answer is ignored."""
    c, faults, sent, listener = member(kafka, f"g-{topic}", topic, request_timeout_ms=20_000)
    heartbeats = heartbeats_of(faults)
    try:
        stable_owning(c, 4)
        faults.delay("ConsumerGroupHeartbeat", 8000, times=1)
        before = len(heartbeats)
        poll_until(c, lambda: len(heartbeats) > before, 5, "an ordinary heartbeat sent (its answer held)")
        started = time.monotonic()
        c.close(timeout_ms=CLOSE_MS)
        took = time.monotonic() - started
    finally:
        c.close(timeout_ms=CLOSE_MS)
    leaves = [h for h in heartbeats if h.member_epoch < 0]
    assert len(leaves) == 1 and took < 3.0, (took, [h.member_epoch for h in heartbeats])
    assert state(c) == "unsubscribed" and listener.calls[-1] == ("revoked", [0, 1, 2, 3])


def test_topic_authorization_failed_on_a_heartbeat_is_raised_once_and_the_member_stays(kafka, topic):
    """The review: the member went fatal for good, stopped heartbeating and every poll() raised, though granting
    the ACL could not help it. As Java: the error is raised from the next poll() once; the member keeps its
    state and its partitions and goes on heartbeating."""
    c, faults, sent, listener = member(kafka, f"g-{topic}", topic)
    try:
        stable_owning(c, 4)
        epoch, calls = c._group.membership.epoch, list(listener.calls)
        faults.fail("ConsumerGroupHeartbeat", 29)
        with pytest.raises(ke.TopicAuthorizationFailedError):
            poll_until(c, lambda: False, 10, "the error raised")
        heartbeats = sent["ConsumerGroupHeartbeat"]
        poll_until(c, lambda: sent["ConsumerGroupHeartbeat"] >= heartbeats + 2, 10, "two more heartbeats, no error")
        assert state(c) == "stable" and c._group.membership.epoch == epoch and len(c.assignment()) == 4
        assert listener.calls == calls
    finally:
        c.close(timeout_ms=CLOSE_MS)


def test_a_static_member_names_its_instance_in_every_heartbeat(kafka, topic):
    """The review: the instance id went out only in full heartbeats, so the broker took the member for a
    dynamic one between them. Every heartbeat, the leave included, carries it now; the broker answers each."""
    c, faults, sent, _ = member(kafka, f"g-{topic}", topic, group_instance_id="i-every")
    heartbeats = heartbeats_of(faults)
    try:
        stable_owning(c, 4)
        counted = len(heartbeats)
        poll_until(c, lambda: len(heartbeats) >= counted + 3, 10, "three more heartbeats")
        assert state(c) == "stable" and len(c.assignment()) == 4
    finally:
        c.close(timeout_ms=CLOSE_MS)
    assert any(h.topic_partitions is None for h in heartbeats)  # some were not full ones
    assert [h.instance_id for h in heartbeats] == ["i-every"] * len(heartbeats)
    assert heartbeats[-1].member_epoch == -2  # a static member's leave: the broker keeps its place


@pytest.mark.parametrize("how", ["load_in_progress", "timed_out"])
def test_the_coordinator_is_kept_when_it_is_loading_or_a_heartbeat_times_out(kafka, topic, how):
    """The review: COORDINATOR_LOAD_IN_PROGRESS and a heartbeat timeout each sent a new FindCoordinator. As
    Java: the member keeps its coordinator and heartbeats again after the backoff, at the same epoch."""
    c, faults, sent, listener = member(kafka, f"g-{topic}", topic, request_timeout_ms=2000)
    try:
        stable_owning(c, 4)
        epoch, lookups, heartbeats = c._group.membership.epoch, sent["FindCoordinator"], sent["ConsumerGroupHeartbeat"]
        if how == "load_in_progress":
            faults.fail("ConsumerGroupHeartbeat", 14)
        else:
            faults.delay("ConsumerGroupHeartbeat", 4000)  # past request_timeout_ms
        heartbeat = c._group.membership.heartbeat
        poll_until(c, lambda: sent["ConsumerGroupHeartbeat"] >= heartbeats + 3, 15, "heartbeats after the fault")
        found = heartbeat.last_ok or 0
        poll_until(c, lambda: (heartbeat.last_ok or 0) > found, 5, "a heartbeat answered after it")
        assert sent["FindCoordinator"] == lookups
        assert state(c) == "stable" and c._group.membership.epoch == epoch and len(c.assignment()) == 4
    finally:
        c.close(timeout_ms=CLOSE_MS)


def test_a_full_group_names_the_consumer_protocols_setting(kafka, topic):
    """GROUP_MAX_SIZE_REACHED (injected: it needs a broker started with group.consumer.max.size) is raised
    naming group.consumer.max.size, the consumer protocol's setting, not the classic group.max.size."""
    c, faults, _, _ = member(kafka, f"g-{topic}", topic)
    try:
        faults.fail("ConsumerGroupHeartbeat", 81)
        with pytest.raises(ke.GroupMaxSizeReachedError, match=r"group\.consumer\.max\.size") as raised:
            poll_until(c, lambda: False, 15, "the error")
        assert "group.max.size" not in str(raised.value).replace("group.consumer.max.size", "")
    finally:
        c.close(timeout_ms=2000)


def test_any_broker_assignor_name_is_sent_and_the_brokers_refusal_names_the_setting(kafka, topic):
    """group_remote_assignor was refused by a local list ('uniform', 'range') though a broker may be given its
    own assignors (group.consumer.assignors). Any name is sent now: the broker's own 'range' assigns, and a
    name it lacks comes back UNSUPPORTED_ASSIGNOR, raised naming group_remote_assignor."""
    ranged, _, _, _ = member(kafka, f"g-range-{topic}", topic, group_remote_assignor="range")
    try:
        stable_owning(ranged, 4)
    finally:
        ranged.close(timeout_ms=CLOSE_MS)
    c, _, _, _ = member(kafka, f"g-{topic}", topic, group_remote_assignor="not-on-this-broker")
    try:
        with pytest.raises(ke.KafkaError, match="group_remote_assignor") as raised:
            poll_until(c, lambda: False, 15, "the broker's refusal")
        assert "UnsupportedAssignor" in type(raised.value).__name__ or "assignor" in str(raised.value)
    finally:
        c.close(timeout_ms=2000)
