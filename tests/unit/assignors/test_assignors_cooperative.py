"""The cooperative rule (KIP-429) and the sticky assignors' handling of ownership and generations."""

from __future__ import annotations

import struct
import types

from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor as KpCooperativeSticky

from fsm_consumer.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    StickyAssignor,
    Subscription,
    withhold_transfers,
)
from fsm_consumer.assignors._builtin import _Cluster, _kp_subscription, decode_sticky_user_data
from fsm_consumer.structs import TopicPartition

TP = TopicPartition


def test_withhold_transfers_keeps_owned_and_free_partitions_only():
    target = {"a": [TP("t", 0)], "b": [TP("t", 1), TP("t", 2), TP("t", 3)]}
    owned = {"a": [TP("t", 0), TP("t", 1)], "b": [TP("t", 2)], "c": [TP("t", 3), TP("t", 4)]}
    # t-1: a owns it and loses it -> held back from b. t-2: b owns it -> kept.
    # t-3: c (not even in the target) owns it -> held back. t-4: nobody gets it.
    assert withhold_transfers(target, owned) == {"a": [TP("t", 0)], "b": [TP("t", 2)]}


def test_a_member_joining_gets_nothing_until_the_owner_revoked():
    counts = {"t": 4}
    assignor = CooperativeStickyAssignor()
    owner = Subscription(topics=["t"], owned_partitions=[TP("t", p) for p in range(4)], generation=3)
    round1 = assignor.assign(counts, {"old": owner, "new": Subscription(topics=["t"])})
    assert round1["new"].partitions == ()
    assert len(round1["old"].partitions) == 2, "the owner is told to revoke two partitions"
    revoked = set(owner.owned_partitions) - set(round1["old"].partitions)
    round2 = assignor.assign(counts, {
        "old": Subscription(topics=["t"], owned_partitions=round1["old"].partitions, generation=4),
        "new": Subscription(topics=["t"], generation=4),
    })  # fmt: skip
    assert round2["old"] == round1["old"]
    assert set(round2["new"].partitions) == revoked


def test_unsubscribing_a_topic_defers_its_partitions_to_the_next_round():
    counts = {"t": 2, "u": 2}
    subs = {
        # "a" dropped topic u but still owns u-0 and u-1 while it rejoins.
        "a": Subscription(topics=["t"], owned_partitions=[TP("t", 0), TP("u", 0), TP("u", 1)], generation=1),
        "b": Subscription(topics=["t", "u"], owned_partitions=[TP("t", 1)], generation=1),
    }
    assignor = CooperativeStickyAssignor()
    round1 = assignor.assign(counts, subs)
    # The target is a: t-0, t-1 and b: u-0, u-1, but every one of those moves
    # needs a revocation first: a gives up u-*, b gives up t-1.
    assert round1 == {"a": Assignment(partitions=[TP("t", 0)]), "b": Assignment(partitions=())}
    round2 = assignor.assign(counts, {
        "a": Subscription(topics=["t"], owned_partitions=round1["a"].partitions, generation=2),
        "b": Subscription(topics=["t", "u"], owned_partitions=(), generation=2),
    })  # fmt: skip
    assert round2 == {
        "a": Assignment(partitions=[TP("t", 0), TP("t", 1)]),
        "b": Assignment(partitions=[TP("u", 0), TP("u", 1)]),
    }


# Two members both claim t-0: "fresh" at generation 5 and "stale" at generation 4
# (it missed a rebalance). The sticky algorithm keeps t-0 with the newer claim.
CONFLICT = {
    "fresh": Subscription(topics=["t"], owned_partitions=[TP("t", 0)], generation=5),
    "stale": Subscription(topics=["t"], owned_partitions=[TP("t", 0), TP("t", 1)], generation=4),
}


def test_a_conflicting_stale_claim_does_not_take_the_partition_from_its_owner():
    result = CooperativeStickyAssignor().assign({"t": 2}, CONFLICT)
    assert result == {"fresh": Assignment(partitions=[TP("t", 0)]), "stale": Assignment(partitions=[TP("t", 1)])}


def test_kafka_python_withholds_the_partition_from_its_rightful_owner():
    # kafka-python takes the *last* claimant as the owner, so "fresh" is told to
    # revoke t-0, which it then gets back a round later: a needless pause.
    members = [
        types.SimpleNamespace(member_id=m, group_instance_id=None, metadata=_kp_subscription(s))
        for m, s in CONFLICT.items()
    ]
    raw = KpCooperativeSticky().assign(_Cluster({"t": 2}, ["t"]), members)
    assert raw["fresh"].partitions() == []


def test_generation_of_v1_subscriptions_comes_from_javas_user_data():
    # v1 subscriptions have no GenerationId; Java's cooperative-sticky puts it in
    # the user data as an int32. The higher generation wins the conflicting claim.
    def sub(owned, generation):
        return Subscription(topics=["t"], owned_partitions=owned, user_data=struct.pack(">i", generation))

    for winner, loser in (("x", "y"), ("y", "x")):
        subs = {winner: sub([TP("t", 0)], 8), loser: sub([TP("t", 0)], 2)}
        result = CooperativeStickyAssignor().assign({"t": 2}, subs)
        assert result[winner].partitions == (TP("t", 0),)
        assert result[loser].partitions == (TP("t", 1),)


def test_cooperative_user_data_is_javas_int32_generation():
    assert CooperativeStickyAssignor().subscription_user_data(["t"], [TP("t", 0)], 12) == struct.pack(">i", 12)


def test_eager_sticky_remembers_its_last_assignment_for_the_next_join():
    assignor = StickyAssignor()
    assert assignor.subscription_user_data(["t"], [], -1) is None
    # Before any assignment, what the caller reports owning is used.
    assert decode_sticky_user_data(assignor.subscription_user_data(["t"], [TP("t", 9)], 2)) == ((TP("t", 9),), 2)
    assignor.on_assignment(Assignment(partitions=[TP("t", 1), TP("t", 0)]), 6)
    # Eager members have revoked everything when they rejoin: owned is empty then.
    assert decode_sticky_user_data(assignor.subscription_user_data(["t"], [], 6)) == ((TP("t", 0), TP("t", 1)), 6)


def test_eager_sticky_falls_back_to_owned_partitions_without_user_data():
    subs = {
        "a": Subscription(topics=["t"], owned_partitions=[TP("t", 2), TP("t", 3)], generation=1),
        "b": Subscription(topics=["t"], owned_partitions=[TP("t", 0), TP("t", 1)], generation=1),
    }
    result = StickyAssignor().assign({"t": 4}, subs)
    assert result == {
        "a": Assignment(partitions=[TP("t", 2), TP("t", 3)]),
        "b": Assignment(partitions=[TP("t", 0), TP("t", 1)]),
    }


def test_topics_without_metadata_are_skipped():
    subs = {"a": Subscription(topics=["t", "unknown"]), "b": Subscription(topics=["t"])}
    for assignor in (StickyAssignor(), CooperativeStickyAssignor()):
        result = assignor.assign({"t": 2}, subs)
        assert sorted(tp for a in result.values() for tp in a.partitions) == [TP("t", 0), TP("t", 1)]
