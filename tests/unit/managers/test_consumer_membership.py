"""ConsumerMembershipManager (KIP-848) driven by hand with a fake clock: heartbeats out of poll(now), the
coordinator's answers into their handlers, rebalance callbacks acknowledged as the application thread would.

No broker, no threads: the coordinator, the metadata and the commit manager are stand-ins holding only what
the member reads. The broker-side behaviour is proven against Apache Kafka in tests/integration/kip848.
"""

from __future__ import annotations

import queue
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import kafka.errors as ke
import pytest
from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

from fsm_consumer._config import ConsumerConfig
from fsm_consumer._metrics import Metrics
from fsm_consumer.events import CallbackEvent
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.machines import FakeClock
from fsm_consumer.managers import ConsumerMembershipManager
from fsm_consumer.protocol import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from fsm_consumer.state import HeldErrors, SubscriptionState
from fsm_consumer.transport import UnsupportedVersion

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the stand-ins beside this file
from stand_ins import Coordinator  # noqa: E402

TOPIC_ID = uuid.UUID("5b0d3a7e-0000-4000-8000-000000000001")
T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


class Commits:
    """The commit manager as a revocation reads it: each commit's positions and on_done kept."""

    def __init__(self) -> None:
        self.sent: list = []

    def commit_positions(self, positions, on_done):
        self.sent.append((dict(positions), on_done))


class Listener:
    def __init__(self) -> None:
        self.calls: list = []

    def on_partitions_revoked(self, tps):
        self.calls.append(("revoked", sorted(tp.partition for tp in tps)))

    def on_partitions_assigned(self, tps):
        self.calls.append(("assigned", sorted(tp.partition for tp in tps)))

    def on_partitions_lost(self, tps):
        self.calls.append(("lost", sorted(tp.partition for tp in tps)))


def make(listener=None, **overrides):
    settings = dict(
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        client_id="c",
        group_protocol="consumer",
        max_poll_interval_ms=60_000,
    )
    config = ConsumerConfig.from_kwargs(**{**settings, **overrides})
    clock = FakeClock(1_000)
    subs = SubscriptionState()
    subs.subscribe(["t"], listener=listener)
    metadata = SimpleNamespace(
        version=1,
        all_topics_wanted=False,
        request_update=lambda topics=None, all_topics=False: None,
        topics={"t": SimpleNamespace(leaders={0: 7, 1: 7, 2: 7}, internal=False, topic_id=str(TOPIC_ID))},
    )
    background = queue.Queue()
    member = ConsumerMembershipManager(
        config,
        subscription=subs,
        metadata=metadata,
        coordinator=Coordinator(),
        commits=Commits(),
        background_events=background,
        post_app_event=lambda event: member.on_callback_ack(event, clock.now_ms()),
        metrics=Metrics(),
        held=HeldErrors(),
    )
    member.background = background
    return member, clock


SESSION_MS = 10_000  # the group's session timeout the broker gives (DescribeConfigs)


def describe_answer(outgoing, clock, session_ms=SESSION_MS, error_code=0):
    R = DescribeConfigsResponse
    configs = (
        []
        if session_ms is None
        else [
            R.DescribeConfigsResult.DescribeConfigsResourceResult(
                name="consumer.session.timeout.ms",
                value=str(session_ms),
                read_only=False,
                config_source=5,
                is_sensitive=False,
                synonyms=[],
                config_type=3,
                documentation=None,
            )
        ]
    )
    result = R.DescribeConfigsResult(
        error_code=error_code, error_message=None, resource_type=32, resource_name="g", configs=configs
    )
    response = R(version=4, throttle_time_ms=0, results=[result])
    outgoing.handler(SimpleNamespace(error=None, response=response), clock.now_ms())


def heartbeat(member, clock, session_ms=SESSION_MS):
    """Poll once: the one heartbeat it sends (the lookup of the group's session timeout, when it asks,
    answered at once with ``session_ms``)."""
    _, out = member.poll(clock.now_ms())
    lookups = [o for o in out if isinstance(o.request, DescribeConfigsRequest)]
    for lookup in lookups:
        (resource,) = lookup.request.resources
        assert resource.resource_type == 32 and resource.resource_name == "g"
        describe_answer(lookup, clock, session_ms)
    out = [o for o in out if o not in lookups]
    assert len(out) == 1, (member.machine.state, out)
    assert isinstance(out[0].request, ConsumerGroupHeartbeatRequest)
    return out[0]


def nothing_sent(member, clock) -> bool:
    return member.poll(clock.now_ms())[1] == []


def answer(outgoing, clock, epoch, partitions=None, error_code=0, interval=500):
    assignment = None
    if partitions is not None:
        assignment = ConsumerGroupHeartbeatResponse.Assignment(
            topic_partitions=[
                ConsumerGroupHeartbeatResponse.Assignment.TopicPartitions(topic_id=TOPIC_ID, partitions=partitions)
            ]
        )
    response = ConsumerGroupHeartbeatResponse(
        version=1,
        throttle_time_ms=0,
        error_code=error_code,
        error_message=None,
        member_id=None,
        member_epoch=epoch,
        heartbeat_interval_ms=interval,
        assignment=assignment,
    )
    outgoing.handler(SimpleNamespace(error=None, response=response), clock.now_ms())


def run_callbacks(member, clock):
    """The application thread: run every callback posted, in order (each acknowledges itself back)."""
    while not member.background.empty():
        event = member.background.get_nowait()
        assert isinstance(event, CallbackEvent)
        event.fn(*event.args)
        event.ack(None)


def owned_in(request) -> list[int] | None:
    if request.topic_partitions is None:
        return None
    return sorted(p for t in request.topic_partitions for p in t.partitions)


def joined(member, clock, partitions, epoch=1):
    member.on_subscription_changed(clock.now_ms())
    join = heartbeat(member, clock)
    answer(join, clock, epoch, partitions)
    run_callbacks(member, clock)
    ack = heartbeat(member, clock)  # acknowledging: sent at once with what it now owns
    assert owned_in(ack.request) == sorted(partitions)
    answer(ack, clock, epoch)
    assert member.machine.state == "stable" and member.owned == {TopicPartition("t", p) for p in partitions}
    return join


def test_joins_with_a_full_heartbeat_reconciles_acknowledges_then_sends_only_what_changed():
    listener = Listener()
    member, clock = make(listener, group_remote_assignor="uniform", client_rack="r1")
    join = joined(member, clock, [0, 1])
    request = join.request
    assert request.member_epoch == 0 and request.member_id == member.member_id and request.member_id
    assert request.subscribed_topic_names == ["t"] and request.rebalance_timeout_ms == 60_000
    assert request.server_assignor == "uniform" and request.rack_id == "r1" and owned_in(request) == []
    assert listener.calls == [("assigned", [0, 1])]
    assert member.generation == 1 and member.assignment_epoch == 1
    # the interval the coordinator returned paces the heartbeats, which now carry only what changed
    assert nothing_sent(member, clock)
    clock.advance(499)
    member.machine.tick(clock.now_ms())
    assert nothing_sent(member, clock)
    clock.advance(1)
    member.machine.tick(clock.now_ms())
    beat = heartbeat(member, clock).request
    assert beat.member_epoch == 1 and beat.subscribed_topic_names is None and beat.topic_partitions is None
    assert beat.rebalance_timeout_ms == -1 and beat.server_assignor is None


def test_a_new_target_during_a_revocation_is_reconciled_after_the_acknowledgement_without_doubled_callbacks():
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0, 1])
    listener.calls.clear()
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    answer(heartbeat(member, clock), clock, 2, [0])  # T1 goes: nothing to commit (no position)
    assert member.machine.state == "revoking"  # on_partitions_revoked posted, not yet run
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    answer(heartbeat(member, clock), clock, 3, [0, 2])  # meanwhile: T2 comes
    assert member.machine.state == "revoking"  # kept, not acted on
    run_callbacks(member, clock)
    # the revocation committed nothing (no positions); the assignment toward epoch 2's target added nothing
    assert member.machine.state == "acknowledging"
    ack = heartbeat(member, clock)
    assert owned_in(ack.request) == [0]
    # once the acknowledgement went out the member reconciles toward the newest target at once
    run_callbacks(member, clock)
    assert member.machine.state == "acknowledging" and member.owned == {T0, T2}
    answer(ack, clock, 3)
    ack2 = heartbeat(member, clock)
    assert owned_in(ack2.request) == [0, 2]
    assert member.machine.state == "stable"
    # on_partitions_assigned runs for every reconciliation, with nothing added too (as Java)
    assert listener.calls == [("revoked", [1]), ("assigned", []), ("assigned", [2])]


def test_the_revoked_partitions_are_committed_then_called_back_then_released():
    """The Java client's order: the auto-commit of the partitions to give up goes out while they are still the
    member's, then on_partitions_revoked runs (a commit of its own wins), and only then are they released.
    Until then every heartbeat lists them, so the coordinator cannot give them to another member while the
    commit is in flight (a new owner once re-read below a commit that landed after it had started)."""
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0, 1])
    listener.calls.clear()
    member._subs.seek(T1, 42)
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    answer(heartbeat(member, clock), clock, 2, [0])
    assert member.machine.state == "committing_revoked" and member.background.empty()  # no callback yet
    ((positions, done),) = member._commits.sent
    assert positions == {T1: 42} and member.owned == {T0, T1}
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    beat_ = heartbeat(member, clock)  # the commit held: the heartbeat says nothing has changed
    assert beat_.request.topic_partitions is None and member.owned == {T0, T1}
    answer(beat_, clock, 2)
    done(None)
    assert member.machine.state == "revoking" and member.owned == {T0, T1}
    run_callbacks(member, clock)
    assert listener.calls == [("revoked", [1]), ("assigned", [])] and member.owned == {T0}
    assert member.machine.state == "acknowledging"
    assert owned_in(heartbeat(member, clock).request) == [0]


@pytest.mark.parametrize("code", [110, 25])  # FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID
def test_fenced_loses_its_partitions_and_rejoins_at_epoch_zero_with_the_same_id(code):
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0, 1])
    member_id = member.member_id
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    answer(heartbeat(member, clock), clock, 1, error_code=code)
    assert member.machine.state == "fenced"
    run_callbacks(member, clock)
    assert listener.calls[-1] == ("lost", [0, 1]) and member.owned == frozenset()
    assert member.machine.state == "joining"
    rejoin = heartbeat(member, clock).request
    assert rejoin.member_epoch == 0 and rejoin.member_id == member_id and rejoin.subscribed_topic_names == ["t"]


def test_a_broker_without_the_consumer_protocol_is_a_fatal_error_naming_the_fix():
    member, clock = make()
    member.on_subscription_changed(clock.now_ms())
    join = heartbeat(member, clock)
    join.handler(
        SimpleNamespace(
            error=UnsupportedVersion("broker does not support ConsumerGroupHeartbeatRequest", api_key=68), response=None
        ),
        clock.now_ms(),
    )
    assert member.machine.state == "fatal"
    assert isinstance(member.fatal, ke.UnsupportedVersionError)
    assert "group_protocol='classic'" in str(member.fatal)
    with pytest.raises(ke.UnsupportedVersionError):
        member._held.raise_first()


@pytest.mark.parametrize("static, epoch", [(False, -1), (True, -2)])
def test_close_revokes_commits_then_leaves_with_the_leave_epoch(static, epoch):
    listener = Listener()
    member, clock = make(listener, **({"group_instance_id": "i1"} if static else {}))
    joined(member, clock, [0, 1])
    member.begin_close(autocommit=True)
    assert member.machine.state == "prepare_leaving"
    run_callbacks(member, clock)
    assert listener.calls[-1] == ("revoked", [0, 1])
    assert member.machine.state == "leaving"
    leave = heartbeat(member, clock)
    assert leave.request.member_epoch == epoch
    assert not member.close_done
    answer(leave, clock, epoch)
    assert member.machine.state == "unsubscribed" and member.close_done


def test_a_member_that_stops_polling_leaves_and_loses_its_partitions_when_polled_again():
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0])
    for _ in range(120):  # heartbeats go on while the application does not poll
        clock.advance(500)
        member.machine.tick(clock.now_ms())
        if member.machine.state != "stable":
            break
        answer(heartbeat(member, clock), clock, 1)
    assert member.machine.state == "stale"
    leave = heartbeat(member, clock)
    assert leave.request.member_epoch == -1
    member.on_app_poll(clock.now_ms())
    run_callbacks(member, clock)
    assert listener.calls[-1] == ("lost", [0]) and member.machine.state == "joining"


def test_a_late_acknowledgement_of_an_abandoned_callback_is_ignored():
    listener = Listener()
    member, clock = make(listener)
    member.on_subscription_changed(clock.now_ms())
    answer(heartbeat(member, clock), clock, 1, [0])
    assert member.machine.state == "assigning"  # on_partitions_assigned posted, not yet run
    assigned = member.background.get_nowait()
    member.machine.fire("fenced_error", clock.now_ms())  # as a heartbeat answered FENCED_MEMBER_EPOCH
    assert member.machine.state == "fenced"  # now waiting for on_partitions_lost
    assigned.fn(*assigned.args)
    assigned.ack(None)  # the abandoned callback finishes late: dropped
    assert member.machine.state == "fenced"
    run_callbacks(member, clock)  # on_partitions_lost
    assert member.machine.state == "joining"
    assert listener.calls == [("assigned", [0]), ("lost", [0])]


def beat(member, clock, epoch, partitions=None, error_code=0):
    """The heartbeat timer runs out; the heartbeat goes and is answered."""
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    answer(heartbeat(member, clock), clock, epoch, partitions, error_code=error_code)


def steps(member) -> list[tuple[str, str, str]]:
    return [(r.source, r.trigger, r.dest) for r in member.machine.log]


def test_a_join_answered_without_an_assignment_is_stable_until_one_comes():
    member, clock = make(Listener())
    member.on_subscription_changed(clock.now_ms())
    answer(heartbeat(member, clock), clock, 1)
    assert member.machine.state == "stable" and member.owned == frozenset()
    beat(member, clock, 2, [2])
    run_callbacks(member, clock)
    assert member.machine.state == "acknowledging" and member.owned == {T2}


@pytest.mark.parametrize("waiting", ["revoking", "assigning"])
def test_a_callback_that_outlives_the_rebalance_timeout_makes_the_member_stale(waiting):
    member, clock = make(Listener())
    if waiting == "revoking":
        joined(member, clock, [0, 1])
        beat(member, clock, 2, [0])
    else:
        member.on_subscription_changed(clock.now_ms())
        answer(heartbeat(member, clock), clock, 1, [0])
    assert member.machine.state == waiting  # the callback posted and never run
    clock.advance(60_000)  # max_poll_interval_ms: the rebalance timeout
    member.machine.tick(clock.now_ms())
    assert member.machine.state == "stale"
    assert heartbeat(member, clock).request.member_epoch == -1


def test_leaving_with_nothing_owned_sends_the_leave_at_once_and_a_new_subscription_rejoins():
    member, clock = make(Listener())
    member.on_subscription_changed(clock.now_ms())
    answer(heartbeat(member, clock), clock, 1)
    member.on_unsubscribe(clock.now_ms())
    assert member.machine.state == "leaving"
    leave = heartbeat(member, clock)
    member.on_subscription_changed(clock.now_ms())  # subscribe() again came first
    answer(leave, clock, -1)
    assert member.machine.state == "joining" and heartbeat(member, clock).request.member_epoch == 0


def test_unsubscribe_leaves_for_good_while_the_subscription_is_still_set():
    """The review's case: the application thread clears the subscription only once unsubscribe() completed,
    and the leave saw it still set and rejoined (unsubscribe() raised after 60 s, the consumer still a member).
    The intent is recorded on the background thread with the event."""
    member, clock = make(Listener())
    member.on_subscription_changed(clock.now_ms())
    answer(heartbeat(member, clock), clock, 1)
    member.on_unsubscribe(clock.now_ms())
    answer(heartbeat(member, clock), clock, -1)
    assert member.machine.state == "unsubscribed" and member.close_done and nothing_sent(member, clock)


def test_leaving_during_a_revocation_finishes_it_then_revokes_the_rest():
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0, 1])
    beat(member, clock, 2, [0])
    assert member.machine.state == "revoking"
    member.begin_close(autocommit=True)
    assert member.machine.state == "revoking_then_leave"
    run_callbacks(member, clock)  # the revocation's callback, then the leave's for what is left
    assert ("revoking_then_leave", "revoke_acked", "leave_committing") in steps(member)
    assert ("prepare_leaving", "revoke_acked", "leaving") in steps(member)
    assert listener.calls[-2:] == [("revoked", [1]), ("revoked", [0])]
    answer(heartbeat(member, clock), clock, -1)
    assert member.machine.state == "unsubscribed"


def test_leaving_during_a_revocation_of_everything_leaves_once_it_is_called_back():
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0, 1])
    beat(member, clock, 2, [])  # the broker takes everything back
    assert member.machine.state == "revoking"
    member.begin_close(autocommit=True)
    assert member.machine.state == "revoking_then_leave"
    run_callbacks(member, clock)  # the revocation's callback; nothing is left to revoke
    assert ("revoking_then_leave", "revoke_acked", "leaving") in steps(member)
    assert listener.calls[-1] == ("revoked", [0, 1]) and ("revoked", [0]) not in listener.calls
    answer(heartbeat(member, clock), clock, -1)
    assert member.machine.state == "unsubscribed"


@pytest.mark.parametrize("keeps", [[0], []])
def test_leaving_while_the_revoked_partitions_commit_is_in_flight_waits_for_it(keeps):
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0, 1])
    listener.calls.clear()
    member._subs.seek(T1, 7)
    member._subs.seek(T0, 3)
    beat(member, clock, 2, keeps)
    assert member.machine.state == "committing_revoked"
    member.begin_close(autocommit=True)
    assert member.machine.state == "committing_then_leave"
    member._commits.sent[0][1](None)
    # then everything still owned, the reconciliation's partitions too, is committed and revoked at once
    assert ("committing_then_leave", "revocation_completed", "leave_committing") in steps(member)
    assert member._commits.sent[1][0] == {T0: 3, T1: 7}
    member._commits.sent[1][1](None)
    run_callbacks(member, clock)
    assert listener.calls == [("revoked", [0, 1])] and member.machine.state == "leaving"


def test_leaving_during_an_assignment_finishes_it_then_revokes_everything():
    listener = Listener()
    member, clock = make(listener)
    member.on_subscription_changed(clock.now_ms())
    answer(heartbeat(member, clock), clock, 1, [0, 1])
    assert member.machine.state == "assigning"
    member.begin_close(autocommit=False)
    assert member.machine.state == "assigning_then_leave"
    run_callbacks(member, clock)
    assert listener.calls == [("assigned", [0, 1]), ("revoked", [0, 1])]
    assert member.machine.state == "leaving"


@pytest.mark.parametrize("waiting", ["revoking_then_leave", "prepare_leaving", "assigning_then_leave"])
def test_a_callback_that_outlives_the_rebalance_timeout_while_leaving_is_abandoned(waiting):
    member, clock = make(Listener())
    if waiting == "assigning_then_leave":
        member.on_subscription_changed(clock.now_ms())
        answer(heartbeat(member, clock), clock, 1, [0])
    else:
        joined(member, clock, [0, 1])
        if waiting == "revoking_then_leave":
            beat(member, clock, 2, [0])
    member.begin_close(autocommit=True)
    assert member.machine.state == waiting
    clock.advance(60_000)
    member.machine.tick(clock.now_ms())
    assert member.machine.state == "leaving" and member.owned == frozenset()


def test_fenced_while_leaving_loses_what_is_left_and_sends_no_leave():
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0, 1])
    member.begin_close(autocommit=True)
    assert member.machine.state == "prepare_leaving"
    member.machine.fire("fenced_error", clock.now_ms())  # a heartbeat answered FENCED_MEMBER_EPOCH meanwhile
    assert member.machine.state == "lost_then_leave"
    run_callbacks(member, clock)
    assert listener.calls[-1] == ("lost", [0, 1]) and member.machine.state == "unsubscribed"
    assert member._commits.sent == []


def test_leaving_when_fenced_or_stale_needs_no_leave_heartbeat():
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0])
    beat(member, clock, 1, error_code=110)
    assert member.machine.state == "fenced"
    member.begin_close(autocommit=True)
    assert member.machine.state == "lost_then_leave"
    run_callbacks(member, clock)
    assert member.machine.state == "unsubscribed" and nothing_sent(member, clock)

    member, clock = make(listener)
    joined(member, clock, [0])
    member.machine.fire("poll_timer_expired", clock.now_ms())
    assert member.machine.state == "stale"
    listener.calls.clear()
    member.begin_close(autocommit=True)  # as Java, the listener is told its partitions are lost
    assert member.machine.state == "lost_then_leave"
    run_callbacks(member, clock)
    assert listener.calls == [("lost", [0])] and member.machine.state == "unsubscribed"
    assert member.owned == frozenset() and nothing_sent(member, clock)


# -- the lease: the spec's session timer, as long as the group's session timeout on the broker ---------------


def test_no_heartbeat_answered_for_a_session_ends_the_lease_then_loses_the_partitions():
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0, 1])
    acked_at = clock.now_ms()  # the acknowledgement, answered OK, was sent now
    assert member.session_timeout_ms == SESSION_MS
    assert member._subs.lease_until == acked_at + SESSION_MS
    listener.calls.clear()
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    heartbeat(member, clock)  # never answered: the coordinator cannot be reached
    clock.advance(SESSION_MS - 501)
    member.machine.tick(clock.now_ms())
    assert member.machine.state == "stable" and not member._subs.lease_expired(clock.now_ms())
    clock.advance(1)
    assert member._subs.lease_expired(clock.now_ms())  # the collector hands out nothing from here on
    member.machine.tick(clock.now_ms())
    assert ("stable", "session_expired", "fenced") in steps(member)
    run_callbacks(member, clock)
    assert listener.calls == [("lost", [0, 1])] and member.session_expiries == 1
    assert member.machine.state == "joining" and heartbeat(member, clock).request.member_epoch == 0


def test_an_answer_read_after_the_lease_ran_out_renews_nothing():
    """Sent before a freeze, read after it: the broker heard from the member then, not since."""
    listener = Listener()
    member, clock = make(listener)
    joined(member, clock, [0, 1])
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    late = heartbeat(member, clock)
    clock.advance(SESSION_MS)  # frozen: no tick ran meanwhile
    answer(late, clock, 1)
    assert member.machine.state == "stable" and member._subs.lease_expired(clock.now_ms())
    member.machine.tick(clock.now_ms())
    assert member.machine.state == "fenced"


def test_the_session_timeout_learned_after_the_join_starts_the_lease_from_the_last_answered_heartbeat():
    member, clock = make(Listener())
    member.on_subscription_changed(clock.now_ms())
    answer(heartbeat(member, clock), clock, 1, [0])
    run_callbacks(member, clock)
    _, out = member.poll(clock.now_ms())  # the acknowledgement, and the lookup: the member has an epoch now
    (lookup,) = [o for o in out if isinstance(o.request, DescribeConfigsRequest)]
    (ack,) = [o for o in out if o is not lookup]
    ack_sent = clock.now_ms()
    clock.advance(40)
    answer(ack, clock, 1)
    assert member._subs.lease_until == float("inf")  # no lease while the length is not known
    clock.advance(40)
    describe_answer(lookup, clock)
    assert member._subs.lease_until == ack_sent + SESSION_MS


def test_a_broker_that_will_not_say_its_session_timeout_is_warned_about_once_and_no_lease_runs(caplog):
    member, clock = make(Listener())
    member.on_subscription_changed(clock.now_ms())
    answer(heartbeat(member, clock), clock, 1, [0])
    run_callbacks(member, clock)
    _, out = member.poll(clock.now_ms())
    (lookup,) = [o for o in out if isinstance(o.request, DescribeConfigsRequest)]
    (ack,) = [o for o in out if o is not lookup]
    describe_answer(lookup, clock, session_ms=None, error_code=30)  # GROUP_AUTHORIZATION_FAILED
    answer(ack, clock, 1)
    warnings = [r.getMessage() for r in caplog.records if "session timeout" in r.getMessage()]
    assert len(warnings) == 1 and "DESCRIBE_CONFIGS" in warnings[0], warnings
    for _ in range(20):  # heartbeats answered for 40 s (four sessions): no lookup again, no lease
        clock.advance(2_000)
        member.machine.tick(clock.now_ms())
        answer(heartbeat(member, clock), clock, 1)
    assert member._subs.lease_until == float("inf") and member.machine.state == "stable"


def test_the_leave_goes_at_once_even_with_a_heartbeat_in_flight():
    """Java sends the leave heartbeat at once on close. It waited behind an ordinary heartbeat in flight:
    close() took 8 s with a heartbeat answer held 8 s, and an unresponsive coordinator never saw the leave."""
    member, clock = make(Listener())
    joined(member, clock, [0])
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    held = heartbeat(member, clock)  # an ordinary heartbeat, never answered
    member.begin_close(autocommit=False)
    run_callbacks(member, clock)  # on_partitions_revoked of what it owns
    assert member.machine.state == "leaving"
    leave = heartbeat(member, clock)
    assert leave.request.member_epoch == -1
    answer(held, clock, 1, error_code=27)  # the held one answered late: it changes nothing
    assert member.machine.state == "leaving" and nothing_sent(member, clock)
    answer(leave, clock, -1)
    assert member.machine.state == "unsubscribed" and member.close_done


def test_topic_authorization_failed_on_a_heartbeat_is_raised_once_and_the_member_stays():
    """As Java: TOPIC_AUTHORIZATION_FAILED is raised once by the next poll() and the member keeps its state and
    heartbeats on; granting the ACL lets it recover. It was fatal for good."""
    from fsm_consumer.events import ErrorEvent

    member, clock = make(Listener())
    joined(member, clock, [0])
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    answer(heartbeat(member, clock), clock, 1, error_code=29)
    assert member.machine.state == "stable" and member.owned == {T0} and member.fatal is None
    (event,) = [member.background.get_nowait() for _ in range(member.background.qsize())]
    assert isinstance(event, ErrorEvent) and isinstance(event.error, ke.TopicAuthorizationFailedError)
    assert "grant this principal READ" in str(event.error)
    clock.advance(300)  # past the retry backoff
    again = heartbeat(member, clock)  # heartbeats go on (a full one, after an error)
    answer(again, clock, 1)
    assert member.machine.state == "stable" and member.background.empty()


def test_a_member_joining_with_nothing_assigned_is_told_so():
    """As Java: on_partitions_assigned runs when the member joins, with an empty set when the group gives it
    nothing (it was not called at all)."""
    listener = Listener()
    member, clock = make(listener)
    member.on_subscription_changed(clock.now_ms())
    answer(heartbeat(member, clock), clock, 1, [])
    run_callbacks(member, clock)
    assert listener.calls == [("assigned", [])] and member.machine.state == "acknowledging"


def test_a_static_member_names_its_instance_in_every_heartbeat():
    """As Java: the instance id goes in every heartbeat, not only the full ones (the broker otherwise took the
    member for a dynamic one, and told it UNRELEASED_INSTANCE_ID about itself instead of FENCED_INSTANCE_ID)."""
    member, clock = make(Listener(), group_instance_id="i1")
    join = joined(member, clock, [0])
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    beat_ = heartbeat(member, clock).request
    assert join.request.instance_id == "i1" and beat_.instance_id == "i1" and beat_.topic_partitions is None


def test_a_pattern_is_resolved_by_the_client_and_sent_as_names():
    """As Java resolves a java.util.regex.Pattern: the member matches its pattern against the metadata (Python's
    semantics and flags, internal topics left out under exclude_internal_topics) and sends the names. Sent as
    the broker's regex, ".*" handed out __consumer_offsets and an IGNORECASE pattern matched nothing."""
    import re

    member, clock = make(Listener())
    member._subs.unsubscribe()
    member._subs.subscribe(pattern=re.compile("ORDERS-.*", re.IGNORECASE))
    info = SimpleNamespace(leaders={0: 7}, internal=False, topic_id=str(TOPIC_ID))
    member._metadata.topics = {
        "orders-eu": info,
        "orders-us": info,
        "payments": info,
        "__consumer_offsets": SimpleNamespace(leaders={0: 7}, internal=True, topic_id=None),
    }
    member.on_subscription_changed(clock.now_ms())
    join = heartbeat(member, clock).request
    assert join.subscribed_topic_names == ["orders-eu", "orders-us"] and join.subscribed_topic_regex is None
    member._subs.unsubscribe()
    member._subs.subscribe(pattern=".*")
    assert member.subscribed_topics() == ("orders-eu", "orders-us", "payments")  # never an internal topic


@pytest.mark.parametrize("fail", ["load_in_progress", "timed_out"])
def test_a_loading_coordinator_or_a_heartbeat_timeout_keeps_the_coordinator(fail):
    """As Java: COORDINATOR_LOAD_IN_PROGRESS is the same coordinator, later, and a heartbeat that timed out keeps
    it too (only a lost connection finds it again); each made a new FindCoordinator."""
    from stand_ins import Coordinator as Strict

    from fsm_consumer.transport import RequestTimedOut

    member, clock = make(Listener())
    joined(member, clock, [0])
    member._coordinator = Strict(errors_expected=False)
    clock.advance(500)
    member.machine.tick(clock.now_ms())
    beat_ = heartbeat(member, clock)
    if fail == "load_in_progress":
        answer(beat_, clock, 1, error_code=14)
    else:
        beat_.handler(SimpleNamespace(error=RequestTimedOut("heartbeat timed out"), response=None), clock.now_ms())
    assert member.machine.state == "stable"
    clock.advance(300)
    answer(heartbeat(member, clock), clock, 1)  # retried after the backoff, to the same coordinator
    assert member.machine.state == "stable"


def test_a_full_consumer_group_names_the_consumer_protocols_limit():
    member, clock = make(Listener())
    member.on_subscription_changed(clock.now_ms())
    answer(heartbeat(member, clock), clock, 0, error_code=81)  # GROUP_MAX_SIZE_REACHED
    assert member.machine.state == "fatal" and "group.consumer.max.size" in str(member.fatal)
    assert "group.max.size)" not in str(member.fatal)
