"""fsm_kafka reads typed columns from topics of Avro, Protobuf and JSON Schema records (confluent-kafka's
serializers, a real registry, two schema versions): every row's value equals what confluent-kafka's
deserializers give for that partition and offset, resolved to the latest version; PERMISSIVE keeps a record
that does not decode as a null with its error, FAILFAST fails naming it."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("confluent_kafka.schema_registry", reason="the schemas extra: pip install fsm_consumer[schemas]")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from fsm_consumer.testing import _schema_peer as peer  # noqa: E402

pytestmark = pytest.mark.brokers("tansu")  # the broker is not what is tested here; Kafka's is in integration/
N = 120
PARTITIONS = 2


def _topic(broker, make_topic, registry, fmt, extra=()):
    topic = make_topic(PARTITIONS)
    client = SchemaRegistryClient({"url": registry.url, "timeout": 30})
    payloads = peer.payloads(fmt, client, topic, N)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i, payload in enumerate([*payloads, *extra]):
        producer.produce(topic, value=payload, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return topic, client, payloads


@pytest.mark.parametrize("fmt", peer.FORMATS)
def test_typed_rows_equal_confluent_kafkas_values(fsm_kafka, broker, make_topic, registry, fmt):
    topic, client, payloads = _topic(broker, make_topic, registry, fmt)
    df = fsm_kafka(subscribe=topic, valueFormat=fmt, **{"schema.registry.url": registry.url}).load()
    table = df.select("partition", "offset", "value").toArrow()
    assert table.num_rows == N
    theirs = peer.peer_deserializer(fmt, client, latest=True)
    ctx = SerializationContext(topic, MessageField.VALUE)
    expected = {(i % PARTITIONS, i // PARTITIONS): theirs(p, ctx) for i, p in enumerate(payloads)}
    typ = table.schema.field("value").type
    for row in table.to_pylist():
        value = row["value"]
        if fmt == "protobuf":
            value["attrs"] = sorted(value["attrs"])
        else:
            value["attrs"] = sorted(value["attrs"]) if value.get("attrs") is not None else None
        assert value == peer.arrow_row(fmt, expected[(row["partition"], row["offset"])], typ)


def test_permissive_keeps_a_bad_record_as_null_with_its_error_failfast_names_it(
    fsm_kafka, broker, make_topic, registry
):
    topic, _, _ = _topic(broker, make_topic, registry, "avro", extra=[b"not framed"])
    options = {"subscribe": topic, "valueFormat": "avro", "schema.registry.url": registry.url}
    rows = fsm_kafka(mode="PERMISSIVE", **options).load().select("partition", "offset", "value", "valueError").collect()
    assert len(rows) == N + 1
    bad = [r for r in rows if r.valueError is not None]
    assert len(bad) == 1 and bad[0].value is None and "not written by a schema-registry serializer" in bad[0].valueError
    with pytest.raises(Exception, match=rf"offset {N // PARTITIONS} of {topic}-0") as caught:
        fsm_kafka(**options).load().collect()
    assert "FramingError" in str(caught.value)
