"""The member's lease on its partitions (issue 23), MembershipManager driven by hand with a fake clock.

A member frozen past its session must never read or commit its old partitions on waking: the lease
runs in every state in which it owns partitions (a cooperative rejoin too), and an answer read after
a freeze extends it only from when its request was sent.
"""

from __future__ import annotations

from types import SimpleNamespace

import kafka.errors as ke
import pytest
from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

from fsm_consumer.assignors import Assignment, encode_assignment
from fsm_consumer.events import CallbackAckEvent, CallbackEvent

from .test_membership_rounds import T0, T1, answer, join_round, make, sent

SESSION = 3000  # make()'s session_timeout_ms


def stable_member():
    manager, clock = make(0)
    manager.on_subscription_changed(clock.now_ms())
    join_round(manager, clock, 1, [T0, T1], 0)
    assert manager.machine.state == "stable" and manager.owned == {T0, T1}
    return manager, clock


def tick(manager, clock):
    manager.machine.tick(clock.now_ms())
    manager.poll(clock.now_ms())  # publishes the lease to the collector


def test_a_cooperative_member_rejoining_loses_its_partitions_when_its_lease_runs_out():
    manager, clock = stable_member()
    clock.advance(300)
    answer(sent(manager, clock, HeartbeatRequest), clock, error_code=27)  # the group rebalances
    assert manager.machine.state == "joining" and manager.owned == {T0, T1}  # cooperative: kept
    sent(manager, clock, JoinGroupRequest)  # ... and the coordinator never answers
    assert manager._subs.lease_until == 1_300 + SESSION  # from the heartbeat's sending, not infinite
    clock.advance(SESSION - 1)
    tick(manager, clock)
    assert manager.machine.state == "joining" and manager.owned == {T0, T1}
    clock.advance(1)
    tick(manager, clock)
    assert manager.session_expiries == 1
    assert manager.owned == frozenset() and manager._subs.assignment() == set()
    assert manager.machine.state == "joining" and manager.member_id == ""  # lost, then a new member


def test_a_heartbeat_answer_read_after_a_freeze_does_not_extend_the_lease():
    manager, clock = stable_member()
    clock.advance(300)
    heartbeat = sent(manager, clock, HeartbeatRequest)
    clock.advance(2 * SESSION)  # frozen with the answer waiting in the socket
    answer(heartbeat, clock, error_code=0)  # read on waking: it says nothing of the time since
    manager.poll(clock.now_ms())
    assert manager._subs.lease_expired(clock.now_ms())  # no record of them is handed out from here
    tick(manager, clock)
    assert manager.session_expiries == 1 and manager.owned == frozenset()


def rejoin_answered_after(ms: float):
    """A stable member told to rejoin (cooperative: it keeps T0 and T1); its JoinGroup answered ``ms`` later."""
    manager, clock = stable_member()
    clock.advance(300)
    answer(sent(manager, clock, HeartbeatRequest), clock, error_code=27)
    join = sent(manager, clock, JoinGroupRequest)
    join_sent = clock.now_ms()
    clock.advance(ms)
    answer(
        join,
        clock,
        error_code=0,
        member_id="me",
        generation_id=2,
        protocol_name="cooperative-sticky",
        leader="other",
        members=[],
    )
    assert manager.machine.state == "syncing"
    return manager, clock, join_sent


def test_a_join_answer_read_after_a_freeze_does_not_extend_the_lease():
    manager, clock, _ = rejoin_answered_after(2 * SESSION)
    tick(manager, clock)
    assert manager.session_expiries == 1 and manager.owned == frozenset()


def test_a_join_answered_within_the_session_renews_the_lease_from_its_sending():
    manager, clock, join_sent = rejoin_answered_after(SESSION - 500)  # held while the others joined
    assert manager.machine.timer_deadline("session") == join_sent + SESSION
    tick(manager, clock)
    assert manager.session_expiries == 0 and manager.owned == {T0, T1}


def test_an_eager_first_join_held_past_the_session_keeps_its_membership():
    """Nothing owned, nothing to lose: a coordinator holding the first JoinGroup (Tansu holds it for
    half a session; Kafka for a rebalance) does not make the member start again."""
    manager, clock = make(0)
    manager.on_subscription_changed(clock.now_ms())
    join = sent(manager, clock, JoinGroupRequest)
    clock.advance(2 * SESSION)
    tick(manager, clock)
    assert manager.machine.state == "joining" and manager.session_expiries == 0
    assert manager.machine.log[-1].trigger == "session_expired"  # the internal transition, logged
    answer(
        join,
        clock,
        error_code=0,
        member_id="me",
        generation_id=1,
        protocol_name="cooperative-sticky",
        leader="other",
        members=[],
    )
    assert manager.machine.state == "syncing" and manager.member_id == "me"


def sync_answered_after(ms: float, heartbeat_ok_at: float | None = None):
    """A first join (nothing owned) answered at once; its SyncGroup answered ``ms`` later (a member frozen
    with the answer waiting in its socket); with ``heartbeat_ok_at``, a heartbeat sent that long after the
    SyncGroup was answered OK before it."""
    manager, clock = make(0)
    manager.on_subscription_changed(clock.now_ms())
    answer(
        sent(manager, clock, JoinGroupRequest),
        clock,
        error_code=0,
        member_id="me",
        generation_id=2,
        protocol_name="cooperative-sticky",
        leader="other",
        members=[],
    )
    sync = sent(manager, clock, SyncGroupRequest)
    if heartbeat_ok_at is not None:
        clock.advance(heartbeat_ok_at)
        answer(sent(manager, clock, HeartbeatRequest), clock, error_code=0)  # the group still has it
        clock.advance(ms - heartbeat_ok_at)
    else:
        clock.advance(ms)
    tick(manager, clock)  # the session runs out first: nothing owned, the round goes on
    answer(sync, clock, error_code=0, assignment=encode_assignment(Assignment(partitions=[T0, T1])))
    return manager, clock


def test_a_sync_answer_read_after_the_session_ran_out_is_not_installed():
    """Found by the history checker's timeline: a member frozen while its SyncGroup was in flight woke,
    took the answer (an old generation's) and owned partitions the group had given to another member.
    Now the membership is dropped and the member rejoins, no callback runs, nothing is owned."""
    manager, clock = sync_answered_after(2 * SESSION)
    steps = [(r.source, r.trigger, r.dest) for r in manager.machine.log][-2:]
    assert steps == [("syncing", "synced", "fenced"), ("fenced", "lost_acked", "joining")]  # lost nothing: rejoins
    assert manager.owned == frozenset() and manager._subs.assignment() == set()
    assert manager.session_expiries == 1 and manager.generation == -1 and manager.member_id == ""


def test_a_sync_answered_late_while_heartbeats_were_answered_is_installed():
    """Heartbeats answered while SyncGroup was held (Kafka accepts them while the group completes the
    rebalance) renew the lease: a late SyncGroup answer then is the group's word, not a stale one."""
    manager, clock = sync_answered_after(SESSION + 500, heartbeat_ok_at=SESSION - 500)
    assert manager.machine.state == "stable" and manager.owned == {T0, T1}  # no listener: no callback
    assert manager.session_expiries == 0


def test_an_acknowledgement_after_the_member_went_fatal_is_ignored():
    """The held FencedInstanceIdError reaches the user, not an IllegalTransition from the background thread."""
    manager, clock = make(0)
    posted = []
    manager._callbacks._bg = SimpleNamespace(put=posted.append)
    manager._subs.listener = SimpleNamespace(
        on_partitions_assigned=lambda tps: None, on_partitions_revoked=lambda tps: None
    )
    manager.on_subscription_changed(clock.now_ms())
    join_round(manager, clock, 1, [T0], 0)
    assert manager.machine.state == "assigning_partitions"
    (callback,) = [e for e in posted if isinstance(e, CallbackEvent)]
    clock.advance(300)
    answer(sent(manager, clock, HeartbeatRequest), clock, error_code=82)  # FENCED_INSTANCE_ID
    assert manager.machine.state == "fatal"
    token = manager._callbacks._token
    manager.on_callback_ack(CallbackAckEvent(future=None, token=token), clock.now_ms())  # must not raise
    assert manager.machine.state == "fatal"
    with pytest.raises(ke.FencedInstanceIdError):
        manager._held.raise_first()


def test_partition_errors_held_are_released_with_the_partition():
    """An error held for a partition (OFFSET_OUT_OF_RANGE with no reset policy, a corrupt batch) goes when
    the assignment drops the partition: the user can no longer seek it to clear it."""
    manager, clock = stable_member()
    manager._held.hold(("partition", T1), ke.OffsetOutOfRangeError("t-1"))
    manager._held.hold(("partition", T0), ke.OffsetOutOfRangeError("t-0"))
    manager._held.hold(("group",), ke.GroupAuthorizationFailedError("kept"))
    clock.advance(300)
    answer(sent(manager, clock, HeartbeatRequest), clock, error_code=27)
    join_round(manager, clock, 2, [T0], 0)  # T1 revoked
    assert manager.owned == {T0}
    assert not manager._held.holds(("partition", T1))
    assert manager._held.holds(("partition", T0)) and manager._held.holds(("group",))


def test_the_manager_reads_heartbeats_requests_and_acks_from_the_spec():
    """No state-name sets beside the spec: every state of the spec has each attribute the manager reads."""
    from fsm_consumer.machines import shipped_spec

    spec = shipped_spec("membership")
    for name in ("heartbeat", "commit", "awaits", "request"):
        assert set(spec.attributes[name].of_state) == set(spec.states), name
    import fsm_consumer.managers._membership as module

    source = open(module.__file__).read()
    for state in ("syncing", "assigning_partitions", "revoking_then_leave", "partitions_revoked"):
        assert f'"{state}"' not in source, f"the manager names state {state!r}: read the spec's attributes"
    # the consumer protocol's member and its heartbeat exchange alike
    spec = shipped_spec("consumer_membership")
    for name in ("heartbeat", "epoch", "commit", "offset_fetch", "awaits"):
        assert set(spec.attributes[name].of_state) == set(spec.states), name
    import fsm_consumer.managers._consumer_heartbeat as exchange
    import fsm_consumer.managers._consumer_membership as member

    source = open(member.__file__).read() + open(exchange.__file__).read()
    for state in set(spec.states) - {"unsubscribed", "fatal", "stale"}:
        assert f'"{state}"' not in source, f"the manager names state {state!r}: read the spec's attributes"


def test_a_heartbeat_held_behind_a_sync_renews_from_when_the_loop_heard_it():
    """A broker that holds a connection (Tansu holds SyncGroup, and heartbeats queue behind it) answers a
    heartbeat long after it was sent; read by a loop that was not stalled, the answer counts from its
    arrival (the engine's bound, Pending.heard_after), not from the sending."""
    manager, clock = stable_member()
    clock.advance(300)
    heartbeat = sent(manager, clock, HeartbeatRequest)
    clock.advance(SESSION - 100)
    heard = clock.now_ms() - 200
    heartbeat.handler(
        SimpleNamespace(error=None, response=SimpleNamespace(error_code=0), heard_after=heard), clock.now_ms()
    )
    assert manager.machine.timer_deadline("session") == heard + SESSION
    clock.advance(1000)
    tick(manager, clock)
    assert manager.session_expiries == 0 and manager.owned == {T0, T1}


def test_the_engine_bounds_an_answer_read_after_a_stall_by_the_pass_before():
    from fsm_consumer.engine._network_thread import NetworkThread

    thread = NetworkThread.__new__(NetworkThread)
    thread._last_read = None
    assert thread._heard_after(1000.0, 1001.0, 1002.0, 50.0) == 1000.0  # first pass: from its start
    # a pass that ran as asked (waited 500 of 500 ms): the answer arrived within the last moments
    assert thread._heard_after(1010.0, 1011.0, 1511.0, 500.0) == 1511.0 - 200
    # frozen for 10 s inside the wait: it may have arrived any time since the pass before read
    assert thread._heard_after(1520.0, 1521.0, 11_600.0, 500.0) == 1511.0
    # frozen between passes (before the wait began)
    assert thread._heard_after(20_000.0, 20_001.0, 20_002.0, 0.0) == 11_600.0
