"""Shared fixtures: an embedded Tansu broker, unique topics, and a confluent-kafka producer helper."""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

import pytest

from fsm_consumer.broker import EmbeddedBroker

Payload = bytes | str | None
PayloadArg = Payload | Callable[[int], Payload]
Headers = Mapping[str, bytes | str] | Sequence[tuple[str, bytes | str]] | None


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One in-memory Tansu broker for the whole session; tests isolate via unique topics."""
    with EmbeddedBroker(storage="memory") as embedded:
        yield embedded


class MakeTopic(Protocol):
    def __call__(self, partitions: int = 1, config: Mapping[str, str] | None = None) -> str: ...


@pytest.fixture
def make_topic(broker: EmbeddedBroker, request: pytest.FixtureRequest) -> MakeTopic:
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
def produce(broker: EmbeddedBroker) -> Produce:
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
