"""kafka-python 3.0's classes and shapes (issue 23): its error classes catch ours, an unreachable
bootstrap server raises KafkaTimeoutError after bootstrap_timeout_ms, metrics() nests by metric group,
config["bootstrap_servers"] is the value as given. No broker: the bootstrap server is a closed port."""

from __future__ import annotations

import inspect
import socket
import threading
import time

import kafka.errors as ke
import pytest
from kafka.consumer.fetcher import RecordTooLargeError as KafkaPythonRecordTooLargeError
from kafka.consumer.group import KafkaConsumer as KafkaPythonConsumer
from kafka.metrics import KafkaMetric, MetricName

import fsm_consumer
from fsm_consumer import (
    ConfigError,
    Consumer,
    CorruptRecordError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    RecordTooLargeError,
    TopicPartition,
)
from fsm_consumer._config import ConsumerConfig
from fsm_consumer.fetch import decode_partition
from fsm_consumer.fetch.testing import batch


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _network_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("fsm-consumer-network-") and t.is_alive()]


# -- errors: kafka-python's classes catch ours ------------------------------------------------------------
def test_every_public_error_is_a_kafka_error():
    errors = [v for v in vars(fsm_consumer).values() if inspect.isclass(v) and issubclass(v, BaseException)]
    assert errors and all(issubclass(e, ke.KafkaError) for e in errors), errors
    assert not hasattr(fsm_consumer, "DeserializationError")  # never raised by a consumer: see the fetch tests


def test_config_errors_are_kafka_configuration_errors():
    with pytest.raises(ke.KafkaConfigurationError, match="unknown config key 'max_poll_recrods'"):
        Consumer(bootstrap_servers="127.0.0.1:1", max_poll_recrods=5)
    with pytest.raises(ke.KafkaConfigurationError):
        ConsumerConfig.from_kwargs(fetch_min_bytes=0)
    assert issubclass(ConfigError, ValueError)  # as before


def test_no_offset_for_partition_is_kafka_pythons_class():
    tp = TopicPartition("t", 0)
    consumer = Consumer(bootstrap_servers=_closed_port(), auto_offset_reset="none", api_version=(3, 9))
    try:
        consumer.assign([tp])
        with pytest.raises(ke.NoOffsetForPartitionError) as caught:
            consumer.poll(timeout_ms=0)
        assert isinstance(caught.value, NoOffsetForPartitionError) and caught.value.partitions == {tp}
    finally:
        consumer.close(timeout_ms=2000)


def test_record_errors_are_kafka_pythons_classes_with_our_messages():
    data = bytearray(batch([b"a", b"b"]))
    data[-1] ^= 0xFF  # the CRC no longer matches
    corrupt = decode_partition("t", 0, bytes(data), fetch_offset=0).error
    assert isinstance(corrupt, CorruptRecordError) and isinstance(corrupt, ke.CorruptRecordError)
    assert corrupt.errno == 2 and str(corrupt) == "t-0 at offset 0: corrupt batch: CRC mismatch"
    too_large = decode_partition("t", 0, batch([b"x" * 100])[:50], fetch_offset=0).error
    assert isinstance(too_large, RecordTooLargeError) and isinstance(too_large, KafkaPythonRecordTooLargeError)
    assert "raise max_partition_fetch_bytes" in str(too_large)


# -- bootstrap_timeout_ms ------------------------------------------------------------------------------------
def test_bootstrap_timeout_ms_is_kafka_pythons_key_and_default():
    assert ConsumerConfig().bootstrap_timeout_ms == KafkaPythonConsumer.DEFAULT_CONFIG["bootstrap_timeout_ms"]
    assert ConsumerConfig.from_kwargs(bootstrap_timeout_ms=None).bootstrap_timeout_ms is None
    # kafka-python 2.x's name for the constructor's wait
    assert ConsumerConfig.from_kwargs(api_version_auto_timeout_ms=700)["bootstrap_timeout_ms"] == 700


def test_an_unreachable_bootstrap_server_raises_from_the_constructor():
    server = _closed_port()
    before = len(_network_threads())
    started = time.monotonic()
    with pytest.raises(ke.KafkaTimeoutError) as caught:  # kafka-python 3.0: from __init__ (api_version=None)
        Consumer("t", bootstrap_servers=server, bootstrap_timeout_ms=500, reconnect_backoff_max_ms=100)
    took = time.monotonic() - started
    assert 0.45 < took < 3.0
    error = caught.value
    assert isinstance(error, KafkaTimeoutError)
    message = str(error)
    assert message.startswith(
        "no broker answered within bootstrap_timeout_ms (500 ms): could not bootstrap "
        f"from bootstrap_servers '{server}' ({server}: connect to {server} failed: "
    )
    assert "Connection refused" in message
    assert "Check that the brokers are up and that bootstrap_servers names their listeners" in message
    assert "larger bootstrap_timeout_ms" in message
    deadline = time.monotonic() + 5
    while len(_network_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_network_threads()) == before  # a failed construction leaves no thread behind


def test_with_api_version_given_poll_and_iteration_raise_it_until_a_broker_answers():
    """kafka-python skips the constructor's bootstrap when api_version is given; here poll() and the
    iterator raise it (held) instead of returning nothing forever."""
    server = _closed_port()
    consumer = Consumer(
        bootstrap_servers=server,
        api_version=(3, 9),
        bootstrap_timeout_ms=500,
        reconnect_backoff_max_ms=100,
        consumer_timeout_ms=10_000,
    )
    try:
        consumer.assign([TopicPartition("t", 0)])
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match=f"could not bootstrap from bootstrap_servers '{server}'"):
            while time.monotonic() - started < 10:
                consumer.poll(timeout_ms=100)
        assert time.monotonic() - started < 3.0
        with pytest.raises(ke.KafkaTimeoutError, match="no broker answered within bootstrap_timeout_ms"):
            next(consumer)
        with pytest.raises(ke.KafkaTimeoutError):  # held: raised again, the iterator starts afresh
            for _ in consumer:
                pass
        with pytest.raises(ke.KafkaTimeoutError, match="no broker answered"):
            consumer.topics(timeout_ms=2000)
    finally:
        consumer.close(timeout_ms=2000)


# -- shapes ----------------------------------------------------------------------------------------------
def test_config_bootstrap_servers_is_the_value_given():
    assert ConsumerConfig.from_kwargs(bootstrap_servers="b1:9092, b2")["bootstrap_servers"] == "b1:9092, b2"
    assert ConsumerConfig.from_kwargs(bootstrap_servers=["b1:9092"])["bootstrap_servers"] == ["b1:9092"]
    assert ConsumerConfig.from_kwargs()["bootstrap_servers"] == KafkaPythonConsumer.DEFAULT_CONFIG["bootstrap_servers"]
    cfg = ConsumerConfig.from_kwargs(bootstrap_servers="b1:9092, b2").replace(api_version=(3, 9))
    assert cfg["bootstrap_servers"] == "b1:9092, b2" and cfg.bootstrap_servers == ("b1:9092", "b2:9092")
    assert "bootstrap_servers" in cfg and "_bootstrap_servers_given" not in cfg
    with pytest.raises(KeyError):
        cfg["_bootstrap_servers_given"]
    consumer = Consumer(bootstrap_servers=_closed_port() + " ", api_version=(3, 9))
    try:
        assert isinstance(consumer.config["bootstrap_servers"], str)
    finally:
        consumer.close(timeout_ms=2000)


KAFKA_PYTHON_METRICS = {
    "consumer-fetch-manager-metrics": {
        "bytes-consumed-rate",
        "fetch-latency-avg",
        "fetch-latency-max",
        "fetch-rate",
        "fetch-size-avg",
        "fetch-size-max",
        "records-consumed-rate",
        "records-lag-max",
        "records-per-request-avg",
    },
    "consumer-coordinator-metrics": {
        "assigned-partitions",
        "commit-latency-avg",
        "commit-latency-max",
        "commit-rate",
        "last-heartbeat-seconds-ago",
    },
    "consumer-metrics": {"connection-count"},
}


@pytest.mark.parametrize("group_id", [None, "g"])
def test_metrics_nest_by_kafka_pythons_groups_and_the_flat_view_stays(group_id):
    consumer = Consumer(bootstrap_servers=_closed_port(), api_version=(3, 9), group_id=group_id)
    try:
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        m = consumer.metrics()
        assert {group: set(names) for group, names in m.items()} == KAFKA_PYTHON_METRICS
        assert m["consumer-fetch-manager-metrics"]["records-lag-max"] == 0
        assert m["consumer-coordinator-metrics"]["assigned-partitions"] == 2
        assert m["consumer-coordinator-metrics"]["last-heartbeat-seconds-ago"] == float("inf")  # none yet
        assert m["consumer-metrics"]["connection-count"] == 0
        assert all(isinstance(v, (int, float)) for names in m.values() for v in names.values())
        raw = consumer.metrics(raw=True)  # kafka-python's raw form: {MetricName: KafkaMetric}
        assert all(isinstance(k, MetricName) and isinstance(v, KafkaMetric) for k, v in raw.items())
        assert {(k.group, k.name) for k in raw} == {(g, n) for g, names in KAFKA_PYTHON_METRICS.items() for n in names}
        tags = {"client-id": consumer.config.client_id}
        assert raw[MetricName("records-lag-max", "consumer-fetch-manager-metrics", tags=tags)].value() == 0.0
        flat = consumer.metrics_flat()  # every figure of this consumer
        assert flat["records-consumed-total"] == 0 and flat["assigned-partitions"] == 2
        assert flat["connection-states"]["-1"]["address"] == consumer.config.bootstrap_servers[0]
        assert ("member-state" in flat) == (group_id is not None)
    finally:
        consumer.close(timeout_ms=2000)
