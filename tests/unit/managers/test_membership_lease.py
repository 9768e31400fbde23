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

from .test_membership_rounds import T0, T1, answer, answer_join, join_round, make, polled, sent

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


def first_join_answered(delay_ms: int, generation: int):
    """A member (follower sync delay ``delay_ms``) whose first JoinGroup was answered at once: a follower of
    ``generation``, nothing owned, syncing."""
    manager, clock = make(delay_ms)
    manager.on_subscription_changed(clock.now_ms())
    answer_join(sent(manager, clock, JoinGroupRequest), clock, generation)
    return manager, clock


def sync_answered_after(ms: float, heartbeat_ok_at: float | None = None, *, tick_first: bool = True):
    """A first join (nothing owned) answered at once; its SyncGroup answered ``ms`` later (a member frozen
    with the answer waiting in its socket); with ``heartbeat_ok_at``, a heartbeat sent that long after the
    SyncGroup was answered OK before it. ``tick_first``: the loop ticks the machines before it reads the
    answer (as after a thaw); else the answer is read first (the member froze inside its wait for it)."""
    manager, clock = first_join_answered(0, 2)
    sync = sent(manager, clock, SyncGroupRequest)
    if heartbeat_ok_at is not None:
        clock.advance(heartbeat_ok_at)
        answer(sent(manager, clock, HeartbeatRequest), clock, error_code=0)  # the group still has it
        clock.advance(ms - heartbeat_ok_at)
    else:
        clock.advance(ms)
    if tick_first:
        tick(manager, clock)
    answer(sync, clock, error_code=0, assignment=encode_assignment(Assignment(partitions=[T0, T1])))
    return manager, clock


def test_a_sync_answer_read_after_the_session_ran_out_is_not_installed():
    """Found by the history checker's timeline: a member frozen while its SyncGroup was in flight woke,
    took the answer (an old generation's) and owned partitions the group had given to another member.
    Now the membership is dropped and the member rejoins, no callback runs, nothing is owned: the answer
    renews the lease only from its request's sending, whether the loop ticked first (the session ran out:
    internal, the SyncGroup carries the membership) or read the answer first."""
    for tick_first in (True, False):
        manager, clock = sync_answered_after(2 * SESSION, tick_first=tick_first)
        steps = [(r.source, r.trigger, r.dest) for r in manager.machine.log][-2:]
        assert steps == [("syncing", "synced", "fenced"), ("fenced", "lost_acked", "joining")]  # rejoins
        assert manager.owned == frozenset() and manager._subs.assignment() == set()
        assert manager.session_expiries == 1 and manager.generation == -1 and manager.member_id == ""


def syncs(manager, clock) -> list:
    """The SyncGroup requests the member's poll sends now."""
    return [o for o in polled(manager, clock)[1] if isinstance(o.request, SyncGroupRequest)]


def test_a_member_frozen_before_its_delayed_sync_group_went_out_joins_again():
    """Found by the history checker (issue 46) on Tansu: a follower holds its SyncGroup back
    (follower_sync_delay_ms), freezes meanwhile past its session, and on waking sent the SyncGroup of its old
    generation; Tansu answered it with that generation's assignment, and the member owned partitions the group
    had given to another in a newer round. The session running out while syncing ends the round: the member
    joins again, and no SyncGroup of the old generation goes out."""
    manager, clock = first_join_answered(400, 3)
    assert manager.machine.state == "syncing" and not syncs(manager, clock)  # held back 400 ms
    clock.advance(2 * SESSION)  # frozen before the delay ran out
    manager.machine.tick(clock.now_ms())
    assert manager.machine.state == "joining" and manager.session_expiries == 1
    out = [o.request for o in polled(manager, clock)[1]]
    assert any(isinstance(r, JoinGroupRequest) for r in out) and not any(isinstance(r, SyncGroupRequest) for r in out)


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
    thread._last_read, thread._stall_bound = None, None
    assert thread._heard_after(1000.0, 1001.0, 1002.0, 50.0) == 1000.0  # first pass: from its start
    # a pass that ran as asked (waited 500 of 500 ms): the answer arrived within the last moments
    assert thread._heard_after(1010.0, 1011.0, 1511.0, 500.0) == 1511.0 - 200
    # frozen for 10 s inside the wait: it may have arrived any time since the pass before read
    assert thread._heard_after(1520.0, 1521.0, 11_600.0, 500.0) == 1511.0
    # the pass after it, run as asked, may read what a request queued before the freeze brought back only then
    assert thread._heard_after(11_601.0, 11_602.0, 11_700.0, 100.0) == 1511.0
    assert thread._heard_after(11_701.0, 11_702.0, 11_800.0, 100.0) == 11_800.0 - 200  # and then no more
    # frozen between passes (before the wait began)
    assert thread._heard_after(20_000.0, 20_001.0, 20_002.0, 0.0) == 11_800.0


def test_the_poll_interval_runs_while_a_rebalance_callback_waits_to_run():
    """As Java: max_poll_interval_ms is counted from the last poll() in every state but leaving. It was not
    while a callback was awaited (its own timeout, counted from when it was asked, governed): with a 3 s
    interval a member left 4.99 s after its last poll."""
    manager, clock = make(0, max_poll_interval_ms=3000, partition_assignment_strategy=["range"])
    posted = []
    manager._callbacks._bg = SimpleNamespace(put=posted.append)
    manager._subs.listener = SimpleNamespace(
        on_partitions_assigned=lambda tps: None, on_partitions_revoked=lambda tps: None
    )
    manager.on_subscription_changed(clock.now_ms())
    join_round(manager, clock, 1, [T0], 0)
    manager.on_callback_ack(CallbackAckEvent(future=None, token=manager._callbacks._token), clock.now_ms())
    assert manager.machine.state == "stable"
    last_poll = clock.now_ms()
    manager.on_app_poll(last_poll)
    clock.advance(2000)
    answer(sent(manager, clock, HeartbeatRequest), clock, error_code=27)  # a rebalance: eager revokes first
    assert (
        manager.machine.state == "revoking_partitions"
    )  # nothing to commit (auto-commit off)  # the callback waits for a poll() that never comes
    clock.advance(999)
    tick(manager, clock)
    assert manager.machine.state == "revoking_partitions"
    clock.advance(1)
    tick(manager, clock)
    assert manager.machine.state == "stale" and clock.now_ms() - last_poll == 3000


def test_a_member_that_goes_fatal_tells_the_listener_its_partitions_are_lost():
    """As Java (transitionToFatal): the assignment is released and on_partitions_lost runs (nothing waits for
    it: fatal is final); before, the partitions stayed assigned and the listener was never told."""
    manager, clock = stable_member()
    posted = []
    manager._callbacks._bg = SimpleNamespace(put=posted.append)
    lost = []
    manager._subs.listener = SimpleNamespace(on_partitions_lost=lost.append)
    clock.advance(300)
    answer(sent(manager, clock, HeartbeatRequest), clock, error_code=82)  # FENCED_INSTANCE_ID
    assert manager.machine.state == "fatal" and manager.owned == frozenset()
    (event,) = [e for e in posted if isinstance(e, CallbackEvent)]
    assert event.fn == lost.append and event.args == ({T0, T1},)
