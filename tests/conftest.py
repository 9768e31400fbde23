"""Shared fixtures: the brokers (Tansu and Apache Kafka), unique topics, and a confluent-kafka producer.

Every test that uses ``broker`` (directly or through ``make_topic``, ``produce``, ...) runs once per
broker: ``test_x[tansu]`` and ``test_x[kafka]``. ``@pytest.mark.brokers("tansu")`` limits a test to
the brokers named (a test of a Tansu quirk, of EmbeddedBroker itself); ``pytest --broker kafka`` runs
only one broker's half. Without Java or Kafka's jars the kafka half is skipped with the reason (fetch
them with ``fsm-consumer broker fetch --kind kafka``); with FSM_REQUIRE_KAFKA=1 (CI) it fails instead.
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

import pytest

from fsm_consumer.broker import KafkaNotFoundError, RegistryNotFoundError, SchemaRegistry, start_broker
from fsm_consumer.broker._admin import LoopbackBroker

Payload = bytes | str | None
PayloadArg = Payload | Callable[[int], Payload]
Headers = Mapping[str, bytes | str] | Sequence[tuple[str, bytes | str]] | None

BROKER_KINDS = ("tansu", "kafka")
_UNAVAILABLE: dict[str, str] = {}  # broker kind -> why its tests were skipped, said once at the end


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--broker",
        action="append",
        choices=BROKER_KINDS,
        default=None,
        help="run the broker tests on this broker only (repeatable; default: tansu and kafka)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "brokers(*kinds): the brokers a test runs on (default: all)")


def pytest_terminal_summary(terminalreporter) -> None:
    for kind, reason in _UNAVAILABLE.items():
        terminalreporter.write_sep("-", f"the {kind} half of the broker tests was skipped", yellow=True)
        terminalreporter.write_line(reason)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "broker" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("brokers")
    allowed = marker.args if marker else BROKER_KINDS
    chosen = metafunc.config.getoption("broker") or BROKER_KINDS
    kinds = [k for k in BROKER_KINDS if k in allowed and k in chosen]
    if not kinds:  # said in words, not pytest's "got empty parameter set"
        reason = f"runs on {' and '.join(allowed)} only, and this run's --broker is {' and '.join(chosen)}"
        kinds = [pytest.param(allowed[0], marks=pytest.mark.skip(reason=reason))]
    metafunc.parametrize("broker", kinds, indirect=True, scope="session")


class BrokerPool:
    """One broker of each kind for the session, started when a test first asks for it."""

    def __init__(self) -> None:
        self._brokers: dict[str, LoopbackBroker] = {}
        self._unavailable: dict[str, str] = {}

    def get(self, kind: str) -> LoopbackBroker:
        if kind in self._unavailable:
            pytest.skip(self._unavailable[kind])
        if kind not in self._brokers:
            self._brokers[kind] = self._start(kind)
        return self._brokers[kind]

    def _start(self, kind: str) -> LoopbackBroker:
        try:
            return start_broker(kind, **({"storage": "memory"} if kind == "tansu" else {}))
        except KafkaNotFoundError as exc:
            if os.environ.get("FSM_REQUIRE_KAFKA") == "1":
                pytest.fail(f"Apache Kafka is required here (FSM_REQUIRE_KAFKA=1) but: {exc}")
            self._unavailable[kind] = _UNAVAILABLE[kind] = f"Apache Kafka tests skipped: {exc}"
            pytest.skip(self._unavailable[kind])

    def stop(self) -> None:
        for broker in self._brokers.values():
            broker.stop()
        self._brokers.clear()


@pytest.fixture(scope="session")
def broker_pool() -> Iterator[BrokerPool]:
    pool = BrokerPool()
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest, broker_pool: BrokerPool) -> LoopbackBroker:
    """The session's broker of this test's kind (``broker.kind``); tests isolate via unique topics."""
    return broker_pool.get(request.param)


@pytest.fixture(scope="session")
def registry() -> Iterator[SchemaRegistry]:
    """A real schema registry (Apicurio Registry: Confluent's API under ``ccompat``) on loopback, once per session.
    Without its files the test skips saying which command fetches them; with FSM_REQUIRE_REGISTRY=1 (CI) it fails."""
    try:
        registry = SchemaRegistry()
        registry.start()
    except RegistryNotFoundError as exc:
        if os.environ.get("FSM_REQUIRE_REGISTRY") == "1":
            pytest.fail(f"a schema registry is required here (FSM_REQUIRE_REGISTRY=1) but: {exc}")
        pytest.skip(f"no schema registry to test against: {exc}")
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture
def exact_batches(broker: LoopbackBroker) -> bool:
    """Whether end offsets are exact for multi-record batches: on Tansu 0.6 the high watermark is the
    last batch's base offset + 1, so tests there produce one record per batch where ends matter."""
    return broker.kind != "tansu"


class MakeTopic(Protocol):
    def __call__(self, partitions: int = 1, config: Mapping[str, str] | None = None) -> str: ...


@pytest.fixture
def make_topic(broker: LoopbackBroker, request: pytest.FixtureRequest) -> MakeTopic:
    """Create topics with names unique to this test: ``make_topic(partitions=3)``."""
    # Kafka topic names allow [a-zA-Z0-9._-]; keep the test name readable in broker logs.
    stem = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name)[:80]
    counter = itertools.count()

    def create(partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        name = f"{stem}-{next(counter)}-{uuid.uuid4().hex[:8]}"
        broker.create_topic(name, partitions=partitions, config=config)
        return name

    return create


@pytest.fixture
def topic_factory(make_topic: MakeTopic) -> MakeTopic:
    """Alias of :func:`make_topic`."""
    return make_topic


def _payload(arg: PayloadArg, index: int) -> Payload:
    return arg(index) if callable(arg) else arg


def _default_value(index: int) -> str:
    return f"value-{index}"


class Produce(Protocol):
    def __call__(
        self,
        topic: str,
        count: int = 1,
        *,
        partition: int | None = None,
        key: PayloadArg = None,
        value: PayloadArg = _default_value,
        headers: Headers = None,
        compression: str | None = None,
        timeout: float = 10.0,
        bootstrap_servers: str | None = None,
    ) -> list[tuple[int, int]]: ...


@pytest.fixture
def produce(broker: LoopbackBroker) -> Produce:
    """Produce ``count`` records with confluent-kafka and flush; returns (partition, offset) per record.

    ``key``/``value`` are bytes, str, None or ``f(i)``; the default value is ``"value-{i}"``.
    ``compression`` is librdkafka's ``compression.type`` (gzip, snappy, lz4, zstd).
    ``bootstrap_servers`` targets another broker than the session one.
    Raises AssertionError if any record is not acknowledged.
    """
    from confluent_kafka import KafkaError, Message, Producer  # here: unit tests need not load it

    def send(
        topic: str,
        count: int = 1,
        *,
        partition: int | None = None,
        key: PayloadArg = None,
        value: PayloadArg = _default_value,
        headers: Headers = None,
        compression: str | None = None,
        timeout: float = 10.0,
        bootstrap_servers: str | None = None,
    ) -> list[tuple[int, int]]:
        config = {
            "bootstrap.servers": bootstrap_servers or broker.bootstrap_servers,
            "linger.ms": 5,  # lets several records share a (compressed) batch
            "message.timeout.ms": int(timeout * 1000),
        }
        if compression is not None:
            config["compression.type"] = compression
        producer = Producer(config)
        delivered: list[tuple[int, int] | None] = [None] * count
        errors: list[str] = []

        def on_delivery(index: int) -> Callable[[KafkaError | None, Message], None]:
            def report(err: KafkaError | None, msg: Message) -> None:
                if err is not None:
                    errors.append(f"record {index}: {err}")
                else:
                    delivered[index] = (msg.partition(), msg.offset())

            return report

        header_list = list(headers.items()) if isinstance(headers, Mapping) else headers
        for i in range(count):
            kwargs = {"partition": partition} if partition is not None else {}
            producer.produce(
                topic,
                key=_payload(key, i),
                value=_payload(value, i),
                headers=header_list,
                on_delivery=on_delivery(i),
                **kwargs,
            )
            producer.poll(0)
        remaining = producer.flush(timeout)
        assert remaining == 0, f"{remaining} records still queued after {timeout}s"
        assert not errors, "delivery failed: " + "; ".join(errors)
        assert all(d is not None for d in delivered), "some delivery reports never arrived"
        return [d for d in delivered if d is not None]

    return send
