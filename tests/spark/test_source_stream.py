"""spark.readStream.format("fsm_kafka"): exactly once across a restart from the checkpoint while a
producer keeps writing, new topics of a pattern picked up from their start, maxOffsetsPerTrigger
through admission control, commitToGroup seen by an independent client (confluent-kafka)."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stream(fsm_kafka):
    """``stream(subscribe=..., ...)`` -> a streaming DataFrame of the fsm_kafka source."""
    return lambda **options: fsm_kafka(stream=True, **options).load()


def _available_now(df, checkpoint, out=None, timeout=120.0) -> list[dict]:
    """Run ``df`` to a parquet sink at ``out`` (or noop) with Trigger.AvailableNow; the progress of each batch.
    The query is stopped whatever happens."""
    writer = df.writeStream.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    writer = writer.format("parquet").option("path", str(out)) if out is not None else writer.format("noop")
    query = writer.start()
    try:
        assert query.awaitTermination(timeout), f"the query did not finish within {timeout} s"
        assert query.exception() is None, query.exception()
        return query.recentProgress
    finally:
        query.stop()


class _Producer:
    """A thread producing records steadily (partition chosen by librdkafka) until stopped; ``delivered``
    holds the (partition, offset) of every acknowledged record."""

    def __init__(self, servers: str, topic: str) -> None:
        self.servers, self.topic = servers, topic
        self.delivered: list[tuple[int, int]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-test-producer", daemon=True)

    def _report(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.delivered.append((msg.partition(), msg.offset()))

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.servers, "linger.ms": 5})
        i = 0
        try:
            while not self._stop.is_set():
                for _ in range(100):
                    producer.produce(self.topic, value=b"live-%d" % i, on_delivery=self._report)
                    i += 1
                producer.poll(0)
                time.sleep(0.05)
        finally:
            assert producer.flush(30) == 0

    def __enter__(self) -> _Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the producer thread did not stop"


def _rows(spark, out) -> list[tuple[str, int, int]]:
    return [tuple(r) for r in spark.read.parquet(str(out)).select("topic", "partition", "offset").collect()]


def test_exactly_once_across_a_restart_while_producing(spark, stream, broker, produce, tmp_path):
    stem = f"live-{uuid.uuid4().hex[:8]}"
    first, second = f"{stem}-a", f"{stem}-b"
    broker.create_topic(first, partitions=3)
    produced = [(first, p, o) for p, o in produce(first, 3000)]
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = stream(subscribePattern=f"{stem}-.*", startingOffsets="earliest")
    with _Producer(broker.bootstrap_servers, first) as live:
        run1 = _available_now(df, checkpoint, out)
    assert not live.errors and live.delivered
    produced += [(first, p, o) for p, o in live.delivered]
    read1 = sum(p["numInputRows"] for p in run1)
    assert read1 >= 3000 and len(_rows(spark, out)) == read1

    # more records, and a new topic matching the pattern: read from its start after the restart
    produced += [(first, p, o) for p, o in produce(first, 500)]
    broker.create_topic(second, partitions=2)
    produced += [(second, p, o) for p, o in produce(second, 200)]
    run2 = _available_now(df, checkpoint, out)
    rows = _rows(spark, out)
    assert sum(p["numInputRows"] for p in run2) == len(produced) - read1
    assert len(rows) == len(set(rows)), "a record was written twice"
    assert sorted(rows) == sorted(produced)


def test_max_offsets_per_trigger_bounds_each_batch(stream, make_topic, produce, tmp_path):
    topic = make_topic(partitions=2)
    produce(topic, 600, partition=0)
    produce(topic, 400, partition=1)
    progress = _available_now(
        stream(subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=300), tmp_path / "checkpoint"
    )
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sizes == [300, 300, 300, 100]  # shared in proportion: 180 + 120 per batch
    source = progress[-1]["sources"][0]
    assert _json(source["endOffset"]) == {topic: {"0": 600, "1": 400}}
    assert _json(source["latestOffset"]) == {topic: {"0": 600, "1": 400}}  # reportLatestOffset


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


def _committed(servers: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, read by an independent client (confluent-kafka)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def test_commit_to_group_follows_finished_batches(stream, broker, make_topic, produce, tmp_path):
    topic = make_topic(partitions=2)
    produce(topic, 200, partition=0)
    produce(topic, 100, partition=1)
    group = f"spark-lag-{uuid.uuid4().hex[:8]}"
    df = stream(subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=100, commitToGroup=group)
    checkpoint = tmp_path / "checkpoint"
    progress = _available_now(df, checkpoint)
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [100, 100, 100]
    # Spark's commit() comes one batch late and never for the last batch of an AvailableNow run; the
    # source also commits when Spark asks for the next batch, which it does once the batch before has
    # finished, including the final empty check: the group is at the last batch's end
    assert _committed(broker.bootstrap_servers, group, topic, 2) == {0: 200, 1: 100}

    produce(topic, 30, partition=1)
    _available_now(df, checkpoint)
    assert _committed(broker.bootstrap_servers, group, topic, 2) == {0: 200, 1: 130}


def test_ending_offsets_refused_in_streaming(stream, make_topic, tmp_path):
    topic = make_topic(partitions=1)
    df = stream(subscribe=topic, endingOffsets="latest")
    with pytest.raises(Exception) as caught:
        _available_now(df, tmp_path / "checkpoint", timeout=60)
    assert "fsm_kafka option 'endingOffsets'" in str(caught.value)
