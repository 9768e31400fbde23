"""The write side of fsm_kafka: DataFrames (batch and streaming) to Kafka, read back with an
independent client (confluent-kafka), and bad input refused naming the option or column."""

from __future__ import annotations

import time
from collections import Counter

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from pyspark.sql.types import StringType, StructType  # noqa: E402

from fsm_consumer.spark import KafkaOptionError, register  # noqa: E402
from fsm_consumer.spark._write import (
    KafkaBatchWriter,
    KafkaWriteError,
    WritePlan,  # noqa: E402
    producer_config,
    send_batches,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fmt(spark):
    register(spark)
    return "fsm_kafka"


def read_back(bootstrap, topic, count, timeout=30.0):
    """Every record of ``topic`` from the beginning (all partitions), as (partition, key, value,
    headers); waits until ``count`` came, then a little more for any extra."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out, deadline, extra_until = [], time.monotonic() + timeout, None
        while time.monotonic() < deadline and (extra_until is None or time.monotonic() < extra_until):
            for m in c.consume(1000, timeout=0.2):
                assert m.error() is None, m.error()
                out.append((m.partition(), m.key(), m.value(), tuple(m.headers() or ())))
            if len(out) >= count and extra_until is None:
                extra_until = time.monotonic() + 0.5
        return out
    finally:
        c.close()


def _write(df, fmt, **options):
    df.write.format(fmt).options(**options).mode("append").save()


def test_batch_write_10000_rows_round_trip(spark, fmt, broker, make_topic):
    topic = make_topic(partitions=3)
    df = (
        spark.range(10_000)
        .selectExpr(
            "CASE WHEN id % 10 = 0 THEN NULL ELSE CAST(concat('k', id) AS BINARY) END AS key",
            "concat('v', id) AS value",  # a string value is sent as UTF-8
            "CASE id % 4 WHEN 0 THEN NULL"
            " WHEN 1 THEN slice(array(named_struct('key', 'a', 'value', X'00')), 1, 0)"  # empty
            " WHEN 2 THEN array(named_struct('key', 'a', 'value', CAST(CAST(id AS STRING) AS BINARY)))"
            " ELSE array(named_struct('key', 'a', 'value', X''), named_struct('key', 'a', 'value', X'FF')) END"
            " AS headers",
        )
        .repartition(4)
    )
    t0 = time.monotonic()
    _write(df, fmt, **{"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": topic, "kafka.linger.ms": "5"})
    print(f"wrote 10000 rows in {time.monotonic() - t0:.1f}s")
    expected = Counter(
        (r.key, r.value.encode(), tuple((h.key, bytes(h.value)) for h in r.headers or ())) for r in df.collect()
    )
    got = read_back(broker.bootstrap_servers, topic, 10_000)
    assert len(got) == 10_000
    assert Counter((k, v, h) for _, k, v, h in got) == expected
    assert {p for p, *_ in got} == {0, 1, 2}  # keyed and unkeyed rows spread over the partitions


def test_topic_option_overrides_column_and_partition_column(spark, fmt, broker, make_topic):
    from confluent_kafka import Consumer, TopicPartition

    in_column, in_option = make_topic(partitions=1), make_topic(partitions=3)
    df = spark.range(30).selectExpr(
        f"'{in_column}' AS topic", "CAST(id % 3 AS INT) AS partition", "CAST(id AS STRING) AS value"
    )
    _write(df, fmt, **{"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": in_option})
    got = read_back(broker.bootstrap_servers, in_option, 30)
    assert sorted((p, int(v)) for p, _, v, _ in got) == sorted((i % 3, i) for i in range(30))
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "watermarks"})
    try:
        assert c.get_watermark_offsets(TopicPartition(in_column, 0), timeout=10) == (0, 0)
    finally:
        c.close()
    # without the option, the topic column routes each row
    other = make_topic(partitions=1)
    df = spark.range(20).selectExpr(
        f"IF(id % 2 = 0, '{in_column}', '{other}') AS topic", "CAST(CAST(id AS STRING) AS BINARY) AS value"
    )
    _write(df, fmt, **{"kafka.bootstrap.servers": broker.bootstrap_servers})
    assert sorted(int(v) for _, _, v, _ in read_back(broker.bootstrap_servers, in_column, 10)) == list(range(0, 20, 2))
    assert sorted(int(v) for _, _, v, _ in read_back(broker.bootstrap_servers, other, 10)) == list(range(1, 20, 2))


def test_streaming_write(spark, fmt, broker, make_topic, tmp_path):
    topic = make_topic(partitions=2)
    source = tmp_path / "in"
    spark.range(500).selectExpr("CAST(id AS STRING) AS k", "CAST(id * 7 AS STRING) AS v").repartition(3).write.json(
        str(source)
    )
    stream = (
        spark.readStream.schema("k STRING, v STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .selectExpr("k AS key", "v AS value")
    )
    query = (
        stream.writeStream.format(fmt)
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the streaming write did not finish"
        assert query.exception() is None
        assert len(query.recentProgress) >= 2  # one micro-batch per file: several commits
    finally:
        query.stop()
    got = read_back(broker.bootstrap_servers, topic, 500)
    assert sorted((int(k), int(v)) for _, k, v, _ in got) == [(i, i * 7) for i in range(500)]


@pytest.mark.parametrize(
    "select, options, message",
    [
        (
            "CAST(id AS STRING) AS value",
            {"kafka.bootstrap.servers": None},
            "option 'kafka.bootstrap.servers': required",
        ),
        (
            "CAST(id AS STRING) AS value",
            {"kafka.linger.msec": "5"},
            "'kafka.linger.msec'.*did you mean kafka.linger.ms",
        ),
        ("CAST(id AS STRING) AS value", {"kafka.acks": "most"}, "option 'kafka.acks': 'most' is not a valid value"),
        ("CAST(id AS STRING) AS value", {"kafka.value.serializer": "x"}, "'kafka.value.serializer': not supported"),
        ("CAST(id AS STRING) AS value", {"topic": None}, "option 'topic': no topic: set the topic option or give"),
        ("id AS value", {}, "column value must be binary or string, not bigint"),
        ("CAST(id AS STRING) AS key", {}, "the value column is required"),
        ("'v' AS value, array('h') AS headers", {}, "column headers must be array<struct<key:string,value:binary>>"),
        ("'v' AS value, 1L AS partition", {}, "column partition must be integer, not bigint"),
    ],
)
def test_bad_input_names_the_option_or_column(spark, fmt, broker, select, options, message):
    df = spark.range(3).selectExpr(*select.split(", "))
    opts = {"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": "never-written", **options}
    with pytest.raises(Exception, match=message):
        _write(df, fmt, **{k: v for k, v in opts.items() if v is not None})


def test_overwrite_is_refused():
    with pytest.raises(ValueError, match="cannot overwrite: Kafka topics are append-only"):
        KafkaBatchWriter(
            {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"},
            StructType().add("value", StringType()),
            overwrite=True,
        )


def test_a_record_the_producer_refuses_fails_the_job(spark, fmt, broker, make_topic):
    topic = make_topic(partitions=1)
    df = spark.range(5).selectExpr("repeat('x', 2000) AS value")
    with pytest.raises(Exception, match="MessageSizeTooLarge"):
        _write(
            df,
            fmt,
            **{"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": topic, "kafka.max.request.size": "1000"},
        )
    with pytest.raises(Exception, match="Unrecognized partition 7"):
        _write(
            spark.range(1).selectExpr("'v' AS value", "7 AS partition"),
            fmt,
            **{"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": topic},
        )


def test_unacknowledged_records_raise(monkeypatch):
    """No record is lost silently: one send failing after flush fails the task, with the count."""
    import kafka
    from kafka.future import Future

    class FailingProducer:
        def __init__(self, **config):
            self.futures = []

        def send(self, topic, value=None, key=None, headers=None, partition=None):
            self.futures.append(Future())
            return self.futures[-1]

        def flush(self, timeout=None):  # the answers come at flush: all acknowledged but the third
            for i, f in enumerate(self.futures):
                f.failure(kafka.errors.NotEnoughReplicasError("too few")) if i == 2 else f.success(None)

        def close(self, timeout=None):
            pass

    plan = WritePlan(producer_config({"kafka.bootstrap.servers": "127.0.0.1:1"}), "t", {"value": "value"})
    monkeypatch.setattr(kafka, "KafkaProducer", FailingProducer)
    batch = pa.RecordBatch.from_pydict({"value": [b"a", b"b", b"c", b"d"]})
    with pytest.raises(KafkaWriteError, match="1 of 4 records were not acknowledged.*NotEnoughReplicas"):
        send_batches(plan, iter([batch]))
    assert send_batches(plan, iter([batch.slice(0, 2)])).records == 2


def test_producer_config_from_options():
    with pytest.raises(KafkaOptionError) as caught:
        producer_config({"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.linger.msec": "5"})
    assert caught.value.option == "kafka.linger.msec"
    config = producer_config(
        {
            "kafka.bootstrap.servers": "127.0.0.1:1, 127.0.0.1:2",
            "kafka.acks": "all",
            "kafka.compression.type": "lz4",
            "kafka.enable.idempotence": "false",
            "kafka.linger.ms": "20",
            "kafka.api.version": "3.9",
            "topic": "t",
            "checkpointLocation": "/x",
        }
    )
    assert config == {
        "bootstrap_servers": ["127.0.0.1:1", "127.0.0.1:2"],
        "acks": "all",
        "compression_type": "lz4",
        "enable_idempotence": False,
        "linger_ms": 20,
        "api_version": (3, 9),
    }
