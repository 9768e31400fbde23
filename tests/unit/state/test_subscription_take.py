"""SubscriptionState's one-step operations for the two threads: take (hand out and advance, or
report stale), reset_if_at (reset, or report that the partition moved on), and epochs that never
repeat for a partition, also across unassignment and reassignment."""

from __future__ import annotations

import pytest

from fsm_consumer.errors import IllegalStateError
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.state import SubscriptionState
from fsm_consumer.state._subscription import Take

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def positioned(**positions) -> SubscriptionState:
    """Assigned by the group at the given committed offsets: ``positioned(t0=5)``."""
    tps = {TopicPartition("t", int(k[1:])): v for k, v in positions.items()}
    subs = SubscriptionState()
    subs.set_group_assignment(tps)
    for tp, offset in tps.items():
        subs.set_committed_position(tp, offset)
    return subs


def epoch(subs: SubscriptionState, tp: TopicPartition) -> int:
    (e,) = [e for t, _, _, e in subs.fetchable() if t == tp]
    return e


def test_take_moves_the_position_when_nothing_changed():
    subs = positioned(t0=5)
    e = epoch(subs, T0)
    assert subs.take(T0, e, 5, 9, leader_epoch=3, now=100.0) is Take.TAKEN
    assert subs.positions() == {T0: 9}
    assert subs.consumed_offsets()[T0].leader_epoch == 3
    assert subs.take(T0, e, 9, 9, now=None)  # nothing more (control records only): still taken


@pytest.mark.parametrize("change", ["unassigned", "sought", "paused", "revoking", "reset", "moved"])
def test_take_reports_stale_and_changes_nothing(change):
    subs = positioned(t0=5, t1=0)
    e = epoch(subs, T0)
    if change == "unassigned":
        subs.set_group_assignment([T1])
    elif change == "sought":
        subs.seek(T0, 5)  # even to the same offset: data fetched before is not used
    elif change == "paused":
        subs.set_paused([T0], True)
    elif change == "revoking":
        subs.set_revoking([T0], True)
    elif change == "reset":
        subs.request_reset([T0], "earliest")
    before = subs.positions()
    start = 4 if change == "moved" else 5  # the position is not where the data starts
    assert subs.take(T0, e, start, 9, now=0.0) is Take.STALE
    assert not subs.take(T0, e, start, None)  # checking only: the same answer
    assert subs.positions() == before
    if change != "moved":  # advance() checks the partition, not the position
        assert not subs.advance(T0, e, 9, -1) and subs.positions() == before


def test_take_past_the_lease_is_expired_not_stale_and_changes_nothing():
    subs = positioned(t0=5)
    e = epoch(subs, T0)
    subs.lease_until = 1_000.0
    assert subs.take(T0, e, 5, 9, now=999.0)
    assert subs.take(T0, e, 9, 12, now=1_000.0) is Take.EXPIRED
    assert subs.take(T0, e, 9, None, now=1_500.0) is Take.EXPIRED
    assert subs.positions() == {T0: 9}
    assert subs.lease_expired(1_000.0) and not subs.lease_expired(999.0) and not subs.lease_expired(None)
    subs.lease_until = 2_000.0  # renewed
    assert subs.take(T0, e, 9, 12, now=1_500.0) and subs.positions() == {T0: 12}


def test_epochs_never_repeat_across_unassignment_and_reassignment():
    """A new state starts past the old one's last epoch: a fetch sent under the first assignment
    cannot match the second even when the committed offset equals its fetch offset."""
    subs = positioned(t0=7)
    first = epoch(subs, T0)
    subs.set_revoking([T0], True)
    subs.set_group_assignment([])
    subs.set_group_assignment([T0])
    subs.set_committed_position(T0, 7)
    second = epoch(subs, T0)
    assert second > first
    assert subs.position_at(T0, first) is None and subs.position_at(T0, second) == 7
    assert subs.take(T0, first, 7, 9) is Take.STALE
    # the same through unsubscribe() and a manual assignment
    subs.unsubscribe()
    subs.assign([T0])
    subs.seek(T0, 7)
    assert epoch(subs, T0) > second


def test_reset_if_at_is_refused_once_the_partition_moved_on_and_never_raises():
    subs = positioned(t0=5, t1=0)
    e = epoch(subs, T0)
    subs.set_group_assignment([T1])  # unassigned between the Fetch and its answer
    assert subs.reset_if_at(T0, 5, "earliest", e) is False
    assert subs.needing_reset() == {}
    with pytest.raises(IllegalStateError):
        subs.request_reset([T0], "earliest")  # the application thread's call does raise

    subs = positioned(t0=5)
    e = epoch(subs, T0)
    subs.seek(T0, 5)  # sought to the same offset: the epoch moved on
    assert subs.reset_if_at(T0, 5, "earliest", e) is False
    assert subs.positions() == {T0: 5} and subs.needing_reset() == {}
    assert subs.reset_if_at(T0, 5, "earliest", epoch(subs, T0)) is True
    assert subs.needing_reset() == {T0: "earliest"} and subs.positions() == {}


def test_position_is_public_and_raises_for_an_unassigned_partition():
    subs = positioned(t0=5)
    assert subs.position(T0) == 5
    with pytest.raises(IllegalStateError):
        subs.position(T1)
