"""One group on Apache Kafka: two fsm_consumer members, a librdkafka member and Kafka's own Java consumer."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "group"))  # importlib mode: the group harness
sys.path.insert(0, str(Path(__file__).parent))

from group_harness import Member, assert_disjoint, describe, stop_all, wait_until  # noqa: E402
from kafka_peers import JavaPeer, RdkafkaPeer, compile_peer, produce_spread  # noqa: E402

pytestmark = pytest.mark.brokers("kafka")

PARTITIONS = 8
TOTAL = 100_000


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_fsm_librdkafka_and_java_members_share_a_group(kafka, strategy, tmp_path):
    topic = f"mixed-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    classes = compile_peer(kafka, tmp_path)
    produced = produce_spread(kafka, topic, TOTAL // 2)
    members: list = []
    try:
        fsm = [
            Member(
                kafka.bootstrap_servers,
                group,
                topic,
                f"fsm{i}",
                partition_assignment_strategy=[strategy],
                session_timeout_ms=10000,
                heartbeat_interval_ms=1000,
                follower_sync_delay_ms=0,
            )
            for i in range(2)
        ]
        members += fsm
        members.append(RdkafkaPeer(kafka, group, topic, strategy))
        members.append(JavaPeer(kafka, classes, group, topic, strategy))

        def settled() -> bool:
            owned = [m.owned() for m in members]
            return (
                all(m.state == "stable" for m in fsm)
                and all(owned)
                and sorted(p for o in owned for p in o) == list(range(PARTITIONS))
            )

        def explain() -> str:
            return f"{describe(fsm)}; peers own {[sorted(m.owned()) for m in members[2:]]}"

        wait_until(settled, 90, "four members owning disjoint partitions that cover the topic", explain)
        produced |= produce_spread(kafka, topic, TOTAL - TOTAL // 2)

        def consumed() -> set:
            return {x for m in members for x in list(m.consumed)}

        wait_until(
            lambda: consumed() >= produced,
            90,
            "every record to be consumed",
            lambda: f"{len(consumed() & produced)} of {len(produced)}; {explain()}",
        )
        final = [m.owned() for m in members]
    finally:
        stop_all(members)
    assert len(produced) == TOTAL
    assert sorted(p for o in final for p in o) == list(range(PARTITIONS)), "disjoint and complete"
    assert all(final), "every member, ours, librdkafka's and Java's, owned something"
    assert all(m.consumed for m in members), "every member consumed"
    assert_disjoint(members)
