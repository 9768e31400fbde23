"""Property tests of the four built-in assignors over random groups.

A group is 1-8 members and 1-5 topics of 1-16 partitions; members subscribe
to random topic subsets (or all topics, where a property needs identical
subscriptions) and may be static. Sticky groups also get random previous
ownership, including overlapping (stale) claims and partitions of topics
that no longer exist.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_consumer.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
)
from fsm_consumer.assignors._builtin import encode_sticky_user_data
from fsm_consumer.structs import TopicPartition

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Ownership = dict[str, tuple[TopicPartition, ...]]
Counts = Mapping[str, int]
Subs = Mapping[str, Subscription]
Result = Mapping[str, Assignment]


# -- strategies ------------------------------------------------------------------------------


@st.composite
def groups(draw: st.DrawFn, identical: bool = False) -> tuple[dict[str, int], dict[str, Subscription]]:
    """(partitions_per_topic, subscriptions) without ownership."""
    counts = {f"topic-{i}": draw(st.integers(1, 16)) for i in range(draw(st.integers(1, 5)))}
    names = list(counts)
    n_members = draw(st.integers(1, 8))
    # Random, non-sorted member ids, so member order is not the insertion order.
    member_ids = draw(
        st.lists(st.text("abcdef0123", min_size=1, max_size=6), min_size=n_members, max_size=n_members, unique=True)
    )
    subs = {}
    for m in member_ids:
        topics = names if identical else draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        static = draw(st.booleans())
        subs[m] = Subscription(topics=topics, group_instance_id=f"instance-{m}" if static else None)
    return counts, subs


@st.composite
def clean_ownership(draw: st.DrawFn, counts: Mapping[str, int], members: list[str]) -> Ownership:
    """Each partition owned by at most one member (or nobody), whatever the subscriptions say."""
    owner_choice = st.sampled_from([None, *members])
    owned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic, n in counts.items():
        for p in range(n):
            if (owner := draw(owner_choice)) is not None:
                owned[owner].append(TopicPartition(topic, p))
    return {m: tuple(ps) for m, ps in owned.items()}


@st.composite
def messy_ownership(draw: st.DrawFn, counts: Mapping[str, int], members: list[str]) -> tuple[Ownership, dict[str, int]]:
    """Independent random claims per member: overlaps, gone topics, out-of-range partitions."""
    universe = [TopicPartition(t, p) for t, n in counts.items() for p in range(n + 2)]
    universe += [TopicPartition("deleted-topic", p) for p in range(3)]
    owned = {m: tuple(draw(st.lists(st.sampled_from(universe), unique=True, max_size=12))) for m in members}
    generations = {m: draw(st.integers(-1, 4)) for m in members}
    return owned, generations


def with_ownership(
    subs: Mapping[str, Subscription], owned: Ownership, generations: Mapping[str, int] | None = None
) -> dict[str, Subscription]:
    """Subscriptions as cooperative members send them: ownership in owned_partitions."""
    return {
        m: Subscription(
            topics=s.topics,
            owned_partitions=owned.get(m, ()),
            generation=(generations or {}).get(m, 1),
            group_instance_id=s.group_instance_id,
        )
        for m, s in subs.items()
    }


def with_sticky_user_data(
    subs: Mapping[str, Subscription], owned: Ownership, generations: Mapping[str, int] | None = None
) -> dict[str, Subscription]:
    """Subscriptions as eager sticky members send them: last assignment in the user data."""
    return {
        m: Subscription(
            topics=s.topics,
            user_data=encode_sticky_user_data(owned.get(m, ()), (generations or {}).get(m, 1)),
            group_instance_id=s.group_instance_id,
        )
        for m, s in subs.items()
    }


# -- checks ----------------------------------------------------------------------------------


def all_partitions(counts: Mapping[str, int], subs: Mapping[str, Subscription]) -> set[TopicPartition]:
    subscribed = {t for s in subs.values() for t in s.topics}
    return {TopicPartition(t, p) for t, n in counts.items() if t in subscribed for p in range(n)}


def check_valid(counts: Counts, subs: Subs, result: Result) -> None:
    """Every member answered; nothing assigned twice, nonexistent, or outside the member's topics."""
    assert set(result) == set(subs)
    counted = Counter(tp for a in result.values() for tp in a.partitions)
    assert not [tp for tp, n in counted.items() if n > 1], "partition assigned to several members"
    valid = all_partitions(counts, subs)
    for m, a in result.items():
        assert all(isinstance(tp, TopicPartition) for tp in a.partitions)
        assert set(a.partitions) <= valid, f"{m} got partitions that do not exist"
        assert {tp.topic for tp in a.partitions} <= set(subs[m].topics), f"{m} got an unsubscribed topic"


def check_complete(counts: Counts, subs: Subs, result: Result) -> None:
    assigned = {tp for a in result.values() for tp in a.partitions}
    assert assigned == all_partitions(counts, subs), "some subscribed partition is unassigned"


def sizes(result: Mapping[str, Assignment]) -> list[int]:
    return [len(a.partitions) for a in result.values()]


def check_balanced(result: Mapping[str, Assignment]) -> None:
    assert max(sizes(result)) - min(sizes(result)) <= 1, f"unbalanced: {sorted(sizes(result))}"


def check_kip54_balance(subs: Mapping[str, Subscription], result: Mapping[str, Assignment]) -> None:
    """Sticky's balance goal with differing subscriptions (KIP-54): a member with 2+ fewer
    partitions than another cannot take any of that member's partitions."""
    for a, big in result.items():
        for b, small in result.items():
            if len(big.partitions) >= len(small.partitions) + 2:
                movable = [tp for tp in big.partitions if tp.topic in subs[b].topics]
                assert not movable, f"{b} ({len(small.partitions)}) could take {movable[:3]} from {a}"


def check_cooperative_rule(subs: Mapping[str, Subscription], result: Mapping[str, Assignment]) -> None:
    """KIP-429: a member is never given a partition another member still owns."""
    owners: dict[TopicPartition, set[str]] = {}
    for m, s in subs.items():
        for tp in s.owned_partitions:
            owners.setdefault(tp, set()).add(m)
    for m, a in result.items():
        for tp in a.partitions:
            others = owners.get(tp, set()) - {m}
            if m not in owners.get(tp, set()):
                assert not others, f"{tp} handed to {m} while {sorted(others)} still own it"


def check_unassigned_are_moving(counts: Counts, subs: Subs, result: Result) -> None:
    """Cooperative round: a partition is left out only because its owner must revoke it first."""
    assigned = {tp for a in result.values() for tp in a.partitions}
    owned_somewhere = {tp for s in subs.values() for tp in s.owned_partitions}
    left_out = all_partitions(counts, subs) - assigned
    assert left_out <= owned_somewhere, f"unowned partitions left unassigned: {sorted(left_out - owned_somewhere)[:5]}"


def ownership_of(result: Mapping[str, Assignment]) -> Ownership:
    return {m: a.partitions for m, a in result.items()}


def cooperative_rounds(counts, subs, owned, generations=None, max_rounds=3):
    """Rebalance until nothing is withheld, checking the cooperative rule every round."""
    assignor = CooperativeStickyAssignor()
    current = with_ownership(subs, owned, generations)
    history = []
    for round_no in range(max_rounds):
        result = assignor.assign(counts, current)
        check_valid(counts, current, result)
        check_cooperative_rule(current, result)
        check_unassigned_are_moving(counts, current, result)
        history.append(result)
        # Members revoke what they lost and keep the rest: their next ownership is exactly this.
        current = with_ownership(subs, ownership_of(result), {m: round_no + 10 for m in subs})
        if {tp for a in result.values() for tp in a.partitions} == all_partitions(counts, subs):
            return history
    pytest.fail(f"cooperative rebalancing did not converge in {max_rounds} rounds")


# -- range, roundrobin -------------------------------------------------------------------------


@SETTINGS
@given(groups())
def test_range_assigns_each_partition_once_per_topic_ranges(group):
    counts, subs = group
    result = RangeAssignor().assign(counts, subs)
    check_valid(counts, subs, result)
    check_complete(counts, subs, result)
    # Range balances per topic: among a topic's subscribers, counts differ by at most one,
    # and each member's share of a topic is one contiguous range.
    for topic in {t for s in subs.values() for t in s.topics}:
        shares = {
            m: sorted(tp.partition for tp in a.partitions if tp.topic == topic)
            for m, a in result.items()
            if topic in subs[m].topics
        }
        lengths = [len(s) for s in shares.values()]
        assert max(lengths) - min(lengths) <= 1
        for share in shares.values():
            assert share == list(range(share[0], share[0] + len(share))) if share else True


@SETTINGS
@given(groups())
def test_roundrobin_assigns_each_partition_once(group):
    counts, subs = group
    result = RoundRobinAssignor().assign(counts, subs)
    check_valid(counts, subs, result)
    check_complete(counts, subs, result)


@SETTINGS
@given(groups(identical=True))
def test_roundrobin_is_balanced_for_identical_subscriptions(group):
    counts, subs = group
    check_balanced(RoundRobinAssignor().assign(counts, subs))


# -- sticky (eager) ----------------------------------------------------------------------------


@SETTINGS
@given(st.data(), groups())
def test_sticky_is_valid_complete_and_kip54_balanced_from_any_history(data, group):
    counts, subs = group
    owned, generations = data.draw(messy_ownership(counts, list(subs)))
    current = with_sticky_user_data(subs, owned, generations)
    result = StickyAssignor().assign(counts, current)
    check_valid(counts, current, result)
    check_complete(counts, current, result)
    check_kip54_balance(current, result)


@SETTINGS
@given(st.data(), groups(identical=True))
def test_sticky_balanced_and_unchanged_when_group_unchanged(data, group):
    counts, subs = group
    owned = data.draw(clean_ownership(counts, list(subs)))
    first = StickyAssignor().assign(counts, with_sticky_user_data(subs, owned))
    check_balanced(first)
    again = StickyAssignor().assign(counts, with_sticky_user_data(subs, ownership_of(first), {m: 2 for m in subs}))
    assert again == first


def check_join_moves_minimum(before: Mapping[str, Assignment], after: Mapping[str, Assignment], joiner: str) -> None:
    """After one member joins a balanced group, only the joiner's fair share moves, all to it."""
    total = sum(sizes(before))
    moved = {tp for m, a in before.items() for tp in a.partitions if tp not in after[m].partitions}
    assert moved == set(after[joiner].partitions), "a partition moved between members that stayed"
    # floor(total / members) is enough for balance when the old assignment was balanced.
    assert len(moved) == total // len(after)
    check_balanced(after)


@SETTINGS
@given(st.data(), groups(identical=True))
def test_sticky_join_moves_only_the_necessary_partitions(data, group):
    counts, subs = group
    owned = data.draw(clean_ownership(counts, list(subs)))
    before = StickyAssignor().assign(counts, with_sticky_user_data(subs, owned))
    joiner = "zz-new-member"
    grown = {
        **with_sticky_user_data(subs, ownership_of(before), {m: 2 for m in subs}),
        joiner: Subscription(topics=next(iter(subs.values())).topics),
    }
    after = StickyAssignor().assign(counts, grown)
    check_valid(counts, grown, after)
    check_join_moves_minimum(before, after, joiner)


# -- cooperative-sticky ------------------------------------------------------------------------


@SETTINGS
@given(st.data(), groups())
def test_cooperative_never_hands_over_an_owned_partition_and_converges(data, group):
    counts, subs = group
    owned, generations = data.draw(messy_ownership(counts, list(subs)))
    history = cooperative_rounds(counts, subs, owned, generations)
    check_kip54_balance(subs, history[-1])


@SETTINGS
@given(st.data(), groups(identical=True))
def test_cooperative_second_round_completes_the_moves(data, group):
    counts, subs = group
    owned = data.draw(clean_ownership(counts, list(subs)))
    history = cooperative_rounds(counts, subs, owned, max_rounds=2)
    check_balanced(history[-1])
    # What round 1 kept, round 2 keeps: partitions only arrive, they never leave again.
    if len(history) == 2:
        for m, a in history[0].items():
            assert set(a.partitions) <= set(history[1][m].partitions)


@SETTINGS
@given(st.data(), groups(identical=True))
def test_cooperative_unchanged_group_keeps_its_assignment(data, group):
    counts, subs = group
    owned = data.draw(clean_ownership(counts, list(subs)))
    settled = cooperative_rounds(counts, subs, owned)[-1]
    later = with_ownership(subs, ownership_of(settled), {m: 50 for m in subs})
    again = CooperativeStickyAssignor().assign(counts, later)
    assert again == settled


@SETTINGS
@given(st.data(), groups(identical=True))
def test_cooperative_join_moves_only_the_necessary_partitions(data, group):
    counts, subs = group
    owned = data.draw(clean_ownership(counts, list(subs)))
    before = cooperative_rounds(counts, subs, owned)[-1]
    joiner = "zz-new-member"
    grown_subs = {**subs, joiner: Subscription(topics=next(iter(subs.values())).topics)}
    owned_before = {**ownership_of(before), joiner: ()}
    rounds = cooperative_rounds(counts, grown_subs, owned_before, max_rounds=2)
    # Round 1 only takes partitions away (the joiner gets nothing another member owns);
    # round 2 gives them to the joiner.
    if len(rounds) == 2:
        assert rounds[0][joiner].partitions == ()
    check_join_moves_minimum(before, rounds[-1], joiner)
