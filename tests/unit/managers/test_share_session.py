"""ShareSession (KIP-932) alone, sans-IO: which epoch and partitions each request carries, how each answer, error
and disconnect moves the session (specs/share_session.yaml), and what a session that ends reports lost."""

from __future__ import annotations

import pytest

from fsm_consumer.managers._share_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SHARE_SESSION_EPOCH,
    SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND,
    ShareSession,
    TopicIdPartition,
    next_epoch,
)
from fsm_consumer.policy import Backoffs

A0, A1, B0 = TopicIdPartition("a", 0), TopicIdPartition("a", 1), TopicIdPartition("b", 0)
INT32_MAX = 2**31 - 1


class Ended(list):
    """on_ended: (node, generation, why, now) of every session that ended."""

    def __call__(self, node, generation, why, now):
        self.append((node, generation, why, now))


def session(**kw):
    ended = Ended()
    backoffs = Backoffs(100, 1000, rng=__import__("random").Random(1))
    s = ShareSession(3, on_ended=ended, backoffs=backoffs, config={"request_timeout_ms": 500}, **kw)
    return s, ended


def opened(parts=(A0, A1), now=0.0):
    """A session the broker opened (epoch 1) for ``parts``."""
    s, ended = session(now=now)
    plan = s.plan(parts)
    s.sent(plan, now)
    assert s.on_answer(0, now + 1) == "answered"
    return s, ended


def test_epochs_move_on_and_wrap_to_one_never_zero():
    assert next_epoch(0) == 1 and next_epoch(1) == 2
    assert next_epoch(INT32_MAX) == 1  # 0 would mean "open a new session"
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    s, _ = opened()
    s.epoch = INT32_MAX - 1
    for expected in (INT32_MAX, 1, 2):
        s.sent(s.plan([A0, A1]), 5)
        s.on_answer(0, 6)
        assert s.epoch == expected and s.state == "open"


def test_opening_lists_every_partition_without_acks_then_only_changes_go():
    s, _ = session()
    assert s.machine.attribute("request") == "open_session" and s.machine.attribute("acks") == "refused"
    plan = s.plan([A0, A1, A0])
    assert (plan.kind, plan.epoch, plan.to_add, plan.to_forget, plan.acks_allowed) == (
        "open_session",
        INITIAL_EPOCH,
        (A0, A1),
        (),
        False,
    )
    assert plan.full and plan.generation == 1
    s.sent(plan, 10)
    assert s.state == "opening" and s.plan([A0]) is None  # one request in flight per broker
    assert s.machine.attribute("acks") == "wait"
    s.on_answer(0, 20)
    assert (s.state, s.epoch, s.generation) == ("open", 1, 1)
    assert s.machine.attribute("acks") == "allowed"
    plan = s.plan([A1, B0])  # A0 dropped, B0 added
    assert (plan.kind, plan.epoch, plan.to_add, plan.to_forget, plan.acks_allowed) == (
        "in_session",
        1,
        (B0,),
        (A0,),
        True,
    )
    assert not plan.full
    s.sent(plan, 30)
    assert s.state == "in_flight" and list(s.partitions) == [A1, B0]
    s.on_answer(0, 40)
    assert s.epoch == 2 and s.plan([A1, B0]).to_add == ()


@pytest.mark.parametrize("code", [SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH])
def test_a_session_error_resets_to_epoch_zero_and_reports_what_it_acquired_lost(code):
    s, ended = opened()
    s.sent(s.plan([A0, A1]), 50)
    assert s.on_answer(code, 60) == "session_error"
    assert (s.state, s.epoch, s.partitions) == ("closed", 0, {})
    assert ended == [(3, 1, s.ended_why, 60)] and s.ended_why in (
        "SHARE_SESSION_NOT_FOUND",
        "INVALID_SHARE_SESSION_EPOCH",
    )
    plan = s.plan([A0, A1])  # opened again at once (Java's nextCloseExistingAttemptNew), a new generation
    assert (plan.kind, plan.epoch, plan.to_add, plan.generation) == ("open_session", 0, (A0, A1), 2)


def test_the_session_limit_backs_off_before_opening_again():
    s, ended = session()
    s.sent(s.plan([A0]), 0)
    assert s.on_answer(SHARE_SESSION_LIMIT_REACHED, 10) == "session_error"
    assert s.state == "backoff" and s.plan([A0]) is None and ended[0][2] == "SHARE_SESSION_LIMIT_REACHED"
    deadline = s.machine.next_deadline
    assert 10 < deadline <= 10 + 120  # retry_backoff_ms with jitter
    s.tick(deadline - 1)
    assert s.state == "backoff"
    s.tick(deadline)
    assert s.state == "closed" and s.plan([A0]).kind == "open_session"


def test_a_limit_reached_on_a_session_in_flight_backs_off_too():
    s, ended = opened()
    s.sent(s.plan([A0, A1]), 5)
    s.on_answer(SHARE_SESSION_LIMIT_REACHED, 6)
    assert s.state == "backoff" and len(ended) == 1


@pytest.mark.parametrize("where", ["opening", "in_flight", "open"])
def test_a_disconnect_resets_the_session_and_loses_what_it_acquired(where):
    s, ended = session() if where == "opening" else opened()
    if where != "open":
        s.sent(s.plan([A0, A1]), 7)
    assert s.state == where
    s.on_disconnect("connection to node 3 lost", 9)
    assert (s.state, s.epoch) == ("closed", 0)
    assert ended == [(3, 1, "connection to node 3 lost", 9)]
    s.on_disconnect("again", 10)  # no session: nothing more to lose
    assert len(ended) == 1


def test_a_refused_opening_opens_nothing_and_backs_off():
    s, ended = session()
    s.sent(s.plan([A0]), 0)
    assert s.on_answer(42, 1) == "refused"  # INVALID_REQUEST
    assert s.state == "backoff" and s.epoch == 0 and ended[0][2] == "top-level error 42"


def test_another_top_level_error_in_the_session_moves_the_epoch_on_as_java():
    s, ended = opened()
    s.sent(s.plan([A0, A1]), 5)
    assert s.on_answer(100, 6) == "refused"  # UNKNOWN_TOPIC_ID
    assert (s.state, s.epoch) == ("open", 2) and ended == []


def test_close_sends_epoch_minus_one_then_ends():
    s, ended = opened()
    s.close(10)
    assert s.state == "close_due" and s.machine.attribute("acks") == "allowed"
    plan = s.plan([A0, A1])
    assert (plan.kind, plan.epoch, plan.to_add, plan.acks_allowed) == ("close_session", FINAL_EPOCH, (), True)
    s.sent(plan, 11)
    assert s.state == "closing" and s.machine.attribute("acks") == "refused"
    s.on_answer(0, 12)
    assert s.state == "ended" and s.ended and ended == [(3, 1, "closed by the member", 12)]
    s.close(13)  # closed already: ignored
    assert s.state == "ended"


@pytest.mark.parametrize("answer, state", [(0, "close_due"), (100, "close_due"), (SHARE_SESSION_NOT_FOUND, "ended")])
def test_close_while_in_flight_waits_for_the_answer(answer, state):
    s, ended = opened()
    s.sent(s.plan([A0, A1]), 5)
    s.close(6)
    assert s.state == "in_flight_then_close" and s.plan([A0]) is None
    s.on_answer(answer, 7)
    assert s.state == state
    assert (ended != []) == (state == "ended")


def test_close_while_opening_then_a_disconnect_leaves_nothing_to_close():
    s, ended = session()
    s.sent(s.plan([A0]), 0)
    s.close(1)
    assert s.state == "in_flight_then_close"
    s.on_disconnect("connection lost", 2)
    assert s.state == "ended" and ended[0][2] == "connection lost"


def test_a_disconnect_before_the_closing_request_ends_it():
    s, ended = opened()
    s.close(3)
    s.on_disconnect("connection lost", 4)
    assert s.state == "ended" and len(ended) == 1


@pytest.mark.parametrize("how", ["session_error", "refused", "disconnected", "timed_out"])
def test_the_closing_request_ends_the_session_whatever_becomes_of_it(how):
    s, ended = opened()
    s.close(3)
    s.sent(s.plan(()), 4)
    if how == "session_error":
        s.on_answer(INVALID_SHARE_SESSION_EPOCH, 5)
    elif how == "refused":
        s.on_answer(30, 5)  # GROUP_AUTHORIZATION_FAILED
    elif how == "disconnected":
        s.on_disconnect("connection lost", 5)
    else:
        s.tick(4 + 499)
        assert s.state == "closing"
        s.tick(4 + 500)  # close_timeout: request_timeout_ms
    assert s.state == "ended" and len(ended) == 1


@pytest.mark.parametrize("where", ["closed", "backoff"])
def test_nothing_to_close_ends_at_once(where):
    s, ended = session()
    if where == "backoff":
        s.sent(s.plan([A0]), 0)
        s.on_answer(SHARE_SESSION_LIMIT_REACHED, 1)
        ended.clear()
    s.close(2)
    assert s.state == "ended" and s.plan([A0]) is None and ended == []
