"""CommitManager while the group rebalances (issue 11, defect 7), driven by hand: as the Java client, an
explicit commit asked for while the member rejoins, or answered REBALANCE_IN_PROGRESS, or answered
ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID while it rejoins, fails at once with the retriable
RebalanceInProgressError; CommitFailedError only when the membership itself is gone."""

from __future__ import annotations

from types import SimpleNamespace

import kafka.errors as ke
import pytest
from kafka.protocol.consumer import OffsetCommitResponse

from fsm_consumer._config import ConsumerConfig
from fsm_consumer._metrics import Metrics
from fsm_consumer.errors import CommitFailedError, RebalanceInProgressError
from fsm_consumer.events import CommitEvent
from fsm_consumer.fetch import OffsetAndMetadata, TopicPartition
from fsm_consumer.managers import CommitManager
from fsm_consumer.state import HeldErrors, SubscriptionState

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
    coordinator = SimpleNamespace(node=1, gone_for_close=False, needed=lambda: None, mark_unknown=lambda: None)
    commits = CommitManager(config, subscription=subs, coordinator=coordinator, background_events=Events(),
                            metrics=Metrics(), held=HeldErrors())
    commits.membership = SimpleNamespace(machine=SimpleNamespace(state=state), generation=3, member_id="m",
                                         fatal=None, history_file=None)
    return commits


def commit(commits, now=0.0):
    event = CommitEvent(offsets={TP: OffsetAndMetadata(5, "", -1)}, sync=True, deadline_ms=60_000)
    commits.on_commit_event(event, now)
    return event


def answer(outgoing, code: int, now=1.0):
    response = OffsetCommitResponse(throttle_time_ms=0, topics=[OffsetCommitResponse.OffsetCommitResponseTopic(
        name="t", partitions=[OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
            partition_index=0, error_code=code)])])
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


@pytest.mark.parametrize("state", ["stable", "revoking_partitions", "assigning_partitions", "partitions_revoked"])
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
