"""FaultyTransport over KafkaTransport and the real broker: each fault kind, then clear()."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.record.memory_records import MemoryRecords

from fsm_consumer.transport import (
    ConnectionLost,
    FaultyTransport,
    KafkaTransport,
    Pending,
    ProtocolDecodeError,
    RequestTimedOut,
)

pytestmark = pytest.mark.integration

LEADER_NOT_AVAILABLE = 5
COORDINATOR_NOT_AVAILABLE = 15


@pytest.fixture
def faulty(broker) -> Iterator[FaultyTransport]:
    inner = KafkaTransport({"bootstrap_servers": broker.bootstrap_servers, "reconnect_backoff_ms": 20})
    t = FaultyTransport(inner)
    try:
        yield t
    finally:
        t.close()


def wait(t: FaultyTransport, *pendings: Pending, timeout: float = 10.0) -> float:
    started = time.monotonic()
    while not all(p.done for p in pendings):
        assert time.monotonic() - started < timeout, f"not done: {pendings}"
        t.poll(100)
    return time.monotonic() - started


def metadata(*topics: str) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in topics], allow_auto_topic_creation=False
    )


def fetch(meta: Any, max_wait_ms: int = 100) -> FetchRequest:
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=meta.name, topic_id=meta.topic_id, partitions=[part])],
    )


def setup_topic(t: FaultyTransport, make_topic) -> tuple[int, Any]:
    topic = make_topic()
    p = t.send(metadata(topic))
    wait(t, p)
    assert p.error is None
    t.update_brokers({b.node_id: (b.host, b.port) for b in p.response.brokers})
    meta = p.response.topics[0]
    return meta.partitions[0].leader_id, meta


def test_blackhole_times_requests_out_and_clear_restores(faulty, make_topic):
    node, meta = setup_topic(faulty, make_topic)
    already_sent = faulty.send(fetch(meta, max_wait_ms=200), node, timeout_ms=700)
    faulty.poll(0)
    faulty.blackhole(node)
    held = faulty.send(metadata(meta.name), node, timeout_ms=300)
    elapsed = wait(faulty, held, already_sent)
    assert isinstance(held.error, RequestTimedOut) and isinstance(already_sent.error, RequestTimedOut)
    assert 0.25 < elapsed < 2.0
    assert held.sent_to is None, "a blackholed request is never written"
    assert faulty.injected["blackhole"] == 2
    faulty.clear()
    fine = faulty.send(metadata(meta.name), node)
    wait(faulty, fine)
    assert fine.error is None


def test_cut_fails_in_flight_with_connection_lost(faulty, make_topic):
    node, meta = setup_topic(faulty, make_topic)
    long_polls = [faulty.send(fetch(meta, max_wait_ms=5000), node) for _ in range(2)]
    end = time.monotonic() + 5
    while not all(p.sent_to == node for p in long_polls):
        assert time.monotonic() < end
        faulty.poll(20)
    faulty.poll(50)
    assert not any(p.done for p in long_polls), "the broker holds both long polls"

    faulty.cut(node)
    elapsed = wait(faulty, *long_polls)
    assert elapsed < 1.0
    assert all(isinstance(p.error, ConnectionLost) for p in long_polls)
    after = faulty.send(metadata(meta.name), node)
    wait(faulty, after)
    assert after.error is None and faulty.ready(node)


def test_latency_delays_answers_and_turns_into_timeouts_past_the_deadline(faulty, make_topic):
    node, meta = setup_topic(faulty, make_topic)
    faulty.add_latency(None, 300)
    slow = faulty.send(metadata(meta.name), node)
    faulty.poll(50)
    assert not slow.done, "held answers are not visible to the caller yet"
    assert wait(faulty, slow) >= 0.25 and slow.error is None
    faulty.add_latency(node, 500)
    late = faulty.send(metadata(meta.name), node, timeout_ms=200)
    assert 0.15 < wait(faulty, late) < 1.0
    assert isinstance(late.error, RequestTimedOut)
    faulty.clear()
    quick = faulty.send(metadata(meta.name), node)
    assert wait(faulty, quick) < 0.25 and quick.error is None
    assert faulty.injected["latency"] == 2


def test_fail_patches_error_codes_into_real_responses(faulty, make_topic):
    node, meta = setup_topic(faulty, make_topic)
    group = "faulty-group"
    # a broker answers COORDINATOR_NOT_AVAILABLE itself until its offsets topic exists (Apache Kafka makes
    # it on the first FindCoordinator): wait for a real answer before patching any
    deadline = time.monotonic() + 30
    while True:
        ready = faulty.send(FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group]), node)
        wait(faulty, ready)
        if ready.error is None and ready.response.coordinators[0].error_code == 0:
            break
        assert time.monotonic() < deadline, "the broker never found a coordinator for the group"
        time.sleep(0.2)
    faulty.fail("Metadata", LEADER_NOT_AVAILABLE, times=1)
    faulty.fail("FindCoordinator", COORDINATOR_NOT_AVAILABLE, times=2, node=node)
    patched, normal = faulty.send(metadata(meta.name)), faulty.send(metadata(meta.name))
    coordinators = [
        faulty.send(FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group]), node) for _ in range(3)
    ]
    wait(faulty, patched, normal, *coordinators)
    topic = patched.response.topics[0]
    assert topic.name == meta.name, "the rest of the real response is kept"
    assert topic.error_code == LEADER_NOT_AVAILABLE
    assert {p.error_code for p in topic.partitions} == {LEADER_NOT_AVAILABLE}
    assert normal.response.topics[0].error_code == 0
    codes = [p.response.coordinators[0].error_code for p in coordinators]
    assert codes == [COORDINATOR_NOT_AVAILABLE, COORDINATOR_NOT_AVAILABLE, 0]
    assert faulty.injected["fail"] == 3


def test_corrupt_frame_is_a_decode_error_that_recycles_the_connection(faulty, make_topic):
    node, meta = setup_topic(faulty, make_topic)
    faulty.corrupt("Metadata", lambda body: body[: len(body) // 2])
    broken = faulty.send(metadata(meta.name), node)
    wait(faulty, broken)
    assert isinstance(broken.error, ProtocolDecodeError) and broken.response is None
    conn = faulty.connection(node)  # reaches KafkaTransport through the wrapper
    assert conn is not None and conn.machine.log[-1].trigger in ("io_error", "backoff_elapsed", "connect")
    healed = faulty.send(metadata(meta.name), node)
    wait(faulty, healed)
    assert healed.error is None


def test_corrupt_records_for_fetch(faulty, make_topic, produce):
    node, meta = setup_topic(faulty, make_topic)
    produce(meta.name, 3, partition=0)

    def flip_last_byte(records: bytes) -> bytes:
        return records[:-1] + bytes([records[-1] ^ 0xFF])

    faulty.corrupt("Fetch", flip_last_byte, target="records")
    bad, good = faulty.send(fetch(meta), node), None
    wait(faulty, bad)
    good = faulty.send(fetch(meta), node)
    wait(faulty, good)
    bad_records = bytes(bad.response.responses[0].partitions[0].records)
    good_records = bytes(good.response.responses[0].partitions[0].records)
    assert len(bad_records) == len(good_records) and bad_records != good_records
    assert MemoryRecords(good_records).next_batch().validate_crc()
    assert not MemoryRecords(bad_records).next_batch().validate_crc()
    assert faulty.injected["corrupt"] == 1
