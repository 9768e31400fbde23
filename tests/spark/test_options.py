"""fsm_kafka's options, offset resolution, range splitting and rate limiting, without Spark's JVM."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from fsm_consumer.spark import KafkaDataSource  # noqa: E402
from fsm_consumer.spark._offsets import decode, encode, resolve  # noqa: E402
from fsm_consumer.spark._options import KafkaOptionError, check_batch, check_stream, parse  # noqa: E402
from fsm_consumer.spark._ranges import KafkaRange, split  # noqa: E402
from fsm_consumer.spark._stream import rate_limit  # noqa: E402

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def _parse(**options):
    return parse({**BASE, **options})


def _refused(option_named: str, fragment: str = "", **options):
    with pytest.raises(KafkaOptionError) as caught:
        check_stream(check_batch(parse(options)))
    assert caught.value.option == option_named
    assert fragment in str(caught.value)
    return str(caught.value)


def test_defaults_are_sparks():
    opts = parse(BASE)
    assert (
        opts.subscribe,
        opts.starting,
        opts.ending,
        opts.fail_on_data_loss,
        opts.include_headers,
        opts.min_partitions,
        opts.max_offsets_per_trigger,
        opts.commit_to_group,
    ) == (("t",), None, None, True, False, None, None, None)
    assert opts.poll_timeout_ms == 120_000 and opts.consumer_config(group_id=None) == {
        "bootstrap_servers": "127.0.0.1:9092",
        "group_id": None,
    }


def test_names_are_case_insensitive_and_kafka_options_map_to_consumer_keys():
    opts = parse(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1",
            "SubScribe": " a, b ,,a ",
            "INCLUDEHEADERS": "TRUE",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="alice" password="s3\\"cret";',
            "kafka.ssl.cafile": "/ca.pem",
            "kafka.ssl.endpoint.identification.algorithm": "",
            "kafka.max.poll.records": "1000",
            "kafka.check.crcs": "false",
            "kafka.isolation.level": "read_committed",
        }
    )
    assert opts.subscribe == ("a", "b") and opts.include_headers
    assert opts.kafka_params == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": 's3"cret',
        "ssl_cafile": "/ca.pem",
        "ssl_check_hostname": False,
        "max_poll_records": 1000,
        "check_crcs": False,
        "isolation_level": "read_committed",
    }


@pytest.mark.parametrize(
    "options, named, fragment",
    [
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "assign", "only one of subscribe, subscribePattern, assign"),
        ({"subscribePattern": "a", "subscribe": "b"}, "subscribePattern", "only one of"),
        ({}, "subscribe", "must be specified"),
        ({"subscribe": " , "}, "subscribe", "no topics"),
        ({"subscribePattern": "a(("}, "subscribePattern", "not a regular expression"),
        ({"assign": "{"}, "assign", "malformed JSON"),
        ({"assign": '{"a":["0"]}'}, "assign", 'expected e.g. {"topicA":[0,1]'),
        ({"assign": "{}"}, "assign", "no topic-partitions"),
        ({"subscribe": "a", "startingOffsets": "newest"}, "startingOffsets", "is not one of earliest, latest"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, "startingOffsets", "-3 for a-0"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"x":1}}'}, "startingOffsets", "expected e.g."),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":1}'}, "startingOffsets", "malformed JSON"),
        ({"subscribe": "a", "startingTimestamp": "yesterday"}, "startingTimestamp", "a long"),
        ({"subscribe": "a", "startingOffsetsByTimestamp": '{"a":{"0":-1}}'}, "startingOffsetsByTimestamp", "-1"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "fail"}, "startingOffsetsByTimestampStrategy", ""),
        ({"subscribe": "a", "minPartitions": "0"}, "minPartitions", ">= 1"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger", "not an integer"),
        ({"subscribe": "a", "failOnDataLoss": "yes"}, "failOnDataLoss", "boolean"),
        ({"subscribe": "a", "includeHeaders": "1"}, "includeHeaders", "boolean"),
        ({"subscribe": "a", "commitToGroup": " "}, "commitToGroup", "empty"),
        ({"subscribe": "a", "startingoffset": "earliest"}, "startingoffset", "did you mean 'startingOffsets'?"),
        ({"subscribe": "a", "subscribepatern": "x"}, "subscribepatern", "did you mean 'subscribePattern'?"),
        ({"subscribe": "a", "flux": "1"}, "flux", "unknown option"),
        ({"subscribe": "a", "topic": "a"}, "topic", "the Kafka sink's option"),
        ({"subscribe": "a", "minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger", ">= 1"),
        (
            {"subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
            "minOffsetsPerTrigger",
            "higher than maxOffsetsPerTrigger (5)",
        ),
        ({"subscribe": "a", "maxTriggerDelay": "soon"}, "maxTriggerDelay", "not a duration"),
        ({"subscribe": "a", "kafka.group.id": " "}, "kafka.group.id", "empty"),
        ({"subscribe": "a", "groupIdPrefix": ""}, "groupIdPrefix", "empty"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset", "startingOffsets"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit", "never commits"),
        ({"subscribe": "a", "kafka.value.deserializer": "x"}, "kafka.value.deserializer", "bytes"),
        ({"subscribe": "a", "kafka.ssl.context": "x"}, "kafka.ssl.context", "Python object"),
        (
            {"subscribe": "a", "kafka.max.pol.records": "5"},
            "kafka.max.pol.records",
            "did you mean 'kafka.max.poll.records'?",
        ),
        ({"subscribe": "a", "kafka.max.poll.records": "many"}, "kafka.max.poll.records", "not an integer"),
        ({"subscribe": "a", "kafka.max.poll.records": "0"}, "kafka.max.poll.records", "an integer >= 1"),
        ({"subscribe": "a", "kafka.security.protocol": "TLS"}, "kafka.security.protocol", "'TLS' is not allowed"),
        ({"subscribe": "a", "kafka.security.protocol": "SASL_SSL"}, "kafka.sasl.mechanism", "is required"),
        ({"subscribe": "a", "kafka.sasl.jaas.config": "x required;"}, "kafka.sasl.jaas.config", "username="),
    ],
)
def test_bad_options_are_named(options, named, fragment):
    _refused(named, fragment, **{"kafka.bootstrap.servers": "h:1", **options})


def test_missing_bootstrap_servers():
    _refused("kafka.bootstrap.servers", "required", subscribe="a")
    _refused("kafka.bootstrap.servers", "required", subscribe="a", **{"kafka.bootstrap.servers": " "})


@pytest.mark.parametrize(
    "options, named",
    [
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"startingOffsets": '{"t":{"0":-1}}'}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"endingOffsets": '{"t":{"0":-2}}'}, "endingOffsets"),
        ({"commitToGroup": "g"}, "commitToGroup"),
    ],
)
def test_what_a_batch_read_refuses(options, named):
    with pytest.raises(KafkaOptionError) as caught:
        check_batch(_parse(**options))
    assert caught.value.option == named
    if named != "endingOffsets":
        check_stream(_parse(**options))  # fine for a stream


@pytest.mark.parametrize("name", ["endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"])
def test_a_stream_refuses_ending_offsets(name):
    value = '{"t":{"0":5}}' if name.endswith("ByTimestamp") else "5" if name == "endingTimestamp" else "latest"
    with pytest.raises(KafkaOptionError) as caught:
        check_stream(_parse(**{name: value}))
    assert caught.value.option == name
    check_batch(_parse(**{name: value}))


def test_starting_precedence_and_parsed_specs():
    opts = _parse(startingOffsets="earliest", startingOffsetsByTimestamp='{"t":{"0":5}}', startingTimestamp="7")
    assert (opts.starting.kind, opts.starting.timestamp, opts.starting.option) == ("timestamp", 7, "startingTimestamp")
    opts = _parse(startingOffsets="earliest", startingOffsetsByTimestamp='{"t":{"0":5}}')
    assert (opts.starting.kind, opts.starting.offsets) == ("timestamps", {("t", 0): 5})
    opts = _parse(startingOffsets=' {"t":{"1":-2,"0":17}} ', endingOffsets="LATEST")
    assert opts.starting.offsets == {("t", 0): 17, ("t", 1): -2} and opts.ending.kind == "latest"
    assert parse({"kafka.bootstrap.servers": "h:1", "assign": '{"b":[2,0],"a":[1]}'}).assign == (
        ("a", 1),
        ("b", 0),
        ("b", 2),
    )


class _Lookup:
    """A stand-in for OffsetLookup: earliest 10, latest 100, a record at or after ts for partition 0 only."""

    def __init__(self):
        self.calls = []

    def earliest(self, tps):
        self.calls.append(("earliest", sorted(tps)))
        return {tp: 10 for tp in tps}

    def latest(self, tps):
        self.calls.append(("latest", sorted(tps)))
        return {tp: 100 for tp in tps}

    def for_times(self, stamps):
        return {tp: (ts // 1000 if tp[1] == 0 else None) for tp, ts in stamps.items()}


TPS = [("t", 0), ("t", 1)]


def test_resolve_offsets_json_timestamps_and_the_all_partitions_rule():
    lookup = _Lookup()
    spec = _parse(startingOffsets='{"t":{"0":-2,"1":-1}}').starting
    assert resolve(spec, TPS, lookup, ending=False) == {("t", 0): 10, ("t", 1): 100}
    assert resolve(_parse(startingOffsets='{"t":{"0":5,"1":6}}').starting, TPS, lookup, ending=False) == {
        ("t", 0): 5,
        ("t", 1): 6,
    }
    with pytest.raises(KafkaOptionError, match="must name all the TopicPartitions read: named t-0; read t-0, t-1"):
        resolve(_parse(startingOffsets='{"t":{"0":5}}').starting, TPS, lookup, ending=False)
    spec = _parse(startingTimestamp="42000").starting
    with pytest.raises(KafkaOptionError, match="no offset matched the timestamp for t-1"):
        resolve(spec, TPS, lookup, ending=False)
    assert resolve(spec, TPS, lookup, ending=False, by_timestamp_strategy="latest") == {("t", 0): 42, ("t", 1): 100}
    assert resolve(_parse(endingTimestamp="42000").ending, TPS, lookup, ending=True) == {("t", 0): 42, ("t", 1): 100}


def test_offsets_encode_canonically():
    offsets = {("b", 10): 1, ("b", 2): 5, ("a", 0): 7}
    assert list(encode(offsets)) == ["a", "b"] and list(encode(offsets)["b"]) == ["2", "10"]
    assert decode(encode(offsets)) == offsets and decode(None) == {}


def _covers(pieces, ranges):
    by_tp = {}
    for p in pieces:
        by_tp.setdefault((p.topic, p.partition), []).append(p)
    for r in ranges:
        got = sorted(by_tp.pop((r.topic, r.partition), []), key=lambda p: p.start)
        if r.size <= 0:
            assert not got
            continue
        assert got[0].start == r.start and got[-1].end == r.end
        assert all(a.end == b.start and a.size > 0 for a, b in pairwise(got))
    assert not by_tp


def test_split_reaches_min_partitions():
    ranges = [KafkaRange("t", p, 0, 25_000) for p in range(4)]
    assert split(ranges) == ranges
    for n in (4, 8, 10, 13):
        pieces = split(ranges, n)
        assert len(pieces) == n
        _covers(pieces, ranges)
    uneven = [KafkaRange("t", 0, 0, 1000), KafkaRange("t", 1, 0, 3), KafkaRange("t", 2, 5, 5)]
    pieces = split(uneven, 8)
    # shares by size (as Spark: rounded, so one more here), the small one not starved
    assert [p.partition for p in pieces] == [0] * 8 + [1]
    _covers(pieces, uneven)
    assert len(split([KafkaRange("t", 0, 0, 3)], 10)) == 3  # no more pieces than offsets


def test_split_max_records_per_partition():
    pieces = split([KafkaRange("t", 0, 0, 1000), KafkaRange("t", 1, 0, 10)], max_records_per_partition=300)
    assert [(p.partition, p.size) for p in pieces] == [(0, 250), (0, 250), (0, 250), (0, 250), (1, 10)]


@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=6),
    wanted=st.integers(1, 40),
    cap=st.one_of(st.none(), st.integers(1, 3000)),
)
def test_split_covers_every_offset_once(sizes, wanted, cap):
    ranges = [KafkaRange("t", p, 100, 100 + size) for p, size in enumerate(sizes)]
    pieces = split(ranges, wanted, cap)
    _covers(pieces, ranges)
    assert len(pieces) >= min(wanted, sum(sizes))
    assert cap is None or all(p.size <= cap for p in pieces)


def test_rate_limit_shares_in_proportion_and_never_exceeds_the_limit():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 50}
    until = {("t", 0): 600, ("t", 1): 400, ("t", 2): 50}
    assert rate_limit(300, start, until) == {("t", 0): 180, ("t", 1): 120, ("t", 2): 50}
    assert rate_limit(5000, start, until) == until
    small = rate_limit(10, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1})
    assert sum(small.values()) == 10  # Spark rounds the small partition's share up, past the limit


@given(sizes=st.lists(st.integers(0, 10_000), min_size=1, max_size=8), limit=st.integers(1, 20_000))
def test_rate_limit_bounds(sizes, limit):
    start = {("t", p): 7 for p in range(len(sizes))}
    until = {("t", p): 7 + size for p, size in enumerate(sizes)}
    got = rate_limit(limit, start, until)
    assert sum(got[tp] - start[tp] for tp in got) == min(limit, sum(sizes))
    assert all(start[tp] <= got[tp] <= until[tp] for tp in got)


def test_the_data_source_schema_and_name():
    assert KafkaDataSource.name() == "fsm_kafka"
    fields = KafkaDataSource(options=dict(BASE)).schema().fieldNames()
    assert fields == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    with_headers = KafkaDataSource(options={**BASE, "includeHeaders": "true"}).schema()
    assert with_headers.fieldNames()[-1] == "headers"
    source = KafkaDataSource(options=dict(BASE))
    with pytest.raises(ValueError, match="fixed schema"):
        source.reader(with_headers)
    assert source.reader(source.schema()).opts.subscribe == ("t",)


def test_checking_options_does_not_import_kafka_python():
    """PySpark's create worker builds the source and asks its schema: kafka-python's package (11 MB, 0.15 s)
    is imported only when a check fails (its error classes are the bases of ours)."""
    import subprocess
    import sys

    script = """
import sys
from fsm_consumer.spark import KafkaDataSource
options = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t", "kafka.max.poll.records": "5",
           "kafka.session.timeout.ms": "10000", "kafka.security.protocol": "SSL"}
assert KafkaDataSource(options=options).schema().fieldNames()[0] == "key"
print("kafka" in sys.modules)
try:
    KafkaDataSource(options={**options, "kafka.heartbeat.interval.ms": "20000"}).schema()
except Exception as exc:
    print(type(exc).__name__, exc)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, failed = out.stdout.strip().splitlines()
    assert first == "False"
    assert failed.startswith("KafkaOptionError") and "kafka.heartbeat.interval.ms" in failed, failed
    assert "must be below session_timeout_ms" in failed, failed


def test_kafka_group_id_is_carried_by_every_consumer_and_group_id_prefix_names_the_generated_one(caplog):
    """As Spark's source: kafka.group.id is the group id of the driver's and the executors' consumers (for
    brokers that authorize by group; never joined, never committed to; a warning says so and that
    groupIdPrefix is then ignored); without it each query makes one, groupIdPrefix (default
    spark-kafka-relation for a batch read, spark-kafka-source for a stream), a dash and a UUID, with -driver
    and -executor appended per role."""
    given = _parse(**{"kafka.group.id": "authorized", "groupIdPrefix": "p"}).with_group_id("stream")
    assert given.carried_group_id("driver") == given.carried_group_id("executor") == "authorized"
    assert "kafka.group.id 'authorized' is carried" in caplog.text and "groupIdPrefix is ignored" in caplog.text
    assert "group_id" not in given.kafka_params and given.consumer_config() == {
        "bootstrap_servers": BASE["kafka.bootstrap.servers"]
    }
    batch = _parse().with_group_id("batch")
    stem = batch.generated_group_id
    assert (
        stem is not None and stem.startswith("spark-kafka-relation-") and len(stem) == len("spark-kafka-relation-") + 36
    )
    assert (batch.carried_group_id("driver"), batch.carried_group_id("executor")) == (
        f"{stem}-driver",
        f"{stem}-executor",
    )
    assert batch.with_group_id("batch") is batch  # once per query: the executors get the driver's
    stream = _parse().with_group_id("stream").generated_group_id
    assert stream.startswith("spark-kafka-source-") and stream != _parse().with_group_id("stream").generated_group_id
    assert _parse(groupIdPrefix="etl").with_group_id("stream").generated_group_id.startswith("etl-")
    assert _parse().carried_group_id("executor") is None  # options not yet a query's


class _Offsets:
    """The driver's offsets, set by the test (what KafkaStreamReader asks OffsetLookup)."""

    def __init__(self, latest):
        self.now = dict(latest)

    def partitions(self):
        return sorted(self.now)

    def latest(self, tps):
        return {tp: self.now[tp] for tp in tps}

    def earliest(self, tps):
        return dict.fromkeys(tps, 0)


def _stream_reader(latest, **options):
    from fsm_consumer.spark._stream import KafkaStreamReader

    reader = KafkaStreamReader(check_stream(_parse(**options)))
    reader._lookup = _Offsets(latest)
    clock = [1000.0]
    reader.clock = lambda: clock[0]
    return reader, reader._lookup, clock


def test_min_offsets_per_trigger_and_max_trigger_delay_as_sparks_source():
    """Spark's delayBatch: the first trigger makes a batch; then a trigger makes one only when at least
    minOffsetsPerTrigger new offsets are there, or maxTriggerDelay has passed since the last batch (which
    then takes what there is); maxOffsetsPerTrigger still bounds a batch; Trigger.Once (the engine's
    ReadAllAvailable) and Trigger.AvailableNow are never held back."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    tp0, tp1 = ("t", 0), ("t", 1)
    reader, lookup, clock = _stream_reader({tp0: 3, tp1: 0}, minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    assert reader.getDefaultReadLimit() == ReadMinRows(10)
    limit = reader.getDefaultReadLimit()
    start = {"t": {"0": 0, "1": 0}}
    assert reader.latestOffset(start, limit) == {"t": {"0": 3, "1": 0}}  # the first trigger: a batch
    start = {"t": {"0": 3, "1": 0}}
    lookup.now = {tp0: 7, tp1: 5}  # 9 new: fewer than 10
    clock[0] += 10
    assert reader.latestOffset(start, limit) == start  # held: no batch this trigger
    lookup.now = {tp0: 8, tp1: 5}  # 10 new
    clock[0] += 1
    assert reader.latestOffset(start, limit) == {"t": {"0": 8, "1": 5}}
    start = {"t": {"0": 8, "1": 5}}
    lookup.now = {tp0: 9, tp1: 5}
    clock[0] += 29.9
    assert reader.latestOffset(start, limit) == start  # 1 new, 29.9 s since the last batch
    clock[0] += 0.1
    assert reader.latestOffset(start, limit) == {"t": {"0": 9, "1": 5}}  # maxTriggerDelay passed
    assert reader.latestOffset({"t": {"0": 9, "1": 5}}, ReadAllAvailable()) == {"t": {"0": 9, "1": 5}}
    lookup.now = {tp0: 10, tp1: 5}
    assert reader.latestOffset({"t": {"0": 9, "1": 5}}, ReadAllAvailable()) == {"t": {"0": 10, "1": 5}}  # Once

    both, lookup, clock = _stream_reader({tp0: 0, tp1: 0}, minOffsetsPerTrigger="4", maxOffsetsPerTrigger="6")
    assert both.getDefaultReadLimit() == ReadMaxRows(6)
    assert both.latestOffset({"t": {"0": 0, "1": 0}}, ReadMaxRows(6)) == {"t": {"0": 0, "1": 0}}  # first: empty
    lookup.now = {tp0: 2, tp1: 1}
    clock[0] += 1
    assert both.latestOffset({"t": {"0": 0, "1": 0}}, ReadMaxRows(6)) == {"t": {"0": 0, "1": 0}}  # 3 < 4
    lookup.now = {tp0: 20, tp1: 10}
    got = both.latestOffset({"t": {"0": 0, "1": 0}}, ReadMaxRows(6))
    assert sum(got["t"].values()) == 6  # let through, and bounded by maxOffsetsPerTrigger

    now, lookup, clock = _stream_reader({tp0: 2, tp1: 0}, minOffsetsPerTrigger="100")
    now.prepareForTriggerAvailableNow()
    assert now.latestOffset({"t": {"0": 0, "1": 0}}, now.getDefaultReadLimit()) == {"t": {"0": 2, "1": 0}}
    clock[0] += 1
    assert now.latestOffset({"t": {"0": 0, "1": 0}}, now.getDefaultReadLimit()) == {"t": {"0": 2, "1": 0}}


def test_trigger_options_are_ignored_by_a_batch_read_with_sparks_warning(caplog):
    check_batch(_parse(minOffsetsPerTrigger="5", maxTriggerDelay="1m"))
    assert "minOffsetsPerTrigger ignored in batch queries" in caplog.text
    assert "maxTriggerDelay ignored in batch queries" in caplog.text
