"""The broker dies mid-request and comes back on the same port: typed failures, then recovery.

Uses a broker of its own, not the session one, so that stopping it disturbs no other test.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from itertools import pairwise

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest

from fsm_consumer.broker import EmbeddedBroker
from fsm_consumer.transport import ConnectionLost, KafkaTransport, Pending, TransportError

pytestmark = pytest.mark.integration


@pytest.fixture
def own_broker() -> Iterator[EmbeddedBroker]:
    with socket.socket() as s:  # a fixed port, so that the restart comes back at the same address
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    b = EmbeddedBroker(port=port)
    try:
        yield b
    finally:
        b.stop()


def poll_until(t: KafkaTransport, predicate, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        t.poll(50)


def metadata(*topics: str) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in topics], allow_auto_topic_creation=False
    )


def long_poll(topic: str, topic_id) -> FetchRequest:
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=10_000,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=topic, topic_id=topic_id, partitions=[part])],
    )


def test_broker_restart_fails_in_flight_then_reconnects(own_broker):
    own_broker.create_topic("restart", partitions=1)
    t = KafkaTransport(
        {"bootstrap_servers": own_broker.bootstrap_servers, "reconnect_backoff_ms": 50, "reconnect_backoff_max_ms": 400}
    )
    try:
        first = t.send(metadata("restart"))
        poll_until(t, lambda: first.done)
        assert first.error is None
        t.update_brokers({b.node_id: (b.host, b.port) for b in first.response.brokers})
        node = first.response.brokers[0].node_id
        topic_id = first.response.topics[0].topic_id

        in_flight: list[Pending] = [t.send(long_poll("restart", topic_id), node) for _ in range(2)]
        poll_until(t, lambda: all(p.sent_to == node for p in in_flight))
        t.poll(100)  # the broker holds both long polls now
        assert not any(p.done for p in in_flight)

        own_broker.stop()
        poll_until(t, lambda: all(p.done for p in in_flight))
        for p in in_flight:
            assert isinstance(p.error, ConnectionLost), repr(p.error)
            assert p.error.node_id == node

        # While the broker is down the request waits (Java-like) and the node keeps retrying.
        waiting = t.send(metadata(), node, timeout_ms=30_000)
        poll_until(t, lambda: triggers(t, node).count("io_error") >= 3)
        assert not waiting.done
        assert not t.ready(node)

        own_broker.start()  # same port (fixed), fresh in-memory storage
        poll_until(t, lambda: waiting.done, timeout=15)
        assert waiting.error is None and waiting.sent_to == node
        assert t.ready(node)
        later = t.send(metadata())
        poll_until(t, lambda: later.done)
        assert later.error is None

        log = triggers(t, node)
        assert "backoff_elapsed" in log and log[-3:] == ["connect", "connected", "versions_known"]
        backoffs = backoff_durations(t, node)
        assert backoffs and max(backoffs) <= 400 + 1  # capped at reconnect_backoff_max_ms
    finally:
        t.close()


def triggers(t: KafkaTransport, node: int) -> list[str]:
    conn = t.connection(node)
    assert conn is not None
    return [r.trigger for r in conn.machine.log]


def backoff_durations(t: KafkaTransport, node: int) -> list[float]:
    """How long each backoff visit lasted, from the machine's log."""
    conn = t.connection(node)
    assert conn is not None
    log = list(conn.machine.log)
    return [b.time - a.time for a, b in pairwise(log) if a.dest == "backoff" and b.trigger == "backoff_elapsed"]


def test_transport_errors_are_typed(own_broker):
    """A request to a dead bootstrap server never hangs: it fails with a TransportError at its deadline."""
    address = own_broker.bootstrap_servers
    own_broker.stop()
    t = KafkaTransport({"bootstrap_servers": address, "reconnect_backoff_ms": 20})
    try:
        p = t.send(metadata(), timeout_ms=300)
        poll_until(t, lambda: p.done)
        assert isinstance(p.error, TransportError)
    finally:
        t.close()
