"""Fixtures for the consumer-core integration tests: consumers closed at teardown, a record
collector with a deadline, and a confluent-kafka producer that takes per-record details."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from fsm_consumer.consumer import Consumer
from fsm_consumer.fetch import ConsumerRecord


@pytest.fixture
def make_consumer(broker) -> Iterator[Callable[..., Consumer]]:
    """``make_consumer(**config)``: a Consumer on the session broker (or ``bootstrap_servers=``),
    ``auto_offset_reset='earliest'`` unless given; every one is closed at teardown."""
    made: list[Consumer] = []

    def create(**config: Any) -> Consumer:
        config.setdefault("bootstrap_servers", broker.bootstrap_servers)
        config.setdefault("auto_offset_reset", "earliest")
        config.setdefault("default_api_timeout_ms", 10_000)
        consumer = Consumer(**config)
        made.append(consumer)
        return consumer

    yield create
    for consumer in made:
        consumer.close(timeout_ms=2000)


def _collect(
    consumer: Consumer, count: int, timeout: float = 10.0, *, settle_ms: float = 0, max_records: int | None = None
) -> list[ConsumerRecord]:
    """Poll until ``count`` records came (or the deadline), then poll ``settle_ms`` more to catch
    any extra record; returns them in the order poll() handed them out."""
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=100, max_records=max_records).values():
            out.extend(records)
    settle_until = time.monotonic() + settle_ms / 1000
    while time.monotonic() < settle_until:
        for records in consumer.poll(timeout_ms=50, max_records=max_records).values():
            out.extend(records)
    return out


@pytest.fixture
def collect() -> Callable[..., list[ConsumerRecord]]:
    return _collect


@pytest.fixture
def send(broker) -> Callable[..., list[tuple[int, int]]]:
    """``send(topic, records, *, config=None, each=False, bootstrap_servers=None)``.

    ``records``: dicts with any of partition, key, value, headers, timestamp (ms).
    ``each=True`` flushes after every record with ``linger.ms=0``, so each record is its own
    batch: needed wherever exact end offsets matter (Tansu's ListOffsets latest / high
    watermark is the last batch's base offset + 1, wrong for multi-record batches).
    Returns (partition, offset) per record, in order; fails the test if one is not acknowledged.
    """
    from confluent_kafka import Producer

    def produce(
        topic: str,
        records: Sequence[Mapping[str, Any]],
        *,
        config: Mapping[str, Any] | None = None,
        each: bool = False,
        bootstrap_servers: str | None = None,
        timeout: float = 15.0,
    ) -> list[tuple[int, int]]:
        conf = {
            "bootstrap.servers": bootstrap_servers or broker.bootstrap_servers,
            "linger.ms": 0 if each else 5,
            "message.timeout.ms": int(timeout * 1000),
        }
        conf.update(config or {})
        producer = Producer(conf)
        delivered: list[tuple[int, int] | None] = [None] * len(records)
        errors: list[str] = []

        def report(index: int):
            def on_delivery(err, msg) -> None:
                if err is not None:
                    errors.append(f"record {index}: {err}")
                else:
                    delivered[index] = (msg.partition(), msg.offset())

            return on_delivery

        for i, rec in enumerate(records):
            kwargs = {k: rec[k] for k in ("partition", "key", "headers", "timestamp") if k in rec}
            while True:
                try:
                    producer.produce(topic, value=rec.get("value"), on_delivery=report(i), **kwargs)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    producer.poll(0.05)
            producer.poll(0)
            if each:
                assert producer.flush(timeout) == 0, f"record {i} still queued after {timeout}s"
        assert producer.flush(timeout) == 0, f"records still queued after {timeout}s"
        assert not errors, "delivery failed: " + "; ".join(errors[:5])
        assert all(d is not None for d in delivered), "some delivery reports never arrived"
        return [d for d in delivered if d is not None]

    return produce
