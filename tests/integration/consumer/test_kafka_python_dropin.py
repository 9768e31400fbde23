"""A drop-in for kafka-python (issues 11 and 23): each defect found with kafka-python's own tests, fault
probes and scripts run against both has its regression test here, on both brokers.

Commits are read back by a second consumer of the same group (``committed()``), never by the one
that made them."""

from __future__ import annotations

import select
import socket
import threading
import time

import kafka.errors as ke
import kafka.structs
import pytest

from fsm_consumer import (
    CommitFailedError,
    ConfigError,
    Consumer,
    ConsumerRebalanceListener,
    KafkaTimeoutError,
    OffsetAndMetadata,
    TopicPartition,
)

pytestmark = pytest.mark.integration

GROUP = dict(
    session_timeout_ms=3000,
    heartbeat_interval_ms=300,
    auto_offset_reset="earliest",
    request_timeout_ms=5000,
    default_api_timeout_ms=10_000,
)


def _committed(broker, group: str, tp: TopicPartition):
    with Consumer(
        bootstrap_servers=broker.bootstrap_servers, group_id=group, enable_auto_commit=False, api_version=(3, 9)
    ) as other:
        return other.committed(tp, timeout_ms=10_000)


def _network_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("fsm-consumer-network-") and t.is_alive()]


def _poll_until(consumer, n: int, *, max_records=None, timeout_s: float = 15.0):
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=100, max_records=max_records or n - len(got)).values():
            got.extend(records)
    return got


# -- 1: positions follow what was handed out ---------------------------------------------------------
@pytest.mark.parametrize("k", [1, 3, 9])
def test_iterator_that_stops_after_k_records_leaves_the_group_committed_at_k(broker, make_topic, produce, k):
    topic = make_topic()
    produce(topic, 10, partition=0)
    group = f"g-{topic}"
    tp = TopicPartition(topic, 0)
    with Consumer(
        topic,
        bootstrap_servers=broker.bootstrap_servers,
        group_id=group,
        auto_commit_interval_ms=100,
        consumer_timeout_ms=20_000,
        **GROUP,
    ) as consumer:
        taken = [next(consumer) for _ in range(k)]
        assert [r.offset for r in taken] == list(range(k))
        assert consumer.position(tp) == k
        time.sleep(0.4)  # several auto-commit intervals: they commit what was handed out, not the batch
    assert _committed(broker, group, tp) == k
    # the next member of the group starts exactly there
    with Consumer(
        topic, bootstrap_servers=broker.bootstrap_servers, group_id=group, consumer_timeout_ms=20_000, **GROUP
    ) as consumer:
        assert next(consumer).offset == k


def test_poll_max_records_commits_only_what_was_returned(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 10, partition=0)
    group = f"g-{topic}"
    tp = TopicPartition(topic, 0)
    with Consumer(
        topic, bootstrap_servers=broker.bootstrap_servers, group_id=group, enable_auto_commit=False, **GROUP
    ) as consumer:
        got = _poll_until(consumer, 4, max_records=4)
        assert [r.offset for r in got] == [0, 1, 2, 3]
        consumer.commit()
    assert _committed(broker, group, tp) == 4


def test_abandoned_iterator_then_poll_loses_and_repeats_nothing(broker, make_topic, produce, make_consumer):
    topic = make_topic()
    produce(topic, 30, partition=0)
    tp = TopicPartition(topic, 0)
    consumer = make_consumer(consumer_timeout_ms=10_000)
    consumer.assign([tp])
    first = [next(consumer) for _ in range(5)]
    rest = _poll_until(consumer, 25)
    assert [r.offset for r in first + rest] == list(range(30))


def test_poll_update_offsets_false_leaves_positions_to_the_caller(make_topic, produce, make_consumer):
    topic = make_topic()
    produce(topic, 6, partition=0)
    tp = TopicPartition(topic, 0)
    consumer = make_consumer()
    consumer.assign([tp])
    deadline = time.monotonic() + 10
    got = {}
    while not got and time.monotonic() < deadline:
        got = consumer.poll(timeout_ms=100, update_offsets=False)
    assert [r.offset for r in got[tp]] == list(range(6))
    assert consumer.position(tp) == 0  # not moved
    again = _poll_until(consumer, 6)  # so the same records come again
    assert [r.offset for r in again] == list(range(6))
    assert consumer.position(tp) == 6


# -- 2: commit on revoke during close() -------------------------------------------------------------
def test_commit_inside_on_partitions_revoked_during_close_lands(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 10, partition=0)
    group = f"g-{topic}"
    tp = TopicPartition(topic, 0)
    seen = []

    class CommitOnRevoke(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            if revoked:
                seen.append(consumer.position(tp))
                consumer.commit({tp: OffsetAndMetadata(7, "", -1)})
                seen.append("committed")

    consumer = Consumer(bootstrap_servers=broker.bootstrap_servers, group_id=group, enable_auto_commit=False, **GROUP)
    consumer.subscribe([topic], listener=CommitOnRevoke())
    assert len(_poll_until(consumer, 10)) == 10
    consumer.close()
    assert seen == [10, "committed"]
    assert _committed(broker, group, tp) == 7


def test_close_without_autocommit_commits_nothing(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 5, partition=0)
    group = f"g-{topic}"
    consumer = Consumer(
        topic, bootstrap_servers=broker.bootstrap_servers, group_id=group, auto_commit_interval_ms=60_000, **GROUP
    )
    assert len(_poll_until(consumer, 5)) == 5
    consumer.close(autocommit=False)
    assert _committed(broker, group, TopicPartition(topic, 0)) is None
    with pytest.raises(ke.IllegalStateError):
        consumer.poll()


# -- 3, 4: lookups ----------------------------------------------------------------------------------------
def test_empty_lookups_return_at_once(make_consumer):
    consumer = make_consumer()
    for call in (
        lambda: consumer.offsets_for_times({}),
        lambda: consumer.beginning_offsets([]),
        lambda: consumer.end_offsets([]),
    ):
        started = time.monotonic()
        assert call() == {}
        assert time.monotonic() - started < 0.1


def test_lookup_timeouts_say_what_and_why(make_topic, make_consumer):
    topic = make_topic(partitions=4)
    consumer = make_consumer(request_timeout_ms=700, allow_auto_create_topics=False)
    bad = TopicPartition(topic, 100)
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError) as caught:
        consumer.offsets_for_times({bad: 0})  # no timeout_ms: request_timeout_ms, as kafka-python
    assert time.monotonic() - started < 3
    message = str(caught.value)
    assert message.startswith(f"offsets_for_times for {topic}-100 did not complete within 700 ms")
    assert f"partition 100 of topic {topic!r} does not exist: the topic has 4 partitions" in message
    assert "Event" not in message and not message.startswith("KafkaTimeoutError")
    with pytest.raises(KafkaTimeoutError, match="topic 'no-such-topic-x' does not exist"):
        consumer.end_offsets([TopicPartition("no-such-topic-x", 0)], timeout_ms=500)


def test_offsets_for_times_reports_the_brokers_leader_epoch(make_topic, send, make_consumer):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    now = int(time.time() * 1000)
    send(topic, [{"partition": 0, "value": b"x", "timestamp": now}], each=True)
    found = make_consumer().offsets_for_times({tp: now - 1000})[tp]
    assert isinstance(found, kafka.structs.OffsetAndTimestamp)
    assert found.offset == 0 and found.leader_epoch >= 0  # the broker's epoch (Tansu: 0), not -1


def test_partitions_for_unknown_topic_is_empty_and_creates_nothing(make_consumer):
    consumer = make_consumer()
    name = f"never-created-{time.monotonic_ns()}"
    assert consumer.partitions_for_topic(name) == set()  # kafka-python 3.0's answer
    assert name not in consumer.topics()


# -- 5: group-less subscribe, failed construction --------------------------------------------------------
def test_subscribe_without_group_reads_every_partition(broker, make_topic, produce):
    topic = make_topic(partitions=3)
    produce(topic, 30, key=lambda i: b"k%d" % i)
    with Consumer(topic, bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        got = _poll_until(consumer, 30)
        assert len(got) == 30 and {r.partition for r in got} == {0, 1, 2}
        assert consumer.assignment() == {TopicPartition(topic, p) for p in range(3)}
        assert consumer.subscription() == {topic}
        with pytest.raises(ke.IllegalStateError):
            consumer.commit()  # no group, no commits


def test_subscribe_without_group_follows_new_matching_topics(broker, make_topic, produce):
    """Metadata changes reach the assignment: a topic created later that matches the pattern is read
    (Tansu 0.6 cannot add partitions to a topic, CreatePartitions is unsupported; the same path is
    unit-tested with a partition added in tests/unit/managers/test_self_assign.py)."""
    first = make_topic()
    stem = first.rsplit("-", 2)[0]
    produce(first, 2)
    with Consumer(
        bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest", metadata_max_age_ms=300
    ) as consumer:
        consumer.subscribe(pattern=f"{stem}-.*")
        assert len(_poll_until(consumer, 2)) == 2
        second = make_topic(partitions=2)
        produce(second, 4, key=lambda i: b"k%d" % i)
        got = _poll_until(consumer, 4)
        assert {r.topic for r in got} == {second} and len(got) == 4
        assert {tp.topic for tp in consumer.assignment()} == {first, second}


def test_failed_construction_leaves_no_thread(broker, monkeypatch):
    before = len(_network_threads())
    with pytest.raises(ConfigError, match="'max_poll_records'"):
        Consumer("t", bootstrap_servers=broker.bootstrap_servers, max_poll_records=0)
    with pytest.raises(TypeError, match="non-empty strings"):
        Consumer("", bootstrap_servers=broker.bootstrap_servers)

    def boom(self, timeout_ms):
        raise RuntimeError("injected failure after the background thread started")

    monkeypatch.setattr(Consumer, "_infer_api_version", boom)
    with pytest.raises(RuntimeError, match="injected"):
        Consumer("t", bootstrap_servers=broker.bootstrap_servers)
    deadline = time.monotonic() + 5
    while len(_network_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_network_threads()) == before


# -- 6: kafka-python's API ------------------------------------------------------------------------------
def test_kafka_python_surface(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 5, partition=0)
    tp = TopicPartition(topic, 0)
    with Consumer(
        bootstrap_servers=broker.bootstrap_servers,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        legacy_iterator=True,
        sock_chunk_bytes=4096,
        api_version=None,
    ) as consumer:
        consumer.bootstrap(timeout_ms=5000)
        assert consumer.bootstrap_connected()
        # inferred from the broker's ApiVersions: (3, 9) for Tansu 0.6, (4, 2) for Kafka 4.2
        assert consumer.config["api_version"] == {"tansu": (3, 9), "kafka": (4, 2)}[broker.kind]
        assert consumer.config["max_poll_records"] == 500 and "group_id" in consumer.config
        meta = consumer.group_metadata()
        assert isinstance(meta, kafka.structs.ConsumerGroupMetadata)
        assert (meta.group_id, meta.generation_id, meta.state) == (f"g-{topic}", -1, kafka.structs.MemberState.UNJOINED)
        consumer.assign([tp])
        assert consumer.highwater(tp) is None  # no Fetch answer yet
        records = _poll_until(consumer, 5)
        assert isinstance(tp, kafka.structs.TopicPartition)
        assert all(isinstance(TopicPartition(r.topic, r.partition), kafka.structs.TopicPartition) for r in records)
        assert consumer.highwater(tp) >= 1
        consumer.seek(tp, kafka.structs.OffsetAndMetadata(2, "", -1))
        assert consumer.position(tp) == 2
        assert consumer.metrics_flat()["records-consumed-total"] == 5
        assert isinstance(next(iter(consumer.poll(timeout_ms=5000).keys())), kafka.structs.TopicPartition)


def test_commit_async_commits_what_was_handed_out_at_the_call(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 10, partition=0)
    group = f"g-{topic}"
    tp = TopicPartition(topic, 0)
    done = []
    with Consumer(
        topic, bootstrap_servers=broker.bootstrap_servers, group_id=group, enable_auto_commit=False, **GROUP
    ) as consumer:
        assert len(_poll_until(consumer, 3, max_records=3)) == 3
        future = consumer.commit_async(callback=lambda offsets, error: done.append((offsets, error)))
        assert len(_poll_until(consumer, 3, max_records=3)) == 3  # handed out after the call
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:
            consumer.poll(timeout_ms=50, max_records=1)
        assert done, "the commit callback never ran"
        offsets, error = done[0]
        assert error is None and offsets[tp].offset == 3
        assert future.succeeded() and future.value[tp].offset == 3  # kafka-python's Future
    assert _committed(broker, group, tp) == 3


# -- 9: messages ---------------------------------------------------------------------------------------
def test_exception_text_does_not_repeat_the_class_name():
    with pytest.raises(ConfigError) as caught:
        Consumer(bootstrap_servers="127.0.0.1:1", max_poll_recrods=5)
    assert str(caught.value).startswith("unknown config key 'max_poll_recrods'")
    assert not str(CommitFailedError("x")).startswith("CommitFailedError")


# -- the embedded broker's end offsets, fixed for the user ----------------------------------------------
def test_end_offsets_and_seek_to_end_with_multi_record_batches(make_topic, send, make_consumer):
    """Tansu 0.6 answers ListOffsets latest with the last batch's base offset + 1; the consumer reads the
    true end from that batch's header (kafka-python's own seek_to_end test fails on it)."""
    topic = make_topic(partitions=2)
    send(topic, [{"partition": 0, "value": b"v%d" % i} for i in range(10)])  # linger: one or few batches
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = make_consumer()
    assert consumer.end_offsets([tp0, tp1]) == {tp0: 10, tp1: 0}
    consumer.assign([tp0])
    consumer.seek_to_end(tp0)
    assert consumer.position(tp0, timeout_ms=5000) == 10
    latest = make_consumer(auto_offset_reset="latest")
    latest.assign([tp0])
    assert latest.position(tp0, timeout_ms=5000) == 10


# -- issue 23: kafka-python 3.0's classes and shapes -----------------------------------------------------
class NotANumber(ValueError):
    """A deserializer's own exception class."""


def _to_int(data: bytes) -> int:
    if not data.isdigit():
        raise NotANumber(f"not a number: {data!r}")
    return int(data)


def test_a_failing_deserializers_own_exception_is_raised_and_its_record_again(make_topic, send, make_consumer):
    """kafka-python lets the deserializer's exception through: ``except ValueError`` around iteration
    catches it; the partition stays at the record (it fails again) until a seek past it."""
    topic = make_topic()
    send(topic, [{"partition": 0, "value": b"bad" if i == 2 else b"%d" % i} for i in range(5)])
    tp = TopicPartition(topic, 0)
    consumer = make_consumer(value_deserializer=_to_int, consumer_timeout_ms=10_000)
    consumer.assign([tp])
    got = []
    try:
        for record in consumer:
            got.append(record.value)
    except ValueError as exc:
        caught = exc
    else:
        pytest.fail("the deserializer's error was not raised")
    assert got == [0, 1] and type(caught) is NotANumber and str(caught) == "not a number: b'bad'"
    assert f"failed on the record at offset 2 of {topic}-0" in caught.__notes__[0]
    assert consumer.position(tp) == 2
    with pytest.raises(NotANumber):  # the same record again, through poll() this time
        _poll_until(consumer, 1)
    assert consumer.position(tp) == 2
    consumer.seek(tp, 3)  # skip it: the iterator goes on from there
    assert [next(consumer).value for _ in range(2)] == [3, 4]
    assert consumer.position(tp) == 5


def test_metrics_have_kafka_pythons_groups_and_names(broker, make_topic, send):
    topic = make_topic()
    send(topic, [{"partition": 0, "value": b"v%d" % i} for i in range(5)], each=True)  # exact ends on Tansu
    tp = TopicPartition(topic, 0)
    with Consumer(
        topic, bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{topic}", enable_auto_commit=False, **GROUP
    ) as consumer:
        assert len(_poll_until(consumer, 5)) == 5
        consumer.commit()
        deadline = time.monotonic() + 10
        while consumer.highwater(tp) != 5 and time.monotonic() < deadline:
            consumer.poll(timeout_ms=100)
        m = consumer.metrics()
        fetch, group = m["consumer-fetch-manager-metrics"], m["consumer-coordinator-metrics"]
        assert fetch["records-lag-max"] == 0
        assert fetch["records-consumed-rate"] > 0 and fetch["bytes-consumed-rate"] > 0 and fetch["fetch-rate"] > 0
        assert 0 < fetch["fetch-size-avg"] <= fetch["fetch-size-max"]
        assert 0 < fetch["fetch-latency-avg"] <= fetch["fetch-latency-max"]
        assert group["assigned-partitions"] == 1 and group["commit-rate"] > 0
        assert 0 < group["commit-latency-avg"] <= group["commit-latency-max"]
        assert m["consumer-metrics"]["connection-count"] >= 1
        assert consumer.metrics_flat()["commit-total"] == 1


class _Gate:
    """A TCP port in front of the broker: closes every connection at once until ``open()``, then forwards."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.split(",")[0].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.opened = threading.Event()
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def open(self) -> None:
        self.opened.set()

    def close(self) -> None:
        self._stop.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                continue
            if not self.opened.is_set():
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client,), daemon=True).start()

    def _pump(self, client: socket.socket) -> None:
        try:
            with client, socket.create_connection(self.upstream, timeout=5) as upstream:
                while not self._stop.is_set():
                    for sock in select.select([client, upstream], [], [], 0.05)[0]:
                        data = sock.recv(65536)
                        if not data:
                            return
                        (upstream if sock is client else client).sendall(data)
        except OSError:
            pass  # either side went away


def test_no_broker_within_bootstrap_timeout_ms_raises_until_one_answers(broker, make_topic, send):
    topic = make_topic()
    send(topic, [{"partition": 0, "value": b"v%d" % i} for i in range(3)])
    tp = TopicPartition(topic, 0)
    gate = _Gate(broker.bootstrap_servers)
    consumer = None
    try:
        # api_version=None: the constructor waits bootstrap_timeout_ms for a broker and raises, as kafka-python
        started = time.monotonic()
        with pytest.raises(ke.KafkaTimeoutError) as caught:
            Consumer(bootstrap_servers=gate.address, bootstrap_timeout_ms=800, reconnect_backoff_max_ms=100)
        assert 0.75 < time.monotonic() - started < 3.0
        assert f"could not bootstrap from bootstrap_servers '{gate.address}' ({gate.address}: " in str(caught.value)
        # api_version given: poll() and the iterator raise it, held until a broker answers
        consumer = Consumer(
            bootstrap_servers=gate.address,
            api_version=(3, 9),
            bootstrap_timeout_ms=800,
            reconnect_backoff_max_ms=100,
            auto_offset_reset="earliest",
            consumer_timeout_ms=10_000,
        )
        consumer.assign([tp])
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="no broker answered within bootstrap_timeout_ms"):
            while time.monotonic() - started < 10:
                consumer.poll(timeout_ms=100)
        assert time.monotonic() - started < 3.0
        with pytest.raises(KafkaTimeoutError):
            next(consumer)
        gate.open()
        deadline = time.monotonic() + 15
        got = []
        while len(got) < 3 and time.monotonic() < deadline:
            try:
                got += [r.value for r in consumer.poll(timeout_ms=100).get(tp, [])]
            except KafkaTimeoutError:
                pass  # until a broker answers
        assert got == [b"v0", b"v1", b"v2"]
        consumer.poll(timeout_ms=100)  # released: nothing raised any more
        assert consumer.metrics_flat()["errors-held"] == {}
    finally:
        if consumer is not None:
            consumer.close(timeout_ms=2000)
        gate.close()
