"""ShareMembershipManager and ShareHeartbeatManager (KIP-932) driven by hand with a fake clock: plain-data
heartbeats out of poll(now), plain-data answers into on_answer, as Java's ShareHeartbeatRequestManager reads them.

No broker, no threads: the coordinator is a stand-in holding only what the heartbeat manager reads."""

from __future__ import annotations

import random
import re

import kafka.errors as ke
import pytest

from fsm_consumer.managers._share_heartbeat import ShareHeartbeatAnswer, ShareHeartbeatManager
from fsm_consumer.managers._share_membership import ShareMembershipManager, new_member_id
from fsm_consumer.managers._share_session import TopicIdPartition
from fsm_consumer.policy import Backoffs
from fsm_consumer.transport import RequestTimedOut, UnsupportedVersion

T, U = "t-id", "u-id"
SHARE_MESSAGE = (
    "does not support share groups (KIP-932): Apache Kafka 4.2+ with share groups enabled is needed; Tansu has none"
)
CONFIG = {"max_poll_interval_ms": 60_000, "request_timeout_ms": 10_000}


class Coordinator:
    def __init__(self, node=7):
        self.node = node
        self.lost = 0
        self.asked = 0

    def needed(self):
        self.asked += 1

    def mark_unknown(self):
        self.lost += 1


class Sessions:
    """The fetch manager's side of leaving: close every share session, report when they are."""

    def __init__(self, done=False):
        self.done = done
        self.closed_at: list[float] = []

    def __call__(self, now):
        self.closed_at.append(now)
        return self.done


def make(known=(T, U), sessions=None, rack="r1"):
    coordinator = Coordinator()
    m = ShareMembershipManager(
        "g", config=CONFIG, rack_id=rack, topic_known=lambda tid: tid in known, close_sessions=sessions, now=0
    )
    hb = ShareHeartbeatManager(m, coordinator=coordinator, backoffs=Backoffs(100, 1_000, rng=random.Random(3)))
    return m, hb, coordinator


def send(hb, now):
    wait, out = hb.poll(now)
    assert len(out) == 1, f"no heartbeat at {now} (wait {wait})"
    return out[0]


def answer(epoch=1, interval=3_000, assignment=None, error=0, **kw):
    return ShareHeartbeatAnswer(
        error=error, member_epoch=epoch, heartbeat_interval_ms=interval, assignment=assignment, **kw
    )


def joined(assignment=None, now=0, **kw):
    """A member that joined at epoch 1 (and, with an assignment, heartbeated at once to acknowledge it)."""
    m, hb, coordinator = make(**kw)
    m.subscribe(["t", "u"], now)
    h = send(hb, now)
    hb.on_answer(h, answer(assignment=assignment), now + 1)
    if m.state == "acknowledging":
        hb.on_answer(send(hb, now + 2), answer(), now + 3)
    return m, hb, coordinator


def test_the_member_id_is_a_kafka_uuid_made_by_the_client():
    ids = {new_member_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) and not i.startswith("-") for i in ids)


def test_join_then_the_assignment_applied_at_once_and_acknowledged():
    m, hb, _ = make()
    assert hb.poll(0) == (float("inf"), []) and m.state == "unsubscribed"
    m.subscribe(["u", "t"], 0)
    join = send(hb, 0)
    assert (join.node, join.group_id, join.member_id, join.member_epoch) == (7, "g", m.member_id, 0)
    assert (join.subscribed_topic_names, join.rack_id, join.full) == (("t", "u"), "r1", True)
    assert hb.poll(1)[1] == []  # one in flight
    hb.on_answer(join, answer(epoch=5, assignment={T: [1, 0], U: [2]}), 20)
    assert m.state == "acknowledging" and m.epoch == 5
    assert m.fetch_assignment() == {TopicIdPartition(T, 0), TopicIdPartition(T, 1), TopicIdPartition(U, 2)}
    ack = send(hb, 21)  # at once, not after the interval
    assert (ack.member_epoch, ack.subscribed_topic_names, ack.rack_id, ack.full) == (5, None, None, False)
    assert m.state == "stable"
    hb.on_answer(ack, answer(epoch=5), 30)
    wait, out = hb.poll(31)
    assert out == [] and wait == pytest.approx(21 + 3_000 - 31)  # the broker's interval, from the last send
    assert send(hb, 21 + 3_000).member_epoch == 5


def test_a_join_answered_without_an_assignment_is_stable_with_nothing_to_fetch():
    m, hb, _ = joined()
    assert m.state == "stable" and m.fetch_assignment() == frozenset()


def test_a_new_target_replaces_the_assignment_without_callbacks():
    m, hb, _ = joined(assignment={T: [0, 1]})
    h = send(hb, 3_002)
    hb.on_answer(h, answer(epoch=2, assignment={T: [1], U: [0]}), 3_010)
    assert m.state == "acknowledging" and m.fetch_assignment() == {TopicIdPartition(T, 1), TopicIdPartition(U, 0)}
    send(hb, 3_011)
    assert m.state == "stable" and m.epoch == 2


def test_a_topic_the_metadata_does_not_know_waits_in_reconciling_the_rest_applied():
    known = {T}
    m, hb, _ = make(known=known)
    m._topic_known = lambda tid: tid in known
    m.subscribe(["t", "u"], 0)
    hb.on_answer(send(hb, 0), answer(assignment={T: [0], U: [3]}), 1)
    assert m.state == "reconciling" and m.fetch_assignment() == {TopicIdPartition(T, 0)}
    m.on_metadata_changed(2)  # still unknown
    assert m.state == "reconciling"
    assert hb.poll(3)[1] == []  # reconciling heartbeats on the interval
    assert send(hb, 3_001).member_epoch == 1
    known.add(U)
    m.on_metadata_changed(3_500)
    assert m.state == "acknowledging" and TopicIdPartition(U, 3) in m.fetch_assignment()


def test_the_subscription_goes_again_only_when_it_changed():
    m, hb, _ = joined()
    hb.on_answer(send(hb, 3_001), answer(), 3_002)
    m.subscribe(["t"], 3_003)
    h = send(hb, 6_001)
    assert h.subscribed_topic_names == ("t",) and h.rack_id is None


@pytest.mark.parametrize("code", [110, 25])  # FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID
def test_fenced_drops_the_assignment_and_rejoins_at_once_with_the_same_member_id(code):
    m, hb, coordinator = joined(assignment={T: [0]})
    member_id = m.member_id
    h = send(hb, 3_002)
    hb.on_answer(h, answer(error=code), 3_010)
    assert m.state == "joining" and m.fetch_assignment() == frozenset() and m.epoch == 0
    assert [r.trigger for r in m.machine.log][-2:] == ["fenced_error", "rejoin"]
    join = send(hb, 3_010)  # no backoff
    assert (join.member_epoch, join.member_id, join.full, join.subscribed_topic_names) == (
        0,
        member_id,
        True,
        ("t", "u"),
    )
    assert coordinator.lost == 0


def test_an_answer_to_a_heartbeat_of_an_earlier_membership_is_dropped():
    m, hb, _ = joined(assignment={T: [0]})
    old = send(hb, 3_002)
    hb.on_answer(old, answer(error=110), 3_003)
    join = send(hb, 3_004)
    hb.on_answer(old, answer(epoch=9, assignment={U: [1]}), 3_005)  # late duplicate of the fenced one
    assert m.state == "joining" and m.epoch == 0
    hb.on_answer(join, answer(epoch=10), 3_006)
    assert m.state == "stable" and m.epoch == 10


@pytest.mark.parametrize("code", [16, 15])  # NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE
def test_a_coordinator_that_moved_is_found_again_and_the_heartbeat_goes_without_backoff(code):
    m, hb, coordinator = joined()
    hb.on_answer(send(hb, 3_001), answer(error=code), 3_002)
    assert coordinator.lost == 1 and m.state == "stable"
    h = send(hb, 3_002)
    assert h.full and h.subscribed_topic_names == ("t", "u") and h.rack_id == "r1"


def test_a_loading_coordinator_is_asked_again_after_a_backoff():
    m, hb, coordinator = joined()
    hb.on_answer(send(hb, 3_001), answer(error=14), 3_002)
    wait, out = hb.poll(3_003)
    assert out == [] and 0 < wait <= 120 and coordinator.lost == 0
    assert send(hb, 3_003 + wait).full


def test_a_retriable_code_is_retried_after_a_backoff_not_fatal():
    m, hb, _ = joined()
    hb.on_answer(send(hb, 3_001), answer(error=7), 3_002)  # REQUEST_TIMED_OUT in the answer
    assert m.state == "stable" and hb.poll(3_003)[1] == [] and m.fatal is None


@pytest.mark.parametrize(
    "code, error, words",
    [
        (30, ke.GroupAuthorizationFailedError, "grant this principal READ"),
        (42, ke.InvalidRequestError, "ShareGroupHeartbeat"),
        (81, ke.GroupMaxSizeReachedError, "group.share.max.size"),
        (35, ke.UnsupportedVersionError, SHARE_MESSAGE),
        (-1, ke.UnknownError, "ShareGroupHeartbeat"),
    ],
)
def test_fatal_answers(code, error, words):
    m, hb, _ = joined()
    hb.on_answer(send(hb, 3_001), answer(error=code, error_message="said"), 3_002)
    assert m.state == "fatal" and isinstance(m.fatal, error) and words in str(m.fatal)
    assert hb.poll(10_000) == (float("inf"), [])
    assert m.fetch_assignment() == frozenset() and m.machine.attribute("fetching") == "close_sessions"


def test_a_broker_without_the_share_apis_is_fatal_with_what_to_do():
    m, hb, _ = make()
    m.subscribe(["t"], 0)
    assert hb.on_api_versions({18, 3, 10, 68}, 0) is False
    assert m.state == "fatal" and SHARE_MESSAGE in str(m.fatal) and "no ShareGroupHeartbeat, ShareFetch" in str(m.fatal)
    m, hb, _ = make()
    assert hb.on_api_versions({76, 77, 78, 79}, 0) is True and m.state == "unsubscribed"
    m.subscribe(["t"], 0)
    hb.on_failure(send(hb, 0), UnsupportedVersion("no version in common", api_key=76), 1)
    assert m.state == "fatal" and SHARE_MESSAGE in str(m.fatal)
    first = m.fatal
    m.fail(RuntimeError("later"))
    assert m.fatal is first  # the first fatal error is the one reported


def test_a_failed_heartbeat_is_retried_after_a_backoff_and_a_lost_connection_finds_the_coordinator_again():
    m, hb, coordinator = joined()
    hb.on_failure(send(hb, 3_001), RequestTimedOut("no answer"), 3_500)
    assert coordinator.lost == 0  # a timeout keeps the coordinator, as Java
    wait, out = hb.poll(3_501)
    assert out == [] and wait > 0
    hb.on_failure(send(hb, 3_501 + wait), ConnectionError("reset"), 3_700)
    assert coordinator.lost == 1 and m.state == "stable"


def test_no_coordinator_no_heartbeat_and_the_coordinator_is_asked_for():
    m, hb, coordinator = make()
    coordinator.node = None
    m.subscribe(["t"], 0)
    assert hb.poll(0) == (float("inf"), []) and coordinator.asked == 1


def test_an_application_that_stops_polling_leaves_and_rejoins_when_it_polls():
    m, hb, _ = joined(assignment={T: [0]})
    in_flight = send(hb, 3_002)
    m.tick(59_999)
    assert m.state == "stable"
    m.tick(60_000)  # max_poll_interval_ms since subscribe(): the poll timer
    assert m.state == "stale" and m.fetch_assignment() == frozenset()
    assert m.machine.attribute("fetching") == "acks_only"
    leave = send(hb, 60_000)  # at once, even with a heartbeat in flight
    assert leave.leave and leave.member_epoch == -1 and leave.subscribed_topic_names is None
    assert hb.poll(60_001)[1] == []  # once per visit
    hb.on_answer(leave, answer(epoch=-1), 60_002)
    hb.on_answer(in_flight, answer(epoch=1, assignment={U: [0]}), 60_003)  # about the epoch it left: dropped
    assert m.state == "stale" and m.target is None
    m.on_poll(70_000)
    assert m.state == "joining"
    join = send(hb, 70_000)
    assert join.member_epoch == 0 and join.full


def test_polling_keeps_the_poll_timer_from_running_out():
    m, hb, _ = joined()
    m.on_poll(50_000)
    m.tick(100_000)
    assert m.state == "stable"
    m.tick(110_000)
    assert m.state == "stale"


def test_stale_then_close_is_out_of_the_group_at_once():
    m, hb, _ = joined()
    m.tick(60_000)
    m.leave(60_001)
    assert m.state == "unsubscribed" and hb.poll(60_002) == (float("inf"), [])


def test_leaving_closes_the_share_sessions_first_then_sends_the_leave():
    sessions = Sessions()
    m, hb, _ = joined(assignment={T: [0]}, sessions=sessions)
    m.leave(2_500)
    assert m.state == "prepare_leaving" and sessions.closed_at == [2_500]
    assert m.machine.attribute("fetching") == "close_sessions" and m.fetch_assignment() == frozenset()
    assert hb.poll(2_501)[1] == []
    h = send(hb, 6_001)  # heartbeats on the interval while the sessions close (the last went at 2)
    assert h.member_epoch == 1
    m.on_sessions_closed(6_100)
    assert m.state == "leaving"
    leave = send(hb, 6_101)  # at once, even with the interval heartbeat in flight
    assert leave.member_epoch == -1
    hb.on_answer(h, answer(epoch=1, assignment={U: [4]}), 6_102)  # an ordinary answer while leaving: ignored
    assert m.state == "leaving"
    hb.on_answer(leave, answer(epoch=-1), 6_200)
    assert m.state == "unsubscribed" and m.epoch == 0


def test_leaving_with_no_session_open_goes_straight_to_the_leave():
    m, hb, _ = joined(sessions=Sessions(done=True))
    m.leave(3_002)
    assert m.state == "leaving"


def test_sessions_that_do_not_close_in_time_do_not_hold_the_leave_back():
    m, hb, _ = joined(sessions=Sessions())
    m.leave(3_002)
    m.tick(3_002 + 9_999)
    assert m.state == "prepare_leaving"
    m.tick(3_002 + 10_000)  # request_timeout_ms
    assert m.state == "leaving"


@pytest.mark.parametrize("closing", ["answered", "timed_out"])
def test_fenced_while_the_sessions_close_sends_no_leave(closing):
    m, hb, _ = joined(sessions=Sessions())
    m.leave(3_002)
    h = send(hb, 6_001)
    hb.on_answer(h, answer(error=110), 6_002)
    assert m.state == "prepare_leaving" and m.epoch == 0
    if closing == "answered":
        m.on_sessions_closed(6_003)
    else:
        m.tick(3_002 + 10_000)
    assert m.state == "unsubscribed"


def test_the_leave_is_best_effort():
    m, hb, _ = joined(sessions=Sessions(done=True))
    m.leave(3_002)
    leave = send(hb, 3_002)
    hb.on_failure(leave, ConnectionError("reset"), 3_010)
    assert m.state == "unsubscribed"
    m, hb, _ = joined(sessions=Sessions(done=True))
    m.leave(3_002)
    send(hb, 3_002)
    m.tick(3_002 + 10_000)  # leave_timeout: no answer
    assert m.state == "unsubscribed"


def test_subscribing_again_while_leaving_rejoins_when_the_leave_completes():
    m, hb, _ = joined(sessions=Sessions(done=True))
    m.leave(3_002)
    leave = send(hb, 3_002)
    m.subscribe(["t"], 3_003)  # ignored by the machine now, remembered
    assert m.state == "leaving"
    hb.on_answer(leave, answer(epoch=-1), 3_004)
    assert m.state == "joining"
    assert send(hb, 3_004).subscribed_topic_names == ("t",)


def test_unsubscribing_with_no_topic_leaves():
    m, hb, _ = joined(sessions=Sessions(done=True))
    m.subscribe([], 3_002)
    assert m.state == "leaving"
