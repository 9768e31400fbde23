"""resolve(), user-defined assignors, the kafka-python adapter, and the kafka-python bugs it avoids."""

from __future__ import annotations

import types

import pytest
from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from kafka.coordinator.assignors.abstract import RebalanceProtocol as KpRebalanceProtocol
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor as KpCooperativeSticky
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.structs import TopicPartition as KpTopicPartition

from fsm_consumer.assignors import (
    BUILTIN_ASSIGNORS,
    Assignment,
    Assignor,
    CooperativeStickyAssignor,
    KafkaPythonAssignor,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    member_order,
    resolve,
)
from fsm_consumer.assignors._builtin import _Cluster, _kp_subscription, decode_sticky_user_data
from fsm_consumer.errors import ConfigError
from fsm_consumer.structs import TopicPartition

TP = TopicPartition


# -- resolve ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls", "protocols"),
    [
        ("range", RangeAssignor, (RebalanceProtocol.EAGER,)),
        ("roundrobin", RoundRobinAssignor, (RebalanceProtocol.EAGER,)),
        ("sticky", StickyAssignor, (RebalanceProtocol.EAGER,)),
        ("cooperative-sticky", CooperativeStickyAssignor, (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)),
    ],
)
def test_resolve_builtin_names(name, cls, protocols):
    assignor = resolve(name)
    assert type(assignor) is cls
    assert assignor.name == name
    assert assignor.protocols == protocols
    assert resolve(name) is not assignor, "sticky state must not be shared between consumers"


def test_builtin_names_match_the_config_validation():
    from fsm_consumer._config import _STRATEGY_NAMES

    assert tuple(BUILTIN_ASSIGNORS) == _STRATEGY_NAMES


class OneTopicPerMember(Assignor):
    """A user-defined strategy: each topic goes whole to one member, topics dealt in turn."""

    name = "one-topic-per-member"
    protocols = (RebalanceProtocol.EAGER,)

    def __init__(self) -> None:
        self.received: list[tuple[Assignment, int]] = []

    def assign(self, partitions_per_topic, subscriptions):
        members = sorted(subscriptions)
        out = {m: [] for m in members}
        for i, topic in enumerate(sorted(partitions_per_topic)):
            takers = [m for m in members if topic in subscriptions[m].topics]
            if takers:
                out[takers[i % len(takers)]] += [TP(topic, p) for p in range(partitions_per_topic[topic])]
        return {m: Assignment(partitions=ps, user_data=m.encode()) for m, ps in out.items()}

    def subscription_user_data(self, topics, owned, generation):
        return f"gen={generation}".encode()

    def on_assignment(self, assignment, generation):
        self.received.append((assignment, generation))


def test_user_defined_assignor_via_resolve():
    by_class = resolve(OneTopicPerMember)
    assert isinstance(by_class, OneTopicPerMember)
    instance = OneTopicPerMember()
    assert resolve(instance) is instance

    subs = {"m1": Subscription(topics=["a", "b"]), "m2": Subscription(topics=["a", "b"])}
    result = by_class.assign({"a": 2, "b": 1}, subs)
    assert result == {
        "m1": Assignment(partitions=[TP("a", 0), TP("a", 1)], user_data=b"m1"),
        "m2": Assignment(partitions=[TP("b", 0)], user_data=b"m2"),
    }
    assert by_class.subscription_user_data(["a"], [], 4) == b"gen=4"
    by_class.on_assignment(result["m1"], 4)
    assert by_class.received == [(result["m1"], 4)]


def test_default_hooks_of_a_minimal_assignor():
    class Minimal(Assignor):
        name = "minimal"

        def assign(self, partitions_per_topic, subscriptions):
            return {m: Assignment(partitions=()) for m in subscriptions}

    minimal = resolve(Minimal)
    assert minimal.protocols == (RebalanceProtocol.EAGER,)
    assert minimal.subscription_user_data(["a"], [TP("a", 0)], 3) is None
    assert minimal.on_assignment(Assignment(partitions=()), 3) is None


def test_resolve_rejects_broken_or_unknown_strategies():
    class Nameless(Assignor):
        def assign(self, partitions_per_topic, subscriptions):
            return {}

    class BadProtocols(Nameless):
        name = "bad"
        protocols = ("EAGER",)

    with pytest.raises(TypeError, match="name"):
        resolve(Nameless)
    with pytest.raises(TypeError, match="protocols"):
        resolve(BadProtocols())
    with pytest.raises(ConfigError, match="unknown partition assignment strategy 'sticky2'") as err:
        resolve("sticky2")
    assert err.value.key == "partition_assignment_strategy"
    with pytest.raises(ConfigError, match="must be a name"):
        resolve(42)


@pytest.mark.parametrize(
    ("kafka_python", "ours"),
    [
        (RangePartitionAssignor, RangeAssignor),
        (RoundRobinPartitionAssignor, RoundRobinAssignor),
        (StickyPartitionAssignor, StickyAssignor),
        (KpCooperativeSticky, CooperativeStickyAssignor),
    ],
)
def test_kafka_python_builtins_resolve_to_our_fixed_versions(kafka_python, ours):
    assert type(resolve(kafka_python)) is ours
    assert type(resolve(kafka_python())) is ours


# -- wrapping other kafka-python assignors ---------------------------------------------------


class EverythingToFirst(AbstractPartitionAssignor):
    """A kafka-python-style custom assignor: all partitions to the first member it is given."""

    name = "everything-to-first"

    def __init__(self):
        self.seen_members = None
        self.assigned = None

    def supported_protocols(self):
        return [KpRebalanceProtocol.COOPERATIVE, KpRebalanceProtocol.EAGER]

    def assign(self, cluster, members):
        self.seen_members = members
        first = members[0].member_id
        parts = [(t, sorted(cluster.partitions_for_topic(t))) for t in sorted(cluster.topics())]
        return {
            m.member_id: ConsumerProtocolAssignment(0, parts if m.member_id == first else [], b"kp") for m in members
        }

    def metadata(self, topics):
        return ConsumerProtocolSubscription(0, sorted(topics), b"kp-user-data")

    def on_assignment(self, assignment, generation):
        self.assigned = (assignment.partitions(), generation)


def test_kafka_python_assignor_is_wrapped():
    assignor = resolve(EverythingToFirst)
    assert isinstance(assignor, KafkaPythonAssignor)
    assert assignor.name == "everything-to-first"
    assert assignor.protocols == (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    subs = {
        "dyn-b": Subscription(topics=["t"], owned_partitions=[TP("t", 1)], generation=3, user_data=b"ud", rack="r"),
        "dyn-a": Subscription(topics=["t"]),
        "static": Subscription(topics=["t"], group_instance_id="i-1"),
    }
    result = assignor.assign({"t": 3, "unsubscribed": 5}, subs)
    # Members reach kafka-python in member_order (static first), with full v3 metadata.
    seen = assignor.inner.seen_members
    assert [m.member_id for m in seen] == ["static", "dyn-a", "dyn-b"]
    assert seen[0].group_instance_id == "i-1"
    meta = seen[2].metadata
    assert (meta.topics, meta.user_data, meta.generation_id, meta.rack_id) == (["t"], b"ud", 3, "r")
    assert [(tp.topic, tp.partitions) for tp in meta.owned_partitions] == [("t", [1])]
    assert result == {
        "static": Assignment(partitions=[TP("t", 0), TP("t", 1), TP("t", 2)], user_data=b"kp"),
        "dyn-a": Assignment(partitions=(), user_data=b"kp"),
        "dyn-b": Assignment(partitions=(), user_data=b"kp"),
    }
    assert all(type(tp) is TopicPartition for tp in result["static"].partitions)

    assert assignor.subscription_user_data(["t"], [], 1) == b"kp-user-data"
    assignor.on_assignment(Assignment(partitions=[TP("t", 2), TP("t", 0)]), 7)
    assert assignor.inner.assigned == ([KpTopicPartition("t", 2), KpTopicPartition("t", 0)], 7)


def test_cluster_adapter_only_shows_subscribed_topics_with_partitions():
    cluster = _Cluster({"a": 2, "b": 0, "c": 3}, ["a", "b", "missing"])
    assert cluster.topics() == {"a"}
    assert cluster.partitions_for_topic("a") == {0, 1}
    assert cluster.partitions_for_topic("c") is None


# -- the kafka-python bugs our built-ins avoid ------------------------------------------------


def _kp_members(subs):
    return [
        types.SimpleNamespace(member_id=m, group_instance_id=s.group_instance_id, metadata=_kp_subscription(s))
        for m, s in subs.items()
    ]


INTERLEAVED = {
    "a": Subscription(topics=["t"], group_instance_id="inst-a"),
    "b": Subscription(topics=["t"]),
    "c": Subscription(topics=["t"], group_instance_id="inst-c"),
}


@pytest.mark.parametrize("kp_cls", [RangePartitionAssignor, RoundRobinPartitionAssignor])
def test_kafka_python_drops_a_static_member_listed_between_dynamic_ones(kp_cls):
    raw = kp_cls.assign(_Cluster({"t": 6}, ["t"]), _kp_members(INTERLEAVED))
    assert raw["a"].partitions() == [], "kafka-python fixed its groupby bug: revisit KafkaPythonAssignor"


@pytest.mark.parametrize("ours", [RangeAssignor, RoundRobinAssignor])
def test_our_range_and_roundrobin_give_every_member_its_share(ours):
    result = ours().assign({"t": 6}, INTERLEAVED)
    assert sorted(len(a.partitions) for a in result.values()) == [2, 2, 2]
    assert member_order(INTERLEAVED) == ["a", "c", "b"]


DIFFERING = {"a": Subscription(topics=["t"]), "b": Subscription(topics=["t", "u"])}


def test_kafka_python_roundrobin_crashes_when_it_must_skip_a_member():
    with pytest.raises(KeyError):
        RoundRobinPartitionAssignor.assign(_Cluster({"t": 2, "u": 1}, ["t", "u"]), _kp_members(DIFFERING))


def test_our_roundrobin_skips_members_not_subscribed():
    result = RoundRobinAssignor().assign({"t": 2, "u": 1}, DIFFERING)
    # t-0 -> a, t-1 -> b, u-0 -> (a skipped) b
    assert result == {"a": Assignment(partitions=[TP("t", 0)]), "b": Assignment(partitions=[TP("t", 1), TP("u", 0)])}


def test_kafka_python_sticky_user_data_is_unreadable_by_java_and_librdkafka():
    # kafka-python 3.0 puts an int16 version before Java's layout; a Java/librdkafka
    # reader starts with the topic count and gets 65536 topics instead.
    kp_bytes = StickyPartitionAssignor._metadata(["t"], [KpTopicPartition("t", 0)], 5).user_data.encode()
    assert kp_bytes[:6] == b"\x00\x01\x00\x00\x00\x01"
    ours = StickyAssignor()
    ours.on_assignment(Assignment(partitions=[TP("t", 0)]), 5)
    ours_bytes = ours.subscription_user_data(["t"], [], 5)
    assert ours_bytes == kp_bytes[2:]
    # ...and kafka-python cannot read the common format, so it would ignore our history.
    kp_parsed = StickyPartitionAssignor.parse_member_metadata(ConsumerProtocolSubscription(0, ["t"], ours_bytes))
    assert kp_parsed.partitions == []
    assert decode_sticky_user_data(ours_bytes) == ((TP("t", 0),), 5)


# -- plain data types ------------------------------------------------------------------------


def test_subscription_and_assignment_normalise_partition_types():
    sub = Subscription(topics=["t"], owned_partitions=[KpTopicPartition("t", 1), ("t", 2)])
    assert sub.owned_partitions == (TP("t", 1), TP("t", 2))
    assert all(type(tp) is TopicPartition for tp in sub.owned_partitions)
    assert Assignment(partitions=[("t", 0)]).partitions == (TP("t", 0),)
    with pytest.raises(TypeError, match="string"):
        Subscription(topics="orders")
    # Unordered topic sets get one canonical order, so rejoining sends identical bytes.
    assert Subscription(topics={"b", "c", "a"}).topics == ("a", "b", "c")
    assert Subscription(topics=["b", "a"]).topics == ("b", "a")
