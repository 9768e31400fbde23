"""Topics of Avro, Protobuf and JSON Schema records written by confluent-kafka's serializers against a real
registry (Apicurio), two schema versions each: every value fsm_consumer's ``poll()`` gives equals what
confluent-kafka's ``DeserializingConsumer`` gives for the same partition and offset, and every row of
``poll_batch()``'s typed column equals it too, resolved to the latest version."""

from __future__ import annotations

import time
import uuid

import pytest

pytest.importorskip("confluent_kafka.schema_registry", reason="the schemas extra: pip install fsm_consumer[schemas]")

from confluent_kafka import DeserializingConsumer, Producer  # noqa: E402
from confluent_kafka import TopicPartition as CTopicPartition  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from google.protobuf import json_format  # noqa: E402

from fsm_consumer import Consumer, TopicPartition  # noqa: E402
from fsm_consumer.schemas import (  # noqa: E402
    AvroDeserializer,
    JsonSchemaDeserializer,
    ProtobufDeserializer,
    Registry,
)
from fsm_consumer.testing import _schema_peer as peer  # noqa: E402

pytestmark = pytest.mark.integration

OURS = {"avro": AvroDeserializer, "json-schema": JsonSchemaDeserializer, "protobuf": ProtobufDeserializer}
N = 240
PARTITIONS = 3


@pytest.fixture(params=peer.FORMATS)
def written(request, broker, make_topic, registry):
    """A topic of N records in one format (version 1, then version 2), written by confluent-kafka."""
    fmt = request.param
    topic = make_topic(PARTITIONS)
    # a timeout: confluent-kafka's client waits for ever for an answer, and one answer lost hung a CI run
    client = SchemaRegistryClient({"url": registry.url, "timeout": 30})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for i, payload in enumerate(peer.payloads(fmt, client, topic, N)):
        producer.produce(topic, value=payload, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return fmt, topic, client


def _peer_values(broker, fmt, topic, client) -> dict:
    consumer = DeserializingConsumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"peer-{uuid.uuid4().hex[:8]}",
            "value.deserializer": peer.peer_deserializer(fmt, client, latest=True),
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: dict = {}
    deadline = time.monotonic() + 60
    try:
        while len(out) < N and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out[(msg.partition(), msg.offset())] = msg.value()
    finally:
        consumer.close()
    assert len(out) == N
    return out


def _ours(broker, fmt, topic, url) -> Consumer:
    consumer = Consumer(
        bootstrap_servers=broker.bootstrap_servers,
        auto_offset_reset="earliest",
        value_deserializer=OURS[fmt](Registry(url), latest=True),
    )
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    return consumer


def test_poll_gives_what_confluent_kafkas_deserializing_consumer_gives(broker, written, registry):
    fmt, topic, client = written
    theirs = _peer_values(broker, fmt, topic, client)
    ours: dict = {}
    deadline = time.monotonic() + 60
    with _ours(broker, fmt, topic, registry.url) as consumer:
        while len(ours) < N and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                ours.update({(r.partition, r.offset): r.value for r in records})
    assert ours.keys() == theirs.keys()
    plain = (lambda m: json_format.MessageToDict(m)) if fmt == "protobuf" else (lambda v: v)
    assert {k: plain(v) for k, v in ours.items()} == {k: plain(v) for k, v in theirs.items()}


def test_poll_batch_types_every_row_as_confluent_kafka_reads_it(broker, written, registry):
    fmt, topic, client = written
    theirs = _peer_values(broker, fmt, topic, client)
    rows: dict = {}
    typ = None
    deadline = time.monotonic() + 60
    with _ours(broker, fmt, topic, registry.url) as consumer:
        while len(rows) < N and time.monotonic() < deadline:
            batch = consumer.poll_batch(timeout_ms=500)
            if batch.num_rows:
                typ = batch.schema.field("value").type
                keys = zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist(), strict=True)
                rows.update(zip(keys, batch.column("value").to_pylist(), strict=True))
    assert rows.keys() == theirs.keys()
    for key, row in rows.items():
        if fmt == "protobuf":
            row["attrs"] = sorted(row["attrs"])
        assert row == peer.arrow_row(fmt, theirs[key], typ), key
