"""The consumer group protocol (KIP-848, group_protocol="consumer") on Apache Kafka: fsm_consumer members
beside Kafka's own Java consumer and librdkafka, all speaking ConsumerGroupHeartbeat; the broker assigns."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "group"))  # importlib mode: the group harness
sys.path.insert(0, str(Path(__file__).parent))

from group_harness import Member, assert_disjoint, describe, wait_until  # noqa: E402
from kafka_peers import JavaPeer, RdkafkaPeer, compile_peer, produce_spread  # noqa: E402

from fsm_consumer import Consumer, TopicPartition  # noqa: E402

pytestmark = pytest.mark.brokers("kafka")

PARTITIONS = 8
KIP848 = dict(group_protocol="consumer", auto_commit_interval_ms=200)


def covers(members, partitions: int) -> bool:
    owned = [m.owned() for m in members]
    return all(owned) and sorted(p for o in owned for p in o) == list(range(partitions))


def committed(kafka, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    reader = Consumer(bootstrap_servers=kafka.bootstrap_servers, group_id=group, enable_auto_commit=False)
    try:
        return {p: reader.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        reader.close()


def test_two_members_share_the_partitions_and_hand_them_over_on_leaving(kafka):
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    produced = produce_spread(kafka, topic, 20_000, PARTITIONS)
    first = Member(kafka.bootstrap_servers, group, topic, "fsm0", **KIP848)
    second = None
    try:
        wait_until(
            lambda: covers([first], PARTITIONS),
            30,
            "the first member to own every partition",
            lambda: describe([first]),
        )
        second = Member(kafka.bootstrap_servers, group, topic, "fsm1", **KIP848)
        members = [first, second]
        wait_until(
            lambda: covers(members, PARTITIONS) and all(m.state == "stable" for m in members),
            30,
            "the two members to split the partitions",
            lambda: describe(members),
        )
        assert len(first.owned()) == len(second.owned()) == PARTITIONS // 2  # the broker's uniform assignor
        assert first.generation > 1 and second.generation > 0  # epochs, as the broker bumps them
        first.stop()
        wait_until(
            lambda: covers([second], PARTITIONS), 30, "the second member to own everything", lambda: describe(members)
        )
        wait_until(
            lambda: {x for m in members for x in m.consumed} >= produced,
            60,
            "every record to be consumed",
            lambda: describe(members),
        )
        figures = second.consumer.metrics_flat()
    finally:
        for m in (first, second):
            if m is not None and not m._stop.is_set():
                m.stop()
    assert_disjoint([first, second])
    assert not first.errors and not second.errors, (first.errors, second.errors)
    assert figures["group-protocol"] == "consumer" and figures["member-epoch"] >= 1
    assert figures["assignment-epoch"] >= 1 and figures["rebalance-total"] >= 2  # joined, then took over


def test_fsm_java_and_librdkafka_members_join_and_leave_while_records_flow(kafka, tmp_path):
    """The acceptance of issue 27: 2 fsm_consumer members + 1 Java consumer + 1 librdkafka consumer, all on the
    consumer protocol; a member leaves and another joins while 100,000 records flow over 8 partitions."""
    topic = f"kip848-mixed-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    group = f"kip848-mixed-{uuid.uuid4().hex[:8]}"
    classes = compile_peer(kafka, tmp_path)
    produced = produce_spread(kafka, topic, 40_000, PARTITIONS)
    fsm: list = []
    members: list = []
    try:
        fsm += [Member(kafka.bootstrap_servers, group, topic, f"fsm{i}", **KIP848) for i in range(2)]
        members += fsm
        members.append(RdkafkaPeer(kafka, group, topic, "consumer"))
        members.append(JavaPeer(kafka, classes, group, topic, "consumer"))

        def explain() -> str:
            return f"{describe(fsm)}; peers own {[sorted(m.owned()) for m in members if m not in fsm]}"

        wait_until(lambda: covers(members, PARTITIONS), 90, "four members covering the topic, disjoint", explain)
        produced |= produce_spread(kafka, topic, 30_000, PARTITIONS)
        fsm[0].stop()  # leaves while records flow
        late = Member(kafka.bootstrap_servers, group, topic, "fsm2", **KIP848)
        fsm.append(late)
        members.append(late)
        produced |= produce_spread(kafka, topic, 30_000, PARTITIONS)
        live = [m for m in members if m is not fsm[0]]
        wait_until(lambda: covers(live, PARTITIONS), 90, "the group to settle again after the leave and join", explain)

        def consumed() -> set:
            return {x for m in members for x in list(m.consumed)}

        wait_until(
            lambda: consumed() >= produced,
            120,
            "every record to be consumed",
            lambda: f"{len(consumed() & produced)} of {len(produced)}; {explain()}",
        )
        final = [m.owned() for m in live]
        time.sleep(1)  # a last auto-commit of what was consumed
    finally:
        for m in members:
            if not getattr(m, "_stop", None) or not m._stop.is_set():
                m.stop()
    assert len(produced) == 100_000
    assert sorted(p for o in final for p in o) == list(range(PARTITIONS)), "disjoint and complete"
    assert all(m.consumed for m in members), "every member consumed"
    assert_disjoint(members)
    # every committed offset is at or below what its partition's consumers processed (+1: the next to read)
    highest: dict[int, int] = {}
    for p, o in {x for m in members for x in m.consumed}:
        highest[p] = max(highest.get(p, -1), o)
    for p, offset in committed(kafka, group, topic, PARTITIONS).items():
        assert offset is not None and offset <= highest[p] + 1, (p, offset, highest[p])
    assert not any(m.errors for m in fsm), [m.errors for m in fsm]
