"""CommitManager while the group rebalances (issue 11, defect 7), driven by hand: as the Java client, an
explicit commit asked for while the member rejoins, or answered REBALANCE_IN_PROGRESS, or answered
ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID while it rejoins, fails at once with the retriable
RebalanceInProgressError; CommitFailedError only when the membership itself is gone."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import kafka.errors as ke
import pytest
from kafka.protocol.consumer import OffsetCommitResponse

from fsm_consumer._config import ConsumerConfig
from fsm_consumer._metrics import Metrics
from fsm_consumer.errors import CommitFailedError, RebalanceInProgressError
from fsm_consumer.events import CommitEvent
from fsm_consumer.fetch import OffsetAndMetadata, TopicPartition
from fsm_consumer.machines import shipped_spec
from fsm_consumer.managers import CommitManager
from fsm_consumer.state import HeldErrors, SubscriptionState

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the stand-ins beside this file
from stand_ins import Coordinator  # noqa: E402

TP = TopicPartition("t", 0)


class Events(list):
    def put(self, event):
        self.append(event)


def make(state: str):
    config = ConsumerConfig.from_kwargs(bootstrap_servers="127.0.0.1:1", group_id="g", enable_auto_commit=False)
    subs = SubscriptionState()
    subs.subscribe(["t"])
    subs.set_group_assignment([TP])
    subs.set_committed_position(TP, 5)
    coordinator = Coordinator()
    commits = CommitManager(
        config,
        subscription=subs,
        coordinator=coordinator,
        background_events=Events(),
        metrics=Metrics(),
        held=HeldErrors(),
    )
    commits.membership = Member(
        machine=StateOnly(state),
        generation=3,
        member_id="m",
        fatal=None,
        history_file=None,
    )
    return commits


class Member(SimpleNamespace):
    """The membership as the commit manager reads it (classic: the stamp is the generation)."""

    def commit_stamp(self):
        return self.generation, self.member_id

    def commit_epoch(self):
        return self.generation

    def no_longer_owned(self, partitions):
        return frozenset(partitions) & getattr(self, "revoked", frozenset())


class StateOnly:
    """The membership machine as the commit manager reads it: a state and its attributes in the spec."""

    def __init__(self, state: str) -> None:
        self.state = state

    def attribute(self, name: str) -> str:
        return shipped_spec("membership").attributes[name].of_state[self.state]


def commit(commits, now=0.0):
    event = CommitEvent(offsets={TP: OffsetAndMetadata(5, "", -1)}, sync=True, deadline_ms=60_000)
    commits.on_commit_event(event, now)
    return event


def answer(outgoing, code: int, now=1.0):
    response = OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name="t",
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                        partition_index=0, error_code=code
                    )
                ],
            )
        ],
    )
    outgoing.handler(SimpleNamespace(error=None, response=response), now)


@pytest.mark.parametrize("state", ["joining", "join_backoff", "syncing"])
def test_commit_asked_while_rejoining_is_refused_as_retriable(state):
    commits = make(state)
    event = commit(commits)
    assert event.future.done
    with pytest.raises(RebalanceInProgressError, match="call poll\\(\\) to complete the rebalance") as caught:
        event.future.result()
    assert isinstance(caught.value, ke.RebalanceInProgressError) and caught.value.retriable
    assert commits.poll(0.0)[1] == []  # nothing was sent


@pytest.mark.parametrize("state", ["stable", "revoking_partitions", "assigning_partitions", "committing_revoked"])
def test_commit_in_a_settled_state_or_inside_a_callback_is_sent(state):
    commits = make(state)
    event = commit(commits)
    _, out = commits.poll(0.0)
    assert len(out) == 1 and out[0].request.generation_id_or_member_epoch == 3
    answer(out[0], 0)
    assert event.future.done and event.future.result() is None


@pytest.mark.parametrize("code", [22, 25, 27])
def test_generation_errors_while_the_member_rejoins_are_rebalance_in_progress(code):
    commits = make("stable")
    event = commit(commits)
    _, out = commits.poll(0.0)
    commits.membership.machine.state = "joining"  # the group began to rebalance meanwhile
    answer(out[0], code)
    with pytest.raises(RebalanceInProgressError):
        event.future.result()


@pytest.mark.parametrize("code,error", [(27, RebalanceInProgressError), (22, CommitFailedError)])
def test_answers_in_stable_rebalance_in_progress_is_retriable_generation_moved_is_not(code, error):
    commits = make("stable")
    event = commit(commits)
    _, out = commits.poll(0.0)
    answer(out[0], code)
    with pytest.raises(error):
        event.future.result()


@pytest.mark.parametrize("state", ["fenced", "stale"])
def test_commit_after_the_membership_is_gone_is_commit_failed(state):
    event = commit(make(state))
    with pytest.raises(CommitFailedError, match="membership of group 'g' is gone"):
        event.future.result()


# -- issue 23: a commit goes out only under the membership it was accepted in ----------------------------


def test_a_retried_commit_fails_once_the_generation_moved():
    """A commit that failed retriably is not retried under a newer generation: the partition may belong to
    another member by then, and the broker does not check ownership on OffsetCommit."""
    commits = make("stable")
    event = commit(commits)
    _, out = commits.poll(0.0)
    answer(out[0], 15)  # COORDINATOR_NOT_AVAILABLE: retried after a backoff
    assert not event.future.done
    commits.membership.generation = 4  # a rebalance moved the member to a new generation meanwhile
    _, out = commits.poll(10_000.0)
    assert out == []  # nothing sent under generation 4
    with pytest.raises(CommitFailedError, match="accepted under generation 3"):
        event.future.result()


@pytest.mark.parametrize("state,error", [("joining", RebalanceInProgressError), ("fenced", CommitFailedError)])
def test_a_queued_commit_is_not_sent_once_the_member_rejoins_or_is_fenced(state, error):
    commits = make("stable")
    event = commit(commits)
    commits.membership.machine.state = state
    commits.membership.generation = -1 if state == "fenced" else 3
    _, out = commits.poll(0.0)
    assert out == []  # never sent with generation -1 or while rejoining
    with pytest.raises(error):
        event.future.result()


def test_a_waiting_auto_commit_sends_only_partitions_still_assigned():
    config = ConsumerConfig.from_kwargs(
        bootstrap_servers="127.0.0.1:1", group_id="g", enable_auto_commit=True, auto_commit_interval_ms=100
    )
    subs = SubscriptionState()
    subs.subscribe(["t"])
    t1 = TopicPartition("t", 1)
    subs.set_group_assignment([TP, t1])
    subs.set_committed_position(TP, 5)
    subs.set_committed_position(t1, 7)
    coordinator = Coordinator()
    commits = CommitManager(
        config,
        subscription=subs,
        coordinator=coordinator,
        background_events=Events(),
        metrics=Metrics(),
        held=HeldErrors(),
    )
    commits.membership = Member(
        machine=StateOnly("stable"),
        generation=3,
        member_id="m",
        fatal=None,
        history_file=None,
    )
    commits.start_auto_commit(0.0)
    _, out = commits.poll(100.0)
    (first,) = out
    assert {(t.name, p.partition_index) for t in first.request.topics for p in t.partitions} == {("t", 0), ("t", 1)}
    answer(first, 15)  # retriable: the auto-commit waits for its retry
    subs.set_group_assignment([TP])  # t-1 left the assignment (same generation: revoked cooperatively)
    _, out = commits.poll(10_000.0)
    (retry,) = [o for o in out if o.request.__class__.__name__ == "OffsetCommitRequest"]
    assert [(t.name, p.partition_index) for t in retry.request.topics for p in t.partitions] == [("t", 0)]


def test_a_commit_is_not_sent_for_partitions_revoked_while_it_waited():
    """The consumer protocol (KIP-848): the epoch moves within a membership and the broker does not check
    ownership, so a commit accepted before a reconciliation is refused once its partitions were revoked (a
    churn run on Kafka caught one landing below the new owner's commit)."""
    commits = make("stable")
    event = commit(commits)
    commits.membership.revoked = frozenset({TP})  # revoked (and perhaps reassigned) before it went out
    _, out = commits.poll(0.0)
    assert out == []
    with pytest.raises(CommitFailedError, match="revoked from this member"):
        event.future.result()
