"""SchemaRegistry (Apicurio) through confluent-kafka's own client: Avro, Protobuf and JSON Schema round trips by
id, compatibility, and the wire framing of AvroSerializer. Skipped, with the fetch command, when the registry
was not fetched; needs ``pip install 'confluent-kafka[schemaregistry,avro,protobuf,json]'``."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastavro", reason="needs confluent-kafka[avro]: pip install 'confluent-kafka[avro]'")
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from fsm_consumer.broker import SchemaRegistry

pytestmark = pytest.mark.integration

AVRO_V1 = {"type": "record", "name": "Trade", "namespace": "t", "fields": [{"name": "sym", "type": "string"}]}
# BACKWARD-compatible with V1: the new field has a default
AVRO_V2 = {**AVRO_V1, "fields": [*AVRO_V1["fields"], {"name": "qty", "type": "int", "default": 0}]}
PROTO = 'syntax = "proto3";\npackage t;\n\nmessage Trade {\n  string sym = 1;\n  int32 qty = 2;\n}\n'
JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"sym": {"type": "string"}, "qty": {"type": "integer"}},
}


def test_schemas_round_trip_by_id(registry: SchemaRegistry) -> None:
    client = SchemaRegistryClient({"url": registry.url, "timeout": 30})
    client.set_compatibility("t-value", "BACKWARD")
    avro_v1 = client.register_schema("t-value", Schema(json.dumps(AVRO_V1), "AVRO"))
    assert client.test_compatibility("t-value", Schema(json.dumps(AVRO_V2), "AVRO"))
    incompatible = {**AVRO_V1, "fields": [{"name": "px", "type": "double"}]}  # a new field with no default
    assert not client.test_compatibility("t-value", Schema(json.dumps(incompatible), "AVRO"))
    avro_v2 = client.register_schema("t-value", Schema(json.dumps(AVRO_V2), "AVRO"))
    # one subject holds one schema type in Apicurio (and under Confluent's default BACKWARD): one subject each
    proto = client.register_schema("t-proto-value", Schema(PROTO, "PROTOBUF"))
    json_schema = client.register_schema("t-json-value", Schema(json.dumps(JSON_SCHEMA), "JSON"))
    assert len({avro_v1, avro_v2, proto, json_schema}) == 4
    assert client.get_versions("t-value") == [1, 2]
    # Confluent's id is the schema's: the same text under another subject has the same id
    assert client.register_schema("u-value", Schema(json.dumps(AVRO_V1), "AVRO")) == avro_v1

    fresh = SchemaRegistryClient({"url": registry.url, "timeout": 30})  # no cache: each answer comes from the registry
    for schema_id, kind, text in [
        (avro_v1, "AVRO", AVRO_V1),
        (avro_v2, "AVRO", AVRO_V2),
        (json_schema, "JSON", JSON_SCHEMA),
    ]:
        got = fresh.get_schema(schema_id)
        assert (got.schema_type, json.loads(got.schema_str)) == (kind, text)
    got = fresh.get_schema(proto)
    assert (got.schema_type, got.schema_str) == ("PROTOBUF", PROTO)


def test_avro_serializer_frames_with_the_schema_id(registry: SchemaRegistry) -> None:
    client = SchemaRegistryClient({"url": registry.url, "timeout": 30})
    serializer = AvroSerializer(client, json.dumps(AVRO_V2))
    context = SerializationContext("t", MessageField.VALUE)
    data = serializer({"sym": "ABC", "qty": 7}, context)
    assert data is not None
    schema_id = client.get_latest_version("t-value").schema_id
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == schema_id
    reader = AvroDeserializer(SchemaRegistryClient({"url": registry.url, "timeout": 30}))
    assert reader(data, context) == {"sym": "ABC", "qty": 7}


def test_a_read_planned_after_a_new_version_pins_it_whatever_the_process_asked_before(registry: SchemaRegistry) -> None:
    """fsm_kafka's registry clients are one per process and settings (a Spark worker reads task after task), so
    a planning worker that pinned version 1 must still pin version 2 once it is registered: the client's cached
    latest versions are asked again at each planning."""
    from fsm_consumer.spark._formats import parse

    client = SchemaRegistryClient({"url": registry.url, "timeout": 30})
    client.set_compatibility("pin-value", "BACKWARD")
    v1 = client.register_schema("pin-value", Schema(json.dumps(AVRO_V1), "AVRO"))
    formats = parse({"valueFormat": "avro", "schema.registry.url": registry.url})
    first = formats.pinned(("pin",))
    assert first.value.reader_id == v1
    assert formats.client()._client is first.client()._client  # the process's one client for these settings
    v2 = client.register_schema("pin-value", Schema(json.dumps(AVRO_V2), "AVRO"))
    assert v2 != v1
    assert formats.pinned(("pin",)).value.reader_id == v2
    # and the types follow the version pinned (cached per chosen schema, never per subject)
    assert "qty" not in str(first.spark_types("pin")[1])
    assert "qty" in str(formats.pinned(("pin",)).spark_types("pin")[1])
