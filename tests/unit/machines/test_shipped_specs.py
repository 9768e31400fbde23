"""The shipped machines: every transition taken with a fake clock, plus the main stories."""

import pytest

from fsm_consumer.machines import FakeClock, IllegalTransition, SpecMachine, shipped_spec
from fsm_consumer.machines.testing import SpecDouble, cover_plan

MACHINES = [
    "background",
    "connection",
    "membership",
    "share_batch",
    "share_fetch_pacing",
    "share_membership",
    "share_session",
]


def machine(name, **kw):
    spec = shipped_spec(name)
    double = SpecDouble(spec)
    clock = FakeClock(1000)
    m = double.machine = SpecMachine(spec, double, clock=clock, **kw)
    return spec, double, m, clock


def step(m, double, clock, trigger, flags):
    """Fire ``trigger``; if it is a timeout of the current state, let the clock make it fire."""
    double.flags.clear()
    double.flags.update(flags)
    timeouts = {t.trigger: t.after for t in m.spec.states[m.state].timeouts}
    if trigger in timeouts:
        before = len(m.log)
        target = max(p[0] for p in m._pending if p[2] == trigger)
        for name in list(m._timer_due):  # timers spanning states (a session) kept alive, as heartbeats do
            m.restart_timer(name, target)
        deadline = m.next_deadline
        clock.set(deadline - 1)
        assert m.tick(clock.now_ms()) == 0
        clock.set(target)
        m.tick(clock.now_ms())
        assert len(m.log) == before + 1, f"timeout {trigger} did not fire"
    else:
        m.fire(trigger)


@pytest.mark.parametrize("name", MACHINES)
def test_every_transition(name):
    spec = shipped_spec(name)
    plan = cover_plan(spec)
    assert sorted(plan) == [t.index for t in spec.transitions], "some transitions can never be taken"
    for index, steps in plan.items():
        _, double, m, clock = machine(name)
        before = 0
        for trigger, flags in steps:
            before = len(m.log)
            step(m, double, clock, trigger, flags)
        t = spec.transitions[index]
        # the last step's records: the transition, then the one leaving a state declared at_once, if it entered one
        taken = list(m.log)[before:]
        first = next(r for r in taken if (r.index, r.trigger) == (index, t.trigger))
        dest = t.dest_from(first.source)
        at_once = spec.states[dest].at_once
        assert m.state == (dest if at_once is None else taken[-1].dest)
        assert at_once is None or taken[-1].trigger == at_once


@pytest.mark.parametrize("name", MACHINES)
def test_every_timeout_is_a_dashed_exit(name):
    spec = shipped_spec(name)
    for st in spec.states.values():
        for to in st.timeouts:
            assert to.after in spec.durations


def test_background_lifecycle_with_rediscovery_and_close():
    _, d, m, clock = machine("background", config={"retry_backoff_ms": 50, "request_timeout_ms": 500})
    m.fire("start")
    m.fire("coordinator_needed")
    assert d.calls == ["send_find_coordinator"]
    m.fire("discovery_failed")
    assert m.state == "discovery_backoff" and m.next_deadline == clock.now_ms() + 50
    clock.advance(50)
    m.tick(clock.now_ms())
    assert m.state == "coordinator_discovery" and d.calls.count("send_find_coordinator") == 2
    clock.advance(500)
    m.tick(clock.now_ms())  # no answer within request_timeout_ms
    assert m.state == "discovery_backoff"
    clock.advance(50)
    m.tick(clock.now_ms())
    m.fire("coordinator_found")
    assert m.state == "stable" and d.calls[-1] == "coordinator_ready"
    m.fire("coordinator_lost")
    assert m.state == "coordinator_discovery" and "coordinator_unusable" in d.calls
    m.fire("coordinator_found")
    d.computed["close_budget"] = 200  # close(timeout_ms=...) leaves 200 ms
    m.fire("close")
    assert m.state == "closing" and m.next_deadline == clock.now_ms() + 200
    clock.advance(200)
    m.tick(clock.now_ms())
    assert m.state == "closed" and m.is_terminal and d.calls[-1] == "finish_close"
    with pytest.raises(IllegalTransition):
        m.fire("start")


def test_background_close_before_start_and_crash():
    _, d, m, _ = machine("background")
    m.fire("close")
    assert m.state == "closed"
    _, d, m, _ = machine("background")
    m.fire("start")
    m.fire("crash")
    assert m.state == "failed" and d.calls == ["record_failure"]


def test_connection_tls_sasl_ready_then_error_backoff():
    _, d, m, clock = machine("connection", config={"reconnect_backoff_ms": 50})
    d.flags.update(uses_tls=True, uses_sasl=True)
    for trig in ["connect", "connected", "tls_heard", "tls_established", "versions_known", "authenticated"]:
        m.fire(trig)
    assert m.state == "ready"
    assert d.calls == [
        "start_connect",
        "start_tls",
        "tls_silence_ms",
        "send_api_versions",
        "start_sasl",
        "connection_ready",
    ]
    d.computed["reconnect_backoff"] = 80  # the model's exponential step with jitter
    m.fire("io_error")
    assert m.state == "backoff" and m.next_deadline == clock.now_ms() + 80
    assert d.calls[-3:] == ["close_socket", "fail_in_flight", "next_reconnect_backoff_ms"]
    clock.advance(80)
    m.tick(clock.now_ms())
    assert m.state == "disconnected"


def test_connection_silence_to_the_client_hello_is_an_authentication_failure():
    _, d, m, clock = machine("connection", config={"tls_silence_timeout_ms": 700})
    d.flags.update(uses_tls=True)
    m.fire("connect")
    m.fire("connected")
    assert m.state == "tls_hello"
    clock.advance(699)
    m.tick(clock.now_ms())
    assert m.state == "tls_hello"
    clock.advance(1)
    m.tick(clock.now_ms())
    assert m.state == "backoff" and m.log[-1].trigger == "tls_silent" and "note_silent_listener" in d.calls


def test_connection_plaintext_skips_tls_and_sasl():
    _, d, m, _ = machine("connection")
    for trig in ["connect", "connected", "versions_known"]:
        m.fire(trig)
    assert m.state == "ready" and "start_tls" not in d.calls and "start_sasl" not in d.calls


def test_connection_authentication_failure_backs_off():
    _, d, m, _ = machine("connection")
    d.flags.update(uses_sasl=True)
    for trig in ["connect", "connected", "versions_known", "authentication_failed"]:
        m.fire(trig)
    assert m.state == "backoff" and "note_authentication_failure" in d.calls


def test_connection_connect_timeout():
    _, d, m, clock = machine("connection", config={"socket_connection_setup_timeout_ms": 300})
    m.fire("connect")
    clock.advance(299)
    m.tick(clock.now_ms())
    assert m.state == "connecting"
    clock.advance(1)
    m.tick(clock.now_ms())
    assert m.state == "backoff"


def test_membership_eager_rebalance():
    _, d, m, _ = machine("membership")
    for trig in ["join_requested", "joined", "synced", "assign_acked"]:
        m.fire(trig)
    assert m.state == "stable"
    d.flags.update(eager_protocol=True)
    m.fire("rejoin_needed")
    assert m.state == "prepare_revocation"
    m.fire("revocation_prepared")  # the Java client's order: commit, callback, release
    assert m.state == "committing_revoked" and d.calls[-1] == "commit_revoked"
    m.fire("revocation_completed")
    assert m.state == "revoking_partitions" and d.calls[-1] == "request_revoke_callback"
    m.fire("revoke_acked")
    assert m.state == "joining" and "release_revoked" in d.calls[-3:]


def test_membership_cooperative_two_rounds():
    _, d, m, _ = machine("membership")
    for trig in ["join_requested", "joined", "synced", "assign_acked"]:
        m.fire(trig)
    m.fire("rejoin_needed")  # cooperative: keeps partitions, straight to joining
    assert m.state == "joining"
    m.fire("joined")
    d.flags.update(must_revoke=True)
    m.fire("synced")
    assert m.state == "prepare_revocation"
    d.flags.clear()
    m.fire("revocation_prepared")
    m.fire("revocation_completed")
    m.fire("revoke_acked")
    assert m.state == "assigning_partitions"
    d.flags.update(rejoin_after_assign=True)
    m.fire("assign_acked")
    assert m.state == "joining"


def test_membership_revocation_timeout_leaves_then_loses_and_rejoins():
    """Seed 000's open question, as the spec answers it."""
    _, d, m, clock = machine("membership", config={"max_poll_interval_ms": 5000})
    for trig in ["join_requested", "joined", "synced", "assign_acked"]:
        m.fire(trig)
    d.flags.update(eager_protocol=True)
    m.fire("rejoin_needed")
    m.fire("revocation_prepared")
    m.fire("revocation_completed")
    clock.advance(4999)
    m.tick(clock.now_ms())
    assert m.state == "revoking_partitions"
    clock.advance(1)
    m.tick(clock.now_ms())
    assert m.state == "stale" and d.calls[-1] == "leave_as_stale"
    assert not m.may("revoke_acked")  # a late acknowledgement has nowhere to go
    m.fire("poll_resumed")
    assert m.state == "fenced" and d.calls[-2:] == ["drop_membership", "request_lost_callback"]
    d.flags.clear()
    m.fire("lost_acked")
    assert m.state == "joining"


def test_membership_leave_with_partitions_revokes_first():
    _, d, m, _ = machine("membership")
    for trig in ["join_requested", "joined", "synced", "assign_acked"]:
        m.fire(trig)
    d.flags.update(owns_partitions=True)
    m.fire("leave_requested")  # commit, then the callback, then the release, then the leave
    assert m.state == "leave_committing" and d.calls[-1] == "request_leave_commit"
    m.fire("revocation_completed")
    assert m.state == "leave_revoking" and d.calls[-1] == "request_revoke_callback"
    m.fire("revoke_acked")
    assert m.state == "leaving" and d.calls[-2:] == ["release_revoked", "send_leave_group"]
    m.fire("left")
    assert m.state == "unjoined"


@pytest.mark.parametrize(
    "waiting, ack",
    [
        ("revoking_partitions", "revoke_acked"),
        ("assigning_partitions", "assign_acked"),
        ("committing_revoked", "revocation_completed"),
        ("fenced", "lost_acked"),
    ],
)
def test_membership_leave_during_a_callback_is_never_lost(waiting, ack):
    """close()/unsubscribe() while a callback or commit is awaited: the wait finishes, then the leave."""
    _, d, m, _ = machine("membership")
    routes = {
        "revoking_partitions": [
            "join_requested",
            "joined",
            "synced",
            "assign_acked",
            "rejoin_needed",
            "revocation_prepared",
            "revocation_completed",
        ],
        "assigning_partitions": ["join_requested", "joined", "synced"],
        "committing_revoked": [
            "join_requested",
            "joined",
            "synced",
            "assign_acked",
            "rejoin_needed",
            "revocation_prepared",
        ],
        "fenced": ["join_requested", "fenced_error"],
    }
    d.flags.update(eager_protocol=True)
    for trig in routes[waiting]:
        m.fire(trig)
    assert m.state == waiting
    d.flags.update(owns_partitions=False)
    m.fire("leave_requested")
    assert m.state.endswith("_then_leave")
    m.fire("rejoin_needed")  # declared ignorable while leaving: no error, no change
    m.fire("join_requested")
    assert m.state.endswith("_then_leave")
    m.fire(ack)
    if waiting == "committing_revoked":  # the rebalance's commit done: everything owned committed, revoked
        assert m.state == "leave_committing" and d.calls[-1] == "request_leave_commit"
        m.fire("revocation_completed")
        assert m.state == "leave_revoking"
        m.fire("revoke_acked")
    assert m.state == "leaving" and d.calls[-1] == "send_leave_group"


def test_membership_session_timer_spans_states_and_restarts():
    _, d, m, clock = machine("membership", config={"session_timeout_ms": 6000, "max_poll_interval_ms": 600000})
    m.fire("join_requested")
    # the lease runs while JoinGroup and SyncGroup are in flight too (issue 23): armed on joining
    assert m.timer_deadline("session") == clock.now_ms() + 6000
    clock.advance(2000)
    m.fire("joined")
    m.restart_timer("session", clock.now_ms() - 2000)  # the model: from when JoinGroup was sent
    assert m.timer_deadline("session") == clock.now_ms() + 4000
    m.fire("synced")
    assert m.timer_deadline("session") == clock.now_ms() + 4000  # not re-armed by a state change
    clock.advance(3000)
    m.fire("assign_acked")
    assert m.state == "stable" and m.timer_deadline("session") == clock.now_ms() + 1000
    m.restart_timer("session", clock.now_ms())  # a heartbeat answered
    clock.advance(5999)
    assert m.tick(clock.now_ms()) == 0
    clock.advance(1)
    m.tick(clock.now_ms())
    assert m.state == "fenced" and "note_session_expired" in d.calls
    assert m.timer_deadline("session") is None  # fenced is outside the session: disarmed


@pytest.mark.parametrize("owns", [True, False])
def test_membership_lease_expires_while_rejoining_only_with_partitions(owns):
    """A cooperative member rejoining keeps its partitions; its lease runs on while JoinGroup is in
    flight, and on expiry they are lost. With nothing owned the expiry changes nothing (an internal
    transition): the JoinGroup in flight carries the membership."""
    _, d, m, clock = machine("membership", config={"session_timeout_ms": 6000})
    d.flags["owns_partitions"] = owns
    m.fire("join_requested")
    visit = m.visit
    clock.advance(6000)
    assert m.tick(clock.now_ms()) == 1
    if owns:
        assert m.state == "fenced" and "note_session_expired" in d.calls
    else:
        assert m.state == "joining" and m.visit == visit and d.calls.count("send_join_group") == 1
        assert m.timer_deadline("session") is None
        m.restart_timer("session", clock.now_ms())  # a JoinGroup answer arms it again
        assert m.timer_deadline("session") == clock.now_ms() + 6000


def test_membership_fatal_from_anywhere():
    _, d, m, _ = machine("membership")
    m.fire("join_requested")
    m.fire("fatal_error")
    assert m.state == "fatal" and m.is_terminal
