"""Transactions written by confluent-kafka's transactional producer: read_committed returns exactly
the committed records, read_uncommitted the committed and the aborted ones; never a control
record; positions end past the last commit/abort marker.

Tansu quirk (0.6): Fetch answers carry an empty ``aborted_transactions`` list, so no client can
tell aborted data from committed data (confluent-kafka's read_committed consumer returns the
aborted records from Tansu too; checked by ``test_a_read_committed_peer_sees_what_the_broker_indexes``). The
commit/abort markers themselves are written, and the last stable offset is honoured. To test our
read_committed path anyway, ``_AbortedIndex`` wraps the consumer's transport and fills in the
index a Kafka broker would send, built from the producer's delivery reports; it steps aside if
the broker ever sends an index itself.
"""

from __future__ import annotations

import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as ConfluentTP

from fsm_consumer.consumer import Consumer
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.transport import KafkaTransport, Transport

pytestmark = pytest.mark.integration

PARTITIONS = 2
TXNS = 6  # commit, abort, commit, commit, abort, commit
PER_TXN = 5  # records per transaction and partition


def _producer(broker) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "linger.ms": 0,
            "transactional.id": f"tx-{uuid.uuid4().hex}",
            "message.timeout.ms": 10_000,
            "transaction.timeout.ms": 10_000,
        }
    )
    producer.init_transactions(10)
    return producer


@pytest.fixture
def transactional_topic(broker, make_topic):
    """Returns topic, committed values, aborted values, all values in log order (per partition),
    and the aborted transactions as (first offset, marker offset) per partition."""
    topic = make_topic(partitions=PARTITIONS)
    producer = _producer(broker)
    committed = {p: [] for p in range(PARTITIONS)}
    aborted = {p: [] for p in range(PARTITIONS)}
    order = {p: [] for p in range(PARTITIONS)}
    aborted_ranges = {p: [] for p in range(PARTITIONS)}
    for t in range(TXNS):
        commit = t % 3 != 1
        offsets = {p: [] for p in range(PARTITIONS)}
        producer.begin_transaction()
        for i in range(PER_TXN):
            for p in range(PARTITIONS):
                value = f"tx{t}-{'c' if commit else 'a'}-{p}-{i}".encode()
                producer.produce(
                    topic,
                    value=value,
                    partition=p,
                    on_delivery=lambda err, msg, p=p, offsets=offsets: offsets[p].append(msg.offset()),
                )
                (committed if commit else aborted)[p].append(value)
                order[p].append(value)
        producer.flush(10)
        if commit:
            producer.commit_transaction(10)
        else:
            producer.abort_transaction(10)
            for p in range(PARTITIONS):  # a transaction's records are contiguous; its marker follows
                aborted_ranges[p].append((min(offsets[p]), max(offsets[p]) + 1))
    producer.flush(10)
    return topic, committed, aborted, order, aborted_ranges


class _AbortedIndex(Transport):
    """Delegates to ``inner``; fills each Fetch partition's empty ``aborted_transactions`` with the
    aborted transactions whose marker is at or past the fetch offset (what a Kafka broker sends)."""

    def __init__(self, inner: Transport, topic: str, ranges: dict[int, list[tuple[int, int]]]) -> None:
        self.inner, self.topic, self.ranges = inner, topic, ranges
        self.filled = 0
        self.broker_sent_index = False

    def poll(self, timeout_ms):
        done = self.inner.poll(timeout_ms)
        for pending in done:
            if type(pending.request).__name__.startswith("Fetch") and pending.response is not None:
                self._fill(pending)
        return done

    def _fill(self, pending) -> None:
        asked = {(t.topic, p.partition): p.fetch_offset for t in pending.request.topics for p in t.partitions}
        for topic in pending.response.responses:
            for part in topic.partitions:
                if topic.topic != self.topic or not part.records:
                    continue
                if part.aborted_transactions:
                    self.broker_sent_index = True
                    continue
                # v2 batch header: producerId is the int64 at byte 43 of each batch
                (producer_id,) = struct.unpack_from(">q", bytes(part.records[:51]), 43)
                fetch_offset = asked[(topic.topic, part.partition_index)]
                part.aborted_transactions = [
                    (producer_id, first)
                    for first, marker in self.ranges[part.partition_index]
                    if marker >= fetch_offset
                ]
                self.filled += 1

    def send(self, *args, **kwargs):
        return self.inner.send(*args, **kwargs)

    def wakeup(self):
        self.inner.wakeup()

    def update_brokers(self, brokers):
        self.inner.update_brokers(brokers)

    def ready(self, node):
        return self.inner.ready(node)

    def least_loaded_node(self):
        return self.inner.least_loaded_node()

    def disconnect(self, node):
        self.inner.disconnect(node)

    def next_wakeup_ms(self):
        return self.inner.next_wakeup_ms()

    def close(self):
        self.inner.close()


def _by_partition(records):
    out = {p: [] for p in range(PARTITIONS)}
    for r in records:
        out[r.partition].append(r)
    return out


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_isolation_levels(isolation, broker, transactional_topic, collect):
    topic, committed, aborted, order, ranges = transactional_topic
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    config = dict(
        bootstrap_servers=broker.bootstrap_servers,
        auto_offset_reset="earliest",
        isolation_level=isolation,
        max_poll_records=7,
    )
    transport = _AbortedIndex(KafkaTransport(config), topic, ranges)
    with Consumer(transport=transport, **config) as consumer:
        consumer.assign(tps)
        want = committed if isolation == "read_committed" else order
        total = sum(len(v) for v in want.values())
        got = _by_partition(collect(consumer, total, settle_ms=400))
        for p in range(PARTITIONS):
            values = [r.value for r in got[p]]
            # exactly these, in log order: no aborted data under read_committed, never a control record
            assert values == want[p]
            offsets = [r.offset for r in got[p]]
            assert offsets == sorted(set(offsets))
            if isolation == "read_uncommitted":
                assert set(aborted[p]) <= set(values)
            else:
                assert not set(aborted[p]) & set(values)
        # TXNS transactions of PER_TXN records per partition, each followed by its marker (one offset):
        # the position ends past the last marker, at the log end
        for tp in tps:
            position = consumer.position(tp)
            assert position == TXNS * (PER_TXN + 1)
            assert position > max(r.offset for r in got[tp.partition])
        assert transport.filled > 0 or transport.broker_sent_index


def test_read_committed_seek_into_an_aborted_transaction(broker, transactional_topic, collect):
    """A fetch starting inside an aborted transaction skips the rest of it and nothing after."""
    topic, committed, aborted, order, ranges = transactional_topic
    first, marker = ranges[0][0]
    config = dict(bootstrap_servers=broker.bootstrap_servers, isolation_level="read_committed")
    transport = _AbortedIndex(KafkaTransport(config), topic, ranges)
    with Consumer(transport=transport, **config) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, first + 2)
        values = [r.value for r in collect(consumer, 100, timeout=1.5)]
        # everything committed after the aborted transaction, nothing of it
        later = [v for v in committed[0] if int(v.split(b"-")[0][2:]) > 1]
        assert values == later


def test_open_transaction_is_held_back_by_read_committed(broker, make_topic, make_consumer, collect):
    """Records of a transaction still open are past the last stable offset: read_committed waits
    for them, read_uncommitted returns them."""
    topic = make_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    producer = _producer(broker)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"done-%d" % i, partition=0)
    producer.commit_transaction(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"open-%d" % i, partition=0)
    producer.flush(10)

    committed_reader = make_consumer(isolation_level="read_committed", fetch_max_wait_ms=50)
    committed_reader.assign([tp])
    assert [r.value for r in collect(committed_reader, 10, timeout=1.0)] == [b"done-0", b"done-1", b"done-2"]
    assert committed_reader.position(tp) == 4  # past the commit marker, before the open transaction

    uncommitted_reader = make_consumer(isolation_level="read_uncommitted")
    uncommitted_reader.assign([tp])
    assert [r.value for r in collect(uncommitted_reader, 6, settle_ms=200)] == [
        b"done-0",
        b"done-1",
        b"done-2",
        b"open-0",
        b"open-1",
        b"open-2",
    ]

    producer.commit_transaction(10)
    assert [r.value for r in collect(committed_reader, 3)] == [b"open-0", b"open-1", b"open-2"]
    assert committed_reader.position(tp) == 8


def test_a_read_committed_peer_sees_what_the_broker_indexes(broker, transactional_topic):
    """confluent-kafka's read_committed consumer reading the broker directly: Apache Kafka sends the
    aborted-transaction index, so it gets exactly the committed records; Tansu sends none, so it also
    gets the aborted ones (the quirk the wrapper above works around: if the Tansu run fails, Tansu now
    sends the index and the wrapper is no longer needed)."""
    topic, committed, aborted, order, _ = transactional_topic
    expected = order[0] if broker.kind == "tansu" else committed[0]
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": uuid.uuid4().hex,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([ConfluentTP(topic, 0, 0)])
        values, deadline = [], time.monotonic() + 10
        while len(values) < len(expected) and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                values.append(msg.value())
        assert values == expected
    finally:
        consumer.close()
