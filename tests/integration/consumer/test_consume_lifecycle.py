"""wakeup() from another thread, close() leaving no thread and no socket, all network I/O on the
background thread, iteration and the context manager."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from kafka.protocol.metadata import MetadataRequest

from fsm_consumer.consumer import Consumer
from fsm_consumer.errors import ConsumerClosedError, WakeupException
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.transport import FaultyTransport, KafkaTransport

pytestmark = pytest.mark.integration


def _network_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("fsm-consumer-network-")]


def _sockets_to(port: int) -> int:
    """This process's TCP connections to ``port`` that are not closed yet."""
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status != psutil.CONN_CLOSE
    )


def _broker_port(broker) -> int:
    return int(broker.bootstrap_servers.rpartition(":")[2])


def test_wakeup_interrupts_a_blocked_poll(make_topic, send, make_consumer, collect):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    consumer = make_consumer()
    consumer.assign([tp])
    assert consumer.poll(timeout_ms=300) == {}  # empty topic: nothing to return

    timer = threading.Timer(0.2, consumer.wakeup)
    started = time.monotonic()
    timer.start()
    with pytest.raises(WakeupException):
        consumer.poll(timeout_ms=30_000)
    elapsed = time.monotonic() - started
    timer.join()
    assert elapsed < 1.0, f"poll took {elapsed:.2f}s to notice wakeup()"

    # the wakeup is spent: the consumer keeps working
    send(topic, [{"value": b"after"}])
    got = collect(consumer, 1)
    assert [(r.offset, r.value) for r in got] == [(0, b"after")]
    assert consumer.poll(timeout_ms=100) == {}


def test_wakeup_before_a_call_is_raised_by_the_next_blocking_call(make_topic, make_consumer):
    topic = make_topic(partitions=2)
    consumer = make_consumer()
    consumer.wakeup()
    started = time.monotonic()
    with pytest.raises(WakeupException):
        consumer.partitions_for_topic(topic, timeout_ms=30_000)
    assert time.monotonic() - started < 1.0
    assert consumer.partitions_for_topic(topic) == {0, 1}


def test_close_leaves_no_thread_and_no_socket(broker, make_topic, send, collect):
    topic = make_topic(partitions=2)
    send(topic, [{"partition": i % 2, "value": b"x%d" % i} for i in range(10)])
    port = _broker_port(broker)
    sockets_before = _sockets_to(port)
    threads_before = len(_network_threads())
    consumer = Consumer(
        bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest", client_id="lifecycle-close"
    )
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    assert len(collect(consumer, 10)) == 10
    assert _sockets_to(port) > sockets_before
    assert [t.name for t in _network_threads()].count("fsm-consumer-network-lifecycle-close") == 1

    started = time.monotonic()
    consumer.close(timeout_ms=3000)
    assert time.monotonic() - started < 3.0
    assert len(_network_threads()) == threads_before
    assert not consumer._thread.alive
    deadline = time.monotonic() + 2  # the kernel may list a socket for a moment after close()
    while _sockets_to(port) != sockets_before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _sockets_to(port) == sockets_before
    with pytest.raises(ConsumerClosedError):
        consumer.poll()
    consumer.close()  # idempotent


def test_close_returns_within_its_timeout_when_the_broker_is_silent(broker, make_topic):
    """With every request blackholed nothing ever answers; close(timeout) must not wait longer,
    and still closes every connection."""
    topic = make_topic()
    port = _broker_port(broker)
    sockets_before = _sockets_to(port)
    config = dict(
        bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest", client_id="lifecycle-silent"
    )
    transport = FaultyTransport(KafkaTransport(config))
    consumer = Consumer(transport=transport, **config)
    consumer.assign([TopicPartition(topic, 0)])
    assert consumer.position(TopicPartition(topic, 0)) == 0  # connected and positioned
    transport.blackhole(None)
    consumer.poll(timeout_ms=100)
    started = time.monotonic()
    consumer.close(timeout_ms=500)
    assert time.monotonic() - started < 1.0
    assert not consumer._thread.alive
    assert transport.closed
    assert "fsm-consumer-network-lifecycle-silent" not in [t.name for t in _network_threads()]
    deadline = time.monotonic() + 2
    while _sockets_to(port) != sockets_before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _sockets_to(port) == sockets_before


def test_all_network_io_is_on_the_background_thread(broker, make_topic, send, collect):
    topic = make_topic()
    send(topic, [{"value": b"v%d" % i} for i in range(5)])
    config = dict(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest")
    transport = KafkaTransport(config)
    with Consumer(transport=transport, **config) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert len(collect(consumer, 5)) == 5
        assert consumer.end_offsets([TopicPartition(topic, 0)])  # a blocking lookup, answered on the thread
        assert transport.io_thread is not None
        assert transport.io_thread == consumer._thread.ident
        assert transport.io_thread != threading.get_ident()
        with pytest.raises(RuntimeError, match="only its I/O thread"):
            transport.send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
        with pytest.raises(RuntimeError, match="only its I/O thread"):
            transport.poll(0)
        # the refused calls did no harm
        assert consumer.partitions_for_topic(topic) == {0}


def test_iteration_and_context_manager(broker, make_topic, send):
    topic = make_topic()
    send(topic, [{"value": b"it%d" % i} for i in range(7)])
    with Consumer(
        bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest", consumer_timeout_ms=500
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        started = time.monotonic()
        values = [r.value for r in consumer]  # stops after 500 ms without a record
        assert values == [b"it%d" % i for i in range(7)]
        assert time.monotonic() - started < 5
    assert not consumer._thread.alive
    with pytest.raises(ConsumerClosedError):
        consumer.position(TopicPartition(topic, 0))
