"""spark.read.format("fsm_kafka"): every record exactly once, Spark's Kafka schema and options, errors
naming the option, data loss. Local Spark (local[2]) against the embedded broker."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from fsm_consumer.spark import KafkaDataSource  # noqa: E402

pytestmark = pytest.mark.integration

PARTITIONS, PER_PARTITION = 4, 25_000
SPARK_KAFKA_FIELDS = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
]


def _fill(
    servers: str, topic: str, per_partition: int, partitions: int, value=lambda p, i: b"%d-%d" % (p, i), headers=None
) -> None:
    """Produce fast (no per-record callback): ``per_partition`` records into each partition, in order.

    Idempotent, so a retried batch (a broker slow to take a new topic's first writes) can neither land
    twice nor after a later batch: every value then sits at the offset it names, which the tests check."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": servers,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 2 * per_partition * partitions + 1000,
        }
    )
    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, value=value(p, i), key=b"k%d" % i, partition=p, headers=headers)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def big_topic(broker) -> str:
    """4 partitions x 25,000 records, made once for the module."""
    name = f"spark-batch-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name, partitions=PARTITIONS)
    _fill(broker.bootstrap_servers, name, PER_PARTITION, PARTITIONS)
    return name


@pytest.fixture(scope="module")
def kafka(fsm_kafka):
    """A reader factory: ``kafka(subscribe="t", ...)`` -> a DataFrameReader with the options set."""
    return fsm_kafka


def _per_partition(df) -> dict[int, tuple[int, int, int, int]]:
    """partition -> (rows, distinct offsets, min offset, max offset)."""
    from pyspark.sql import functions as F

    rows = (
        df.groupBy("partition").agg(F.count("*"), F.countDistinct("offset"), F.min("offset"), F.max("offset")).collect()
    )
    return {r[0]: tuple(r[1:]) for r in rows}


def test_every_record_exactly_once_and_spark_kafka_schema(kafka, big_topic):
    from pyspark.sql import functions as F

    df = kafka(subscribe=big_topic).load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == SPARK_KAFKA_FIELDS
    assert all(f.nullable for f in df.schema.fields)
    assert df.rdd.getNumPartitions() == PARTITIONS  # one input partition per Kafka partition
    # the values are the records produced: "<partition>-<index>" at offset index, key "k<index>"
    wrong = (
        (
            F.col("value").cast("string")
            != F.concat_ws("-", F.col("partition").cast("string"), F.col("offset").cast("string"))
        )
        | (F.col("key").cast("string") != F.concat(F.lit("k"), F.col("offset").cast("string")))
        | (F.col("topic") != big_topic)
        | (F.col("timestampType") != 0)
        | F.col("timestamp").isNull()
    )
    rows = (
        df.groupBy("partition")
        .agg(F.count("*"), F.countDistinct("offset"), F.min("offset"), F.max("offset"), F.sum(wrong.cast("int")))
        .collect()
    )  # one scan
    assert {r[0]: tuple(r[1:]) for r in rows} == {
        p: (PER_PARTITION, PER_PARTITION, 0, PER_PARTITION - 1, 0) for p in range(PARTITIONS)
    }


def test_min_partitions_splits_the_ranges(kafka, big_topic):
    df = kafka(subscribe=big_topic, minPartitions=8).load()
    assert df.rdd.getNumPartitions() == 8
    assert _per_partition(df) == {p: (PER_PARTITION, PER_PARTITION, 0, PER_PARTITION - 1) for p in range(PARTITIONS)}
    assert kafka(subscribe=big_topic, minPartitions=10).load().rdd.getNumPartitions() == 10  # uneven split


def test_headers_when_asked(kafka, broker, make_topic, produce):
    topic = make_topic(partitions=1)
    produce(topic, 3, partition=0, headers=[("trace", b"t1"), ("empty", b"")])
    produce(topic, 2, partition=0)
    rows = kafka(subscribe=topic, includeHeaders="true").load().orderBy("offset").collect()
    assert rows[0].headers == [("trace", b"t1"), ("empty", b"")]
    assert [r.headers for r in rows[3:]] == [None, None]  # as Spark's Kafka source: null, not []
    df = kafka(subscribe=topic, includeHeaders="true").load()
    assert df.where("headers IS NULL").count() == 2
    schema = kafka(subscribe=topic, includeHeaders="true").load().schema
    assert schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    assert "headers" not in kafka(subscribe=topic).load().schema.fieldNames()


def test_starting_and_ending_offsets_json_and_assign(kafka, make_topic, produce):
    topic = make_topic(partitions=2)
    produce(topic, 50, partition=0)
    produce(topic, 30, partition=1)
    df = kafka(
        subscribe=topic,
        startingOffsets=f'{{"{topic}":{{"0":10,"1":-2}}}}',
        endingOffsets=f'{{"{topic}":{{"0":20,"1":-1}}}}',
    ).load()
    assert _per_partition(df) == {0: (10, 10, 10, 19), 1: (30, 30, 0, 29)}
    df = kafka(assign=f'{{"{topic}":[1]}}', startingOffsets=f'{{"{topic}":{{"1":25}}}}').load()
    assert _per_partition(df) == {1: (5, 5, 25, 29)}


def test_subscribe_pattern(kafka, broker, produce):
    stem = f"pat-{uuid.uuid4().hex[:8]}"
    for name, n in ((f"{stem}-a", 5), (f"{stem}-b", 7), (f"x{stem}-c", 11)):  # the last matches only a search
        broker.create_topic(name, partitions=2)
        produce(name, n)
    rows = kafka(subscribePattern=f"{stem}-.*").load().groupBy("topic").count().collect()
    assert dict(rows) == {f"{stem}-a": 5, f"{stem}-b": 7}  # a full match, as Java's Pattern.matches


def test_timestamp_type_column_from_log_append_time_batches():
    """poll_batch's timestamp_type (a batch attribute) reaches Spark's timestampType. Built from record
    batches here: Tansu 0.6 ignores a topic's message.timestamp.type=LogAppendTime (create time is kept)."""
    from fsm_consumer.fetch import TopicPartition
    from fsm_consumer.fetch._columns import assemble, decode_partition_columns
    from fsm_consumer.fetch.testing import batch
    from fsm_consumer.spark._schema import arrow_schema, spark_schema, to_spark

    ts = 1_700_000_000_000
    data = (
        batch([b"a", b"b"], log_append_time=ts)
        + batch([b"c"], base_offset=2)
        + batch([b"d"], base_offset=3, log_append_time=ts + 5)
    )
    columns = decode_partition_columns("t", 0, data, fetch_offset=1).columns
    polled = assemble([(TopicPartition("t", 0), columns.slice(0, 2)), (TopicPartition("t", 0), columns.slice(2))])
    assert polled.column("timestamp_type").to_pylist() == [1, 0, 1]
    rows = to_spark(polled, include_headers=True)
    assert rows.schema.equals(arrow_schema(spark_schema(True)))
    assert rows.column("timestampType").to_pylist() == [1, 0, 1]
    assert rows.column("timestamp")[0].as_py().timestamp() * 1000 == ts
    assert rows.column("topic").to_pylist() == ["t"] * 3
    assert rows.column("headers").to_pylist() == [None] * 3  # records without headers: null, as Spark's


def test_a_read_task_never_loads_arrow_compute():
    """Every Spark task's Python worker decodes and converts its range: none of it may load Arrow's compute
    kernels (memory in every worker; views of the fetched data have no compute kernels anyway), missing
    timestamps and headers included. Run in a fresh interpreter, whose modules are its own."""
    import subprocess
    import sys

    script = """
import sys
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.fetch._columns import assemble, decode_partition_columns
from fsm_consumer.fetch.testing import Rec, batch
from fsm_consumer.spark._schema import to_spark
data = batch([Rec(b"k", b"v" * 40), Rec(None, None, (), -1)], base_offset=5) + batch([b"x" * 20, b"y"], base_offset=7)
columns = decode_partition_columns("t", 0, data, fetch_offset=6).columns
rows = to_spark(assemble([(TopicPartition("t", 0), columns)]), include_headers=False)
assert rows.column("offset").to_pylist() == [6, 7, 8], rows
assert rows.column("value").to_pylist() == [None, b"x" * 20, b"y"]
assert rows.column("topic").to_pylist() == ["t"] * 3
assert rows.column("timestamp").null_count == 1 and rows.column("timestampType").to_pylist() == [-1, 0, 0]
headed = batch([Rec(b"v", headers=[("a", b"1"), ("b", None)]), Rec(b"w"), Rec(b"x", headers=[("a", b"")])])
expected = [[{"key": "a", "value": b"1"}, {"key": "b", "value": None}], None, [{"key": "a", "value": b""}]]
for fetch_offset in (0, 1):  # the compiled walk's header spans; the Python walk's pairs (headers below it)
    columns = decode_partition_columns("t", 0, headed, fetch_offset=fetch_offset).columns
    rows = to_spark(assemble([(TopicPartition("t", 0), columns)]), include_headers=True)
    assert rows.column("headers").to_pylist() == expected[fetch_offset:], rows
print("pyarrow.compute" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "options, named",
    [
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "assign"),
        ({"subscribe": "a", "subscribePattern": "a.*"}, "subscribePattern"),
        ({}, "subscribe"),
        ({"assign": '{"a":[0'}, "assign"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":}}'}, "startingOffsets"),
        # unknown: named as given (pyspark lower-cases option names), with the closest known one
        ({"subscribe": "a", "startingOfsets": "earliest"}, "startingofsets': unknown option"),
        ({"subscribe": "a", "startingOfsets": "earliest"}, "did you mean 'startingOffsets'?"),
        ({"subscribe": "a", "kafka.security.protocl": "SSL"}, "kafka.security.protocl': no fsm_consumer config key"),
        ({"subscribe": "a", "kafka.security.protocl": "SSL"}, "did you mean 'kafka.security.protocol'?"),
        ({"subscribe": "a", "kafka.group.id": ""}, "kafka.group.id"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ],
)
def test_bad_options_fail_naming_the_option(kafka, options, named):
    with pytest.raises(Exception) as caught:  # at load(): pyspark asks the source for its schema there
        kafka(**options).load()
    message = str(caught.value)
    assert f"fsm_kafka option '{named}" in message or named in message and "fsm_kafka option" in message


def test_missing_bootstrap_servers_is_named(spark, kafka):
    with pytest.raises(Exception) as caught:
        spark.read.format("fsm_kafka").option("subscribe", "a").load()
    assert "fsm_kafka option 'kafka.bootstrap.servers'" in str(caught.value)


@pytest.mark.parametrize(
    "options, named",
    [
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"commitToGroup": "g"}, "commitToGroup"),
    ],
)
def test_what_spark_refuses_in_batch_reads(kafka, big_topic, options, named):
    with pytest.raises(Exception) as caught:
        kafka(subscribe=big_topic, **options).load().collect()
    assert f"fsm_kafka option '{named}'" in str(caught.value)


def test_data_loss_past_the_end(kafka, make_topic, produce):
    topic = make_topic(partitions=1)
    produce(topic, 10, partition=0)
    ending = f'{{"{topic}":{{"0":1000}}}}'
    with pytest.raises(Exception) as caught:
        kafka(subscribe=topic, endingOffsets=ending).load().collect()
    assert f"{topic}-0" in str(caught.value) and "failOnDataLoss" in str(caught.value)
    df = kafka(subscribe=topic, endingOffsets=ending, failOnDataLoss="false").load()
    assert _per_partition(df) == {0: (10, 10, 0, 9)}


def test_register_with_spark_itself(spark, broker, make_topic, produce):
    topic = make_topic(partitions=1)
    produce(topic, 3, partition=0)
    spark.dataSource.register(KafkaDataSource)
    df = (
        spark.read.format("FSM_KAFKA")
        .option("Kafka.Bootstrap.Servers", broker.bootstrap_servers)
        .option("SUBSCRIBE", topic)
        .load()
    )
    assert df.count() == 3


def test_an_executor_range_past_the_log_end_is_data_loss(broker, make_topic, produce):
    """The executors' check (the log changed after planning): Tansu answers a fetch past the log's end
    with nothing, so a range that stops making progress is checked against the log's bounds."""
    from fsm_consumer.spark._offsets import DataLossError
    from fsm_consumer.spark._options import parse
    from fsm_consumer.spark._ranges import KafkaRange
    from fsm_consumer.spark._read import read_range

    topic = make_topic(partitions=1)
    produce(topic, 10, partition=0)
    options = {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic}
    with pytest.raises(DataLossError, match=f"{topic}-0: offsets 10 to 14 are not in the log"):
        list(read_range(parse(options), KafkaRange(topic, 0, 2, 15)))
    batches = list(read_range(parse({**options, "failOnDataLoss": "false"}), KafkaRange(topic, 0, 2, 15)))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(2, 10))
    assert list(read_range(parse(options), KafkaRange(topic, 0, 3, 7)))[0].column("offset").to_pylist() == [3, 4, 5, 6]
