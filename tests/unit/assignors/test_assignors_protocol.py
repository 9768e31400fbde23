"""Encoding and decoding of the consumer protocol: subscriptions, assignments, sticky user data."""

from __future__ import annotations

import json
import re
import struct
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_consumer.assignors import (
    Assignment,
    ConsumerProtocolError,
    CooperativeStickyAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from fsm_consumer.assignors._builtin import decode_sticky_user_data, encode_sticky_user_data
from fsm_consumer.structs import TopicPartition

TP = TopicPartition

# -- round trips -------------------------------------------------------------------------------

topic_names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
partitions = st.lists(st.builds(TP, topic_names, st.integers(0, 2**31 - 1)), unique=True, max_size=8)
subscriptions = st.builds(
    Subscription,
    topics=st.lists(topic_names, min_size=1, max_size=5, unique=True),
    owned_partitions=partitions.map(sorted),
    generation=st.integers(-1, 2**31 - 1),
    user_data=st.none() | st.binary(max_size=40),
    rack=st.none() | topic_names,
)


@settings(max_examples=200)
@given(subscriptions, st.integers(0, 3))
def test_subscription_round_trips_what_each_version_carries(sub, version):
    data = encode_subscription(sub, version)
    assert struct.unpack(">h", data[:2]) == (version,)
    decoded = decode_subscription(data)
    assert decoded.topics == sub.topics
    assert decoded.user_data == sub.user_data
    # Fields newer than the version are not on the wire and decode to their defaults.
    assert decoded.owned_partitions == (sub.owned_partitions if version >= 1 else ())
    assert decoded.generation == (sub.generation if version >= 2 else -1)
    assert decoded.rack == (sub.rack if version >= 3 else None)


def test_subscription_defaults_to_v3_like_java():
    data = encode_subscription(Subscription(topics=["a"], rack="r1"))
    assert struct.unpack(">h", data[:2]) == (3,)
    assert decode_subscription(data).rack == "r1"


def test_group_instance_id_is_passed_through_not_encoded():
    data = encode_subscription(Subscription(topics=["a"], group_instance_id="static-1"))
    assert decode_subscription(data).group_instance_id is None
    assert decode_subscription(data, group_instance_id="static-1").group_instance_id == "static-1"


@settings(max_examples=200)
@given(partitions, st.none() | st.binary(max_size=40), st.integers(0, 3))
def test_assignment_round_trips(parts, user_data, version):
    original = Assignment(partitions=sorted(parts), user_data=user_data)
    assert decode_assignment(encode_assignment(original, version)) == original


def test_empty_assignment_bytes_mean_nothing_assigned():
    assert decode_assignment(b"") == Assignment(partitions=())
    assert decode_assignment(None) == Assignment(partitions=())


def test_newer_versions_are_read_with_the_v3_layout_ignoring_trailing_fields():
    v3 = encode_subscription(
        Subscription(topics=["a", "b"], owned_partitions=[TP("a", 1)], generation=9, user_data=b"u", rack="r")
    )
    # A hypothetical v4 that appended a field after RackId.
    v4 = struct.pack(">h", 4) + v3[2:] + struct.pack(">h", 5) + b"extra"
    assert decode_subscription(v4) == decode_subscription(v3)
    assignment_v3 = encode_assignment(Assignment(partitions=[TP("a", 0)], user_data=b"x"))
    assignment_v7 = struct.pack(">h", 7) + assignment_v3[2:] + b"\x00\x00\x00\x01"
    assert decode_assignment(assignment_v7) == Assignment(partitions=[TP("a", 0)], user_data=b"x")


@pytest.mark.parametrize(
    "data",
    [b"\x00", b"\x00\x00\x00\x00\x00\x05", b"\xff\xff\x00\x00\x00\x00", b"\x00\x03\x00\x00\x00\x01\x00\x09ab"],
    ids=["no-version", "truncated-topics", "negative-version", "truncated-string"],
)
def test_malformed_bytes_raise_consumer_protocol_error(data):
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)
    with pytest.raises(ValueError):  # ConsumerProtocolError is a ValueError too
        decode_assignment(data)


def test_encode_rejects_unknown_versions():
    with pytest.raises(ValueError, match="0..3"):
        encode_subscription(Subscription(topics=["a"]), 4)


# -- layout, checked against Kafka's JSON schema ----------------------------------------------


def _schema(name: str) -> dict:
    text = resources.files("kafka.protocol.schemas.resources").joinpath(f"{name}.json").read_text()
    return json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_v3_subscription_layout_matches_the_kafka_schema():
    schema = _schema("ConsumerProtocolSubscription")
    # The hand-built bytes below follow this field order, types and versions.
    assert schema["validVersions"] == "0-3" and schema["flexibleVersions"] == "none"
    assert [(f["name"], f["type"], f["versions"]) for f in schema["fields"]] == [
        ("Topics", "[]string", "0+"),
        ("UserData", "bytes", "0+"),
        ("OwnedPartitions", "[]TopicPartition", "1+"),
        ("GenerationId", "int32", "2+"),
        ("RackId", "string", "3+"),
    ]
    owned_fields = schema["fields"][2]["fields"]
    assert [(f["name"], f["type"]) for f in owned_fields] == [("Topic", "string"), ("Partitions", "[]int32")]

    hand_built = b"".join([
        struct.pack(">h", 3),                                   # version header
        struct.pack(">i", 2), _string("orders"), _string("payments"),  # Topics
        struct.pack(">i", 3), b"\x01\x02\x03",                  # UserData
        struct.pack(">i", 1), _string("orders"),                # OwnedPartitions: one topic,
        struct.pack(">i", 2), struct.pack(">ii", 0, 4),         #   partitions 0 and 4
        struct.pack(">i", 17),                                  # GenerationId
        _string("eu-west-1a"),                                  # RackId
    ])  # fmt: skip
    expected = Subscription(
        topics=["orders", "payments"],
        owned_partitions=[TP("orders", 0), TP("orders", 4)],
        generation=17,
        user_data=b"\x01\x02\x03",
        rack="eu-west-1a",
    )
    assert decode_subscription(hand_built) == expected
    assert encode_subscription(expected) == hand_built


def test_null_user_data_and_rack_are_encoded_as_nulls():
    data = encode_subscription(Subscription(topics=["t"]))
    # UserData: int32 -1; RackId: int16 -1 (both nullable in the schema).
    assert data == struct.pack(">hi", 3, 1) + _string("t") + struct.pack(">iiih", -1, 0, -1, -1)


# -- real librdkafka bytes ---------------------------------------------------------------------
#
# Captured once from librdkafka 2.16.0 (confluent-kafka 2.16.1): two consumers
# with partition.assignment.strategy=cooperative-sticky, c1 (topics t1 (4
# partitions), t2 (2), client.rack=rack-a) then c2 (t1, rack-b), against the
# embedded Tansu broker whose advertised listener pointed at a logging TCP
# proxy; the proxy decoded every JoinGroup (v5) and SyncGroup (v3) request.
# Tansu's DescribeGroups returns no member metadata, hence the proxy.

LIBRDKAFKA_C1_FIRST_JOIN = bytes.fromhex("00030000000200027431000274320000000000000000ffffffff00067261636b2d61")
LIBRDKAFKA_C2_FIRST_JOIN = bytes.fromhex("000300000001000274310000000000000000ffffffff00067261636b2d62")
# c1 rejoining at generation 0 owning all six partitions, when c2 arrived.
LIBRDKAFKA_C1_REJOIN_GEN0 = bytes.fromhex(
    "000300000002000274310002743200000030000000020002743100000004000000000000000100000002000000030002"
    "74320000000200000000000000010000000000000002000274310000000400000000000000010000000200000003000274"
    "320000000200000000000000010000000000067261636b2d61"
)
# c1 rejoining at generation 1 after revoking t1 0-2 for c2.
LIBRDKAFKA_C1_REJOIN_GEN1 = bytes.fromhex(
    "000300000002000274310002743200000024000000020002743200000002000000010000000000027431000000010000"
    "000300000001000000020002743100000001000000030002743200000002000000000000000100000001000672616"
    "36b2d61"
)
# The SyncGroup assignments c1 (leader) sent: c2 at generation 1 (nothing: the
# partitions it gets are still being revoked), then at generation 2.
LIBRDKAFKA_ASSIGNMENT_C2_GEN1 = bytes.fromhex("00000000000000000000")
LIBRDKAFKA_ASSIGNMENT_C2_GEN2 = bytes.fromhex("000000000001000274310000000300000000000000010000000200000000")


def test_decodes_librdkafka_v3_subscriptions():
    assert decode_subscription(LIBRDKAFKA_C1_FIRST_JOIN) == Subscription(
        topics=["t1", "t2"], owned_partitions=(), generation=-1, user_data=b"", rack="rack-a"
    )
    assert decode_subscription(LIBRDKAFKA_C2_FIRST_JOIN).rack == "rack-b"
    rejoin = decode_subscription(LIBRDKAFKA_C1_REJOIN_GEN1)
    assert rejoin.topics == ("t1", "t2")
    assert rejoin.owned_partitions == (TP("t1", 3), TP("t2", 0), TP("t2", 1))
    assert rejoin.generation == 1
    assert rejoin.rack == "rack-a"
    # librdkafka's cooperative-sticky user data is Java's *sticky* user data
    # (previous assignment + generation, no version header).
    assert decode_sticky_user_data(rejoin.user_data) == ((TP("t2", 1), TP("t2", 0), TP("t1", 3)), 1)


def test_decodes_librdkafka_assignments():
    assert decode_assignment(LIBRDKAFKA_ASSIGNMENT_C2_GEN1) == Assignment(partitions=(), user_data=b"")
    assert decode_assignment(LIBRDKAFKA_ASSIGNMENT_C2_GEN2).partitions == (TP("t1", 0), TP("t1", 1), TP("t1", 2))


def test_cooperative_assignor_decides_like_librdkafka_on_the_captured_rebalance():
    counts = {"t1": 4, "t2": 2}
    assignor = CooperativeStickyAssignor()
    round1 = assignor.assign(counts, {
        "c1": decode_subscription(LIBRDKAFKA_C1_REJOIN_GEN0),
        "c2": decode_subscription(LIBRDKAFKA_C2_FIRST_JOIN),
    })  # fmt: skip
    # As librdkafka did: c2 gets nothing yet, c1 keeps t2 and one t1 partition.
    assert round1["c2"].partitions == ()
    assert {tp for tp in round1["c1"].partitions if tp.topic == "t2"} == {TP("t2", 0), TP("t2", 1)}
    assert len(round1["c1"].partitions) == 3
    # Round 2 with librdkafka's own generation-1 subscription: c2 gets the rest of t1.
    round2 = assignor.assign(counts, {
        "c1": decode_subscription(LIBRDKAFKA_C1_REJOIN_GEN1),
        "c2": decode_subscription(LIBRDKAFKA_C2_FIRST_JOIN),
    })  # fmt: skip
    assert round2["c1"].partitions == (TP("t1", 3), TP("t2", 0), TP("t2", 1))
    assert round2["c2"].partitions == decode_assignment(LIBRDKAFKA_ASSIGNMENT_C2_GEN2).partitions


# -- sticky user data --------------------------------------------------------------------------


def test_sticky_user_data_has_javas_headerless_v1_layout():
    data = encode_sticky_user_data([TP("b", 2), TP("a", 0), TP("a", 1)], 7)
    expected = b"".join([
        struct.pack(">i", 2),                                         # PreviousAssignment: 2 topics
        _string("a"), struct.pack(">i", 2), struct.pack(">ii", 0, 1),
        _string("b"), struct.pack(">i", 1), struct.pack(">i", 2),
        struct.pack(">i", 7),                                         # Generation (v1)
    ])  # fmt: skip
    assert data == expected
    assert decode_sticky_user_data(data) == ((TP("a", 0), TP("a", 1), TP("b", 2)), 7)


def test_sticky_user_data_reads_v0_and_kafka_python_3_forms():
    v0 = struct.pack(">i", 1) + _string("a") + struct.pack(">ii", 1, 5)
    assert decode_sticky_user_data(v0) == ((TP("a", 5),), -1)
    # kafka-python 3.0 writes the same v1 body behind an int16 version header.
    from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData

    kafka_python = StickyAssignorUserData([("a", [3])], 4).encode()
    assert kafka_python[:2] == b"\x00\x01"
    assert decode_sticky_user_data(kafka_python) == ((TP("a", 3),), 4)


@pytest.mark.parametrize("data", [b"\x00\x00\x00\x04", b"garbage!", b"\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x09"])
def test_unreadable_sticky_user_data_is_ignored_not_fatal(data):
    # b"\x00\x00\x00\x04" is Java's cooperative user data (a bare generation): not sticky data.
    assert decode_sticky_user_data(data) is None
