"""MembershipManager driven by hand with a fake clock: requests out of poll(now), answers into its handlers.

No broker, no threads: the coordinator and metadata are stand-ins holding only what the manager reads.
"""

from __future__ import annotations

import queue
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

from fsm_consumer._config import ConsumerConfig
from fsm_consumer._metrics import Metrics
from fsm_consumer.assignors import Assignment, encode_assignment
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.machines import FakeClock
from fsm_consumer.managers import MembershipManager
from fsm_consumer.state import HeldErrors, SubscriptionState

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the stand-ins beside this file
from stand_ins import Coordinator  # noqa: E402

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def make(delay_ms: int, **overrides):
    settings = dict(
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        client_id="c",
        enable_auto_commit=False,
        partition_assignment_strategy=["cooperative-sticky"],
        follower_sync_delay_ms=delay_ms,
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
    )
    config = ConsumerConfig.from_kwargs(**{**settings, **overrides})
    clock = FakeClock(1_000)
    subs = SubscriptionState()
    subs.subscribe(["t"])
    metadata = SimpleNamespace(
        version=1,
        all_topics_wanted=False,
        request_update=lambda topics: None,
        topics={"t": SimpleNamespace(leaders={0: 7, 1: 7}, internal=False)},
    )
    manager = MembershipManager(
        config,
        subscription=subs,
        metadata=metadata,
        coordinator=Coordinator(errors_expected=False),
        commits=None,
        background_events=queue.Queue(),
        post_app_event=lambda e: None,
        metrics=Metrics(),
        held=HeldErrors(),
    )
    return manager, clock


def polled(manager, clock):
    """Poll once: (wait, requests); heartbeats that come along are answered OK at once."""
    wait, out = manager.poll(clock.now_ms())
    for o in out:
        if isinstance(o.request, HeartbeatRequest):
            answer(o, clock, error_code=0)
    return wait, [o for o in out if not isinstance(o.request, HeartbeatRequest)]


def sent(manager, clock, kind):
    """Poll once; the one request of ``kind`` it sends."""
    if kind is HeartbeatRequest:
        out = manager.poll(clock.now_ms())[1]
    else:
        out = polled(manager, clock)[1]
    got = [o for o in out if isinstance(o.request, kind)]
    assert len(got) == 1, (kind.__name__, [type(o.request).__name__ for o in out])
    return got[0]


def answer(outgoing, clock, **fields):
    outgoing.handler(SimpleNamespace(error=None, response=SimpleNamespace(**fields)), clock.now_ms())


def answer_join(join, clock, generation: int) -> None:
    """A JoinGroup answered OK: this member (``me``) a follower of ``generation``."""
    answer(
        join,
        clock,
        error_code=0,
        member_id="me",
        generation_id=generation,
        protocol_name="cooperative-sticky",
        leader="other",
        members=[],
    )


def join_round(manager, clock, generation, partitions, delay_ms):
    """JoinGroup answered (as a follower), SyncGroup after the follower delay, answered with ``partitions``."""
    answer_join(sent(manager, clock, JoinGroupRequest), clock, generation)
    joined_at = clock.now_ms()
    if delay_ms:
        _, out = polled(manager, clock)
        assert not any(isinstance(o.request, SyncGroupRequest) for o in out), "the follower holds its sync"
        clock.advance(delay_ms)
    answer(
        sent(manager, clock, SyncGroupRequest),
        clock,
        error_code=0,
        assignment=encode_assignment(Assignment(partitions=partitions)),
    )
    return joined_at


@pytest.mark.parametrize("delay_ms", [0, 400])
def test_after_a_cooperative_revocation_the_follow_up_join_waits_for_the_others_syncs(delay_ms):
    manager, clock = make(delay_ms)
    manager.on_subscription_changed(clock.now_ms())
    join_round(manager, clock, 1, [T0, T1], delay_ms)
    assert manager.machine.state == "stable" and manager.owned == {T0, T1}

    # the coordinator says the group rebalances: round 2 takes T1 away
    clock.advance(300)
    answer(sent(manager, clock, HeartbeatRequest), clock, error_code=27)
    joined_at = join_round(manager, clock, 2, [T0], delay_ms)
    assert manager.owned == {T0}
    assert manager.machine.state == "joining"  # cooperative: revoked, so a follow-up round at once

    if delay_ms:
        # held until 2 x delay after this round's JoinGroup answer: the other members' syncs, held
        # back as ours was, land in generation 2 before our JoinGroup starts generation 3
        wait, out = polled(manager, clock)
        assert not any(isinstance(o.request, JoinGroupRequest) for o in out)
        assert wait == pytest.approx(joined_at + 2 * delay_ms - clock.now_ms())
        clock.advance(wait - 1)
        assert not any(isinstance(o.request, JoinGroupRequest) for o in polled(manager, clock)[1])
        clock.advance(1)
    join = sent(manager, clock, JoinGroupRequest)  # with delay 0 (Apache Kafka): at once
    answer_join(join, clock, 3)
    assert manager.machine.state == "syncing" and manager.generation == 3


def _lead(manager, clock, generation=1):
    """JoinGroup answered with this member as the leader of a group of one subscribed to "t"."""
    from fsm_consumer.assignors import Subscription, encode_subscription

    me = SimpleNamespace(
        member_id="me", group_instance_id=None, metadata=encode_subscription(Subscription(topics=("t",)))
    )
    answer(
        sent(manager, clock, JoinGroupRequest),
        clock,
        error_code=0,
        member_id="me",
        generation_id=generation,
        protocol_name="cooperative-sticky",
        leader="me",
        members=[me],
    )


def _assigned(sync) -> set:
    from fsm_consumer.assignors import decode_assignment

    (only,) = sync.request.assignments
    return set(decode_assignment(bytes(only.assignment)).partitions)


def test_a_leader_waits_for_an_answer_to_its_metadata_ask_before_it_assigns():
    """Apache Kafka answers a JoinGroup at once, before the first Metadata answer may have come: the leader
    asks for the topics it lacks and assigns only from an answer that came after the ask."""
    manager, clock = make(0)
    md, asked = manager._metadata, []
    md.topics, md.refreshed_at, md.request_update = {}, clock.now_ms(), lambda topics: asked.append(set(topics))
    manager.on_subscription_changed(clock.now_ms())
    _lead(manager, clock)
    for _ in range(3):  # polled again and again before the answer: still no SyncGroup, one ask
        assert not any(isinstance(o.request, SyncGroupRequest) for o in polled(manager, clock)[1])
        clock.advance(20)
    assert asked == [{"t"}]
    md.topics = {"t": SimpleNamespace(leaders={0: 7, 1: 7}, internal=False)}
    md.refreshed_at = clock.now_ms()
    assert _assigned(sent(manager, clock, SyncGroupRequest)) == {T0, T1}


def test_a_leader_rejoins_when_the_topics_changed_after_its_assignment():
    """The metadata arriving while the round is still under way (after the assignment, before stable)
    is caught by comparing with what the assignment was made from (Java's assignment snapshot)."""
    manager, clock = make(0)
    md = manager._metadata
    md.topics, md.refreshed_at = {}, clock.now_ms()
    manager.on_subscription_changed(clock.now_ms())
    _lead(manager, clock)
    polled(manager, clock)  # asks
    clock.advance(20)
    md.refreshed_at = clock.now_ms()  # answered: "t" does not exist (yet)
    sync = sent(manager, clock, SyncGroupRequest)
    assert _assigned(sync) == set()
    md.topics = {"t": SimpleNamespace(leaders={0: 7, 1: 7}, internal=False)}  # created meanwhile
    md.version += 1
    polled(manager, clock)  # seen while syncing
    answer(sync, clock, error_code=0, assignment=encode_assignment(Assignment(partitions=[])))
    join = sent(manager, clock, JoinGroupRequest)
    assert join.request.member_id == "me"


class HeldCommits:
    """The commit manager as the revocation reads it: each commit's on_done kept for the test to call."""

    def __init__(self) -> None:
        self.done: list = []

    def commit_positions(self, positions, on_done):
        self.done.append(on_done)


def revoked_with_commit_held():
    """An eager member taken by hand to partitions_revoked, the revoked partitions' auto-commit in flight."""
    manager, _ = make(0, enable_auto_commit=True, partition_assignment_strategy=["range"])
    manager._commits = commits = HeldCommits()
    m = manager.machine
    m.fire("join_requested")
    m.fire("joined")
    manager._new = frozenset({T0, T1})
    manager.generation = 1
    manager._joined_topics = ("t",)  # as the JoinGroup sent them: no rejoin on becoming stable
    m.fire("synced")  # no listener: the callbacks are acknowledged at once
    assert m.state == "stable"
    manager._subs.seek(T0, 4)
    manager._subs.seek(T1, 2)
    m.fire("rejoin_needed")
    assert m.state == "committing_revoked" and len(commits.done) == 1  # committed before the callback
    return manager, commits.done[0]


@pytest.mark.parametrize("leave, then", [(False, "revoking_partitions"), (True, "leave_committing")])
def test_the_revoked_partitions_commit_ends_the_wait_also_after_a_leave_request(leave, then):
    """committing_revoked -> committing_then_leave enters a new state: the commit sent on entering
    committing_revoked is still the one awaited (it was once dropped as stale, and close() sat out the timeout)."""
    manager, answered = revoked_with_commit_held()
    if leave:
        manager.machine.fire("leave_requested")
        assert manager.machine.state == "committing_then_leave"
    waited = manager.machine.state
    answered(None)
    steps = [(r.source, r.trigger, r.dest) for r in manager.machine.log]
    assert (waited, "revocation_completed", then) in steps


def test_a_revoked_partitions_commit_answered_after_its_wait_ran_out_fires_nothing():
    manager, answered = revoked_with_commit_held()
    manager.machine.fire("revocation_completed")  # as revocation_commit_timeout fires it
    manager.machine.fire("leave_requested")
    fired = len(manager.machine.log)
    answered(None)
    assert len(manager.machine.log) == fired
