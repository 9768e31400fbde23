"""KafkaTransport against the real (Tansu) broker: the requests a consumer makes, end to end."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.record.memory_records import MemoryRecords

from fsm_consumer.transport import KafkaTransport, Pending

pytestmark = pytest.mark.integration


@pytest.fixture
def transport(broker) -> Iterator[KafkaTransport]:
    t = KafkaTransport({"bootstrap_servers": broker.bootstrap_servers, "client_id": "transport-it"})
    try:
        yield t
    finally:
        t.close()


def wait_all(t: KafkaTransport, *pendings: Pending, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not all(p.done for p in pendings):
        assert time.monotonic() < end, f"not done after {timeout}s: {pendings}"
        t.poll(100)
    for p in pendings:
        assert p.error is None, f"{p}: {p.error!r}"


def roundtrip(t: KafkaTransport, request: Any, node: int | None = None, **kw: Any) -> Any:
    p = t.send(request, node, **kw)
    wait_all(t, p)
    return p.response


def metadata(*topics: str) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in topics], allow_auto_topic_creation=False
    )


def learn_brokers(t: KafkaTransport, *topics: str) -> Any:
    response = roundtrip(t, metadata(*topics))
    t.update_brokers({b.node_id: (b.host, b.port) for b in response.brokers})
    return response


def fetch(topic: str, topic_id: Any, partition: int = 0, offset: int = 0, max_wait_ms: int = 100) -> FetchRequest:
    part = FetchRequest.FetchTopic.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 22,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, topic_id=topic_id, partitions=[part])],
    )


def values(records: Any) -> list[bytes]:
    out: list[bytes] = []
    batches = MemoryRecords(bytes(records or b""))
    while (batch := batches.next_batch()) is not None:
        out += [r.value for r in batch]
    return out


def test_api_versions(transport, broker):
    response = roundtrip(transport, ApiVersionsRequest())
    assert response.error_code == 0
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == broker.api_versions
    conn = transport.connection(-1)
    assert conn is not None and conn.versions is not None
    assert dict(conn.versions.broker_versions) == broker.api_versions  # the handshake saw the same table
    assert [r.trigger for r in conn.machine.log] == ["connect", "connected", "versions_known"]


def test_metadata_names_the_brokers_and_retires_bootstrap(transport, make_topic):
    topic = make_topic(partitions=3)
    response = learn_brokers(transport, topic)
    (meta,) = response.topics
    assert meta.error_code == 0 and meta.name == topic
    assert sorted(p.partition_index for p in meta.partitions) == [0, 1, 2]
    node = response.brokers[0].node_id
    assert transport.least_loaded_node() == node
    again = transport.send(metadata(topic))
    wait_all(transport, again)
    assert again.sent_to == node and transport.connection(-1) is None


def test_find_coordinator_for_a_group(transport):
    learn_brokers(transport)
    group = f"group-{time.monotonic_ns()}"
    response = roundtrip(transport, FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group]))
    coordinator = response.coordinators[0] if response.coordinators else response
    assert coordinator.error_code == 0 and coordinator.node_id >= 0
    assert transport.ready(coordinator.node_id)


def test_list_offsets_and_fetch_after_producing(transport, make_topic, produce, exact_batches):
    topic = make_topic(partitions=1)
    if exact_batches:  # Kafka: the records share a batch and ListOffsets(latest) is still its end
        produce(topic, 5, partition=0, value=lambda i: f"value-{i}")
    else:  # Tansu 0.6 answers the last batch's base offset + 1: the log end only for one-record batches
        for i in range(5):
            produce(topic, 1, partition=0, value=f"value-{i}")
    meta = learn_brokers(transport, topic).topics[0]
    leader = meta.partitions[0].leader_id

    def offset(timestamp: int) -> int:
        part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, timestamp=timestamp, current_leader_epoch=-1
        )
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            timeout_ms=5000,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[part])],
        )
        (answer,) = roundtrip(transport, request, leader).topics[0].partitions
        assert answer.error_code == 0
        return answer.offset

    assert (offset(-2), offset(-1)) == (0, 5)  # earliest, latest

    latest = transport.send(fetch(topic, meta.topic_id), leader)  # the newest Fetch: by topic id
    by_name = transport.send(fetch(topic, meta.topic_id), leader, max_version=12)  # the last by name
    wait_all(transport, latest, by_name)
    assert latest.request.API_VERSION == broker_max(transport, leader, ApiKey.Fetch)
    assert by_name.request.API_VERSION == 12
    for p in (latest, by_name):
        part = p.response.responses[0].partitions[0]
        assert part.error_code == 0 and part.high_watermark == 5
        assert values(part.records) == [f"value-{i}".encode() for i in range(5)]


def broker_max(t: KafkaTransport, node: int, api: int) -> int:
    conn = t.connection(node)
    assert conn is not None and conn.versions is not None
    return conn.versions.broker_versions[api][1]


def test_many_requests_in_flight_on_one_connection(transport, make_topic):
    topic = make_topic()
    learn_brokers(transport, topic)
    pendings = [transport.send(metadata(topic), tag=i) for i in range(30)]
    order: list[int] = []
    end = time.monotonic() + 10
    while len(order) < 30 and time.monotonic() < end:
        order += [p.tag for p in transport.poll(100)]
    assert order == list(range(30))
    assert {p.sent_to for p in pendings} == {pendings[0].sent_to}
    assert all(p.response.topics[0].name == topic for p in pendings)


def test_empty_fetch_long_poll_waits_for_the_broker(transport, make_topic):
    topic = make_topic()
    meta = learn_brokers(transport, topic).topics[0]
    started = time.monotonic()
    response = roundtrip(transport, fetch(topic, meta.topic_id, max_wait_ms=300), meta.partitions[0].leader_id)
    part = response.responses[0].partitions[0]
    assert part.error_code == 0 and values(part.records) == []
    assert time.monotonic() - started >= 0.25  # the broker held it: the transport did not spin or time out
