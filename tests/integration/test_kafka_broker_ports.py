"""KafkaBroker and ports taken by someone else between picking them and the JVM binding them: the first
start retries on fresh ports (like EmbeddedBroker for Tansu); a port given by the caller is not changed.

Each test makes the port picker hand out a port it holds first (a listening socket, or another broker
answering there), so the first attempt's conflict is certain. They start their own brokers and stop
them, also on failure; they run with the Kafka half (``--broker kafka``, or no ``--broker``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import psutil
import pytest

from fsm_consumer import Consumer, TopicPartition
from fsm_consumer.broker import BrokerStartError, EmbeddedBroker, KafkaBroker, KafkaNotFoundError, _kafka
from fsm_consumer.broker._kafka_jars import find_java, kafka_libs
from fsm_consumer.broker._ports import free_loopback_port
from fsm_consumer.broker._wire import fetch_api_versions

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka_jars(request: pytest.FixtureRequest) -> None:
    chosen = request.config.getoption("broker")
    if chosen and "kafka" not in chosen:
        pytest.skip("the Kafka half was not chosen (--broker)")
    try:
        find_java()
        kafka_libs()
    except KafkaNotFoundError as exc:
        if os.environ.get("FSM_REQUIRE_KAFKA") == "1":
            pytest.fail(f"Apache Kafka is required here (FSM_REQUIRE_KAFKA=1) but: {exc}")
        pytest.skip(f"Apache Kafka tests skipped: {exc}")


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port on 127.0.0.1 that this test holds (listening, nobody answering)."""
    with socket.socket() as squatter:  # no SO_REUSEADDR: nobody else may bind it
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        yield squatter.getsockname()[1]


@pytest.fixture
def picker(monkeypatch: pytest.MonkeyPatch):
    """KafkaBroker's port picker, handing out ``picker.first`` before free ports; ``picker.calls`` counts."""

    class Picker:
        first: list[int] = []
        calls = 0

        def __call__(self) -> int:
            self.calls += 1
            return self.first.pop(0) if self.first else free_loopback_port()

    chosen = Picker()
    monkeypatch.setattr(_kafka, "free_loopback_port", chosen)
    return chosen


def kafka_servers() -> set[int]:
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if "kafka.Kafka" in child.cmdline():
                found.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


def start_and_check(taken: int) -> None:
    """A KafkaBroker starts although ``taken`` is handed out first, and serves: a topic, a round trip."""
    before = kafka_servers()
    broker = KafkaBroker()
    try:
        assert taken not in (broker.port, broker.controller_port)
        assert broker.running and broker.pid in kafka_servers()
        assert broker._metadata(None).cluster_id == broker.cluster_id  # ours answers, not who holds the port
        assert fetch_api_versions(broker.host, broker.port) == broker.api_versions
        broker.create_topic("after-a-conflict", partitions=2)
        assert broker.topic_partitions("after-a-conflict") == [0, 1]
        consumer = Consumer(bootstrap_servers=broker.bootstrap_servers)
        try:
            assert consumer.end_offsets([TopicPartition("after-a-conflict", 1)]) == {
                TopicPartition("after-a-conflict", 1): 0
            }
        finally:
            consumer.close()
    finally:
        broker.stop()
    assert kafka_servers() == before  # the failed attempt's server and this one are gone


@pytest.mark.parametrize("listener", ["client", "controller"])
def test_a_port_taken_before_kafka_binds_it_is_retried_on_fresh_ports(kafka_jars, held_port, picker, listener):
    # KafkaBroker picks the client port first, then the controller's
    picker.first = [held_port] if listener == "client" else [free_loopback_port(), held_port]
    start_and_check(held_port)
    assert picker.calls == 4  # two ports per attempt: the second attempt picked fresh ones


def test_another_broker_answering_on_the_port_is_not_taken_for_ours(kafka_jars, picker):
    with EmbeddedBroker() as other:  # another job's broker on the port picked
        picker.first = [other.port]
        start_and_check(other.port)
        assert other.running and picker.calls == 4  # the other broker was left alone


def test_a_given_port_that_is_taken_fails_at_once_naming_it(kafka_jars, held_port, picker):
    before = kafka_servers()
    with pytest.raises(BrokerStartError) as failure:
        KafkaBroker(port=held_port)
    message = str(failure.value)
    assert f"127.0.0.1:{held_port} (its client listener) taken by another process" in message
    assert "not retried" in message and picker.calls == 1  # only the controller port was picked
    assert kafka_servers() == before
