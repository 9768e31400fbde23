"""Against Apache Kafka, the exact behaviour the Tansu runs work around (see the README's Tansu quirks)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from fsm_consumer import Consumer, OffsetAndMetadata, TopicPartition
from fsm_consumer.parallel import ParallelConsumer, PartitionProgress

pytestmark = pytest.mark.brokers("kafka")


def topic_on(kafka, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(name, partitions=partitions)
    return name


def produce(
    kafka, topic: str, count: int, *, partition: int = 0, size: int = 10, key=None, batch_bytes: int = 1_000_000
) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "linger.ms": 20,
            "batch.size": batch_bytes,
            "enable.idempotence": True,
        }
    )  # a retried batch must not land twice: counts are checked
    for i in range(count):
        producer.produce(topic, value=b"x" * size, key=key(i) if key else None, partition=partition)
    assert producer.flush(30) == 0


def test_the_broker_starts_and_says_what_it_is(kafka):
    assert kafka.running and kafka.startup_seconds < 60
    assert kafka.bootstrap_servers.startswith("127.0.0.1:")
    name = topic_on(kafka, partitions=3)
    assert kafka.topic_partitions(name) == [0, 1, 2]


def test_end_offsets_and_the_high_watermark_are_exact_for_multi_record_batches(kafka):
    topic = topic_on(kafka)
    produce(kafka, topic, 1000)  # linger.ms=20: batches of many records
    consumer = Consumer(bootstrap_servers=kafka.bootstrap_servers, auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    assert consumer.end_offsets([tp]) == {tp: 1000}
    got = 0
    deadline = time.monotonic() + 30
    while got < 1000 and time.monotonic() < deadline:
        got += sum(len(r) for r in consumer.poll(timeout_ms=500).values())
    assert got == 1000
    assert consumer.highwater(tp) == 1000  # the broker's own figure, no correction needed
    consumer.close()


def test_a_first_join_group_is_answered_promptly(kafka):
    topic = topic_on(kafka, partitions=2)
    consumer = Consumer(
        bootstrap_servers=kafka.bootstrap_servers,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1000,
    )
    consumer.subscribe([topic])
    started = time.monotonic()
    while not consumer.assignment() and time.monotonic() - started < 30:
        consumer.poll(timeout_ms=100)
    took = time.monotonic() - started
    assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    assert took < 4.5, f"assigned after {took:.1f} s (Tansu holds a first JoinGroup ~5 s at these settings)"
    consumer.close()


def test_commit_metadata_is_kept(kafka):
    topic = topic_on(kafka)
    consumer = Consumer(
        bootstrap_servers=kafka.bootstrap_servers, group_id=f"g-{uuid.uuid4().hex[:8]}", enable_auto_commit=False
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.commit({tp: OffsetAndMetadata(0, "fsm1:kept", -1)})
    assert consumer.committed(tp, metadata=True).metadata == "fsm1:kept"
    consumer.close()


def test_parallel_progress_beyond_the_gap_travels_in_the_metadata(kafka):
    """A stuck record holds the committed offset; what completed after it is committed in the metadata
    and skipped by the next run (on Tansu the metadata is dropped and those records run again)."""
    topic = topic_on(kafka)
    produce(kafka, topic, 200, key=lambda i: b"k%d" % (i % 4))
    group = f"g-{uuid.uuid4().hex[:8]}"
    release = threading.Event()
    handled: list[int] = []

    def handler(record):
        if record.offset == 2:
            release.wait(30)
        handled.append(record.offset)

    consumer = Consumer(
        bootstrap_servers=kafka.bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    consumer.subscribe([topic])
    pc = ParallelConsumer(consumer, handler, parallelism=4, commit_interval_ms=100, revoke_timeout_ms=500)
    runner = threading.Thread(target=pc.run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 30
    while len(handled) < 150 and time.monotonic() < deadline:
        time.sleep(0.05)
    pc.stop()
    runner.join(30)  # the drain gives up after revoke_timeout_ms: offset 2 still runs
    tp = TopicPartition(topic, 0)
    found = consumer.committed(tp, metadata=True)
    assert found.offset == 2 and found.metadata.startswith("fsm1")
    progress = PartitionProgress.restore(found.offset, found.metadata)
    skipped = [o for o in range(2, 200) if not progress.receive(o)]
    assert set(skipped) == {o for o in handled if o > 2} and len(skipped) >= 100
    release.set()
    consumer.close()

    again: list[int] = []
    consumer = Consumer(
        bootstrap_servers=kafka.bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    consumer.subscribe([topic])

    def second(record):
        again.append(record.offset)
        if len(again) + len(skipped) == 198:
            pc2.stop()

    with ParallelConsumer(consumer, second, parallelism=4) as pc2:
        runner = threading.Thread(target=pc2.run, daemon=True)
        runner.start()
        runner.join(60)
    assert sorted(again) == sorted(set(range(2, 200)) - set(skipped))
    assert pc2.metrics()["skipped"] == len(skipped)
    assert consumer.committed(tp) == 200
    consumer.close()


def test_max_partition_fetch_bytes_bounds_each_answer(kafka):
    """Tansu ignores the limit (whole stored batches come back, ~5-7 MiB per answer); Kafka honours it."""
    topic = topic_on(kafka)
    produce(kafka, topic, 200, size=10_000, batch_bytes=16_384)  # a batch per record: none above the limit
    limit = 32 * 1024
    consumer = Consumer(
        bootstrap_servers=kafka.bootstrap_servers, auto_offset_reset="earliest", max_partition_fetch_bytes=limit
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    got = 0
    deadline = time.monotonic() + 30
    while got < 200 and time.monotonic() < deadline:
        got += sum(len(r) for r in consumer.poll(timeout_ms=500).values())
    metrics = consumer.metrics_flat()
    consumer.close()
    assert got == 200
    assert 0 < metrics["fetch-size-max"] <= limit
    assert metrics["fetch-total"] >= 200 * 10_000 // limit  # ~2 MB in answers of at most 32 KiB


def test_the_commit_log_reads_back_what_took_effect_in_order(kafka):
    """KafkaBroker.commit_log: the group's commits as the broker applied them, from __consumer_offsets (the
    frozen-members runs judge 'no commit backwards' by it)."""
    topic = topic_on(kafka, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(bootstrap_servers=kafka.bootstrap_servers, group_id=group, enable_auto_commit=False)
    try:
        t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        consumer.assign([t0, t1])
        for offsets in ({t0: 5}, {t1: 2}, {t0: 9}):
            consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
    finally:
        consumer.close(autocommit=False)
    assert kafka.commit_log(group) == [(topic, 0, 5), (topic, 1, 2), (topic, 0, 9)]
    assert kafka.commit_log(f"other-{group}") == []
