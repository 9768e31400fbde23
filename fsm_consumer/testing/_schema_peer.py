"""Records in the three registry formats written by confluent-kafka's serializers, the independent peer the
schema deserializers (``fsm_consumer.schemas``) are compared with: two versions of one schema per format (the
second adds fields with defaults), a record per index, and what confluent-kafka's own deserializers give.

Used by the unit tests (with confluent-kafka's mock registry client), the integration tests (a real registry),
the benchmarks and the demo's typed topic. Needs confluent-kafka with its schema-registry extras.
"""

from __future__ import annotations

import datetime
import decimal
import json
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory, timestamp_pb2

FORMATS = ("avro", "protobuf", "json-schema")

AVRO_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "int"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["RETAIL", "WHOLESALE"]}},
        {"name": "ref", "type": ["null", "string", "long"], "default": None},
        {
            "name": "ship",
            "type": {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]},
        },
    ],
}
AVRO_V2: dict[str, Any] = dict(
    AVRO_V1,
    fields=[
        *AVRO_V1["fields"],
        {"name": "note", "type": "string", "default": "none"},
        {"name": "qty", "type": "int", "default": 1},
    ],
)

JSON_V1: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "customer": {"type": ["string", "null"]},
        "amount": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "ship": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "extra": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    },
    "required": ["id", "amount"],
}
JSON_V2: dict[str, Any] = dict(JSON_V1, properties={**JSON_V1["properties"], "note": {"type": "string"}})


def _proto_file(version: int) -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    f.dependency.append("google/protobuf/timestamp.proto")
    kind = f.enum_type.add(name="Kind")
    kind.value.add(name="RETAIL", number=0)
    kind.value.add(name="WHOLESALE", number=1)
    ship = f.message_type.add(name="Ship")
    ship.field.add(name="city", number=1, type=9, label=1)
    order = f.message_type.add(name="Order")
    T = descriptor_pb2.FieldDescriptorProto
    order.field.add(name="id", number=1, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    order.field.add(name="customer", number=2, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    order.field.add(name="amount", number=3, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    order.field.add(
        name="at", number=4, type=T.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp", label=T.LABEL_OPTIONAL
    )
    order.field.add(name="tags", number=5, type=T.TYPE_STRING, label=T.LABEL_REPEATED)
    entry = order.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)
    order.field.add(
        name="attrs", number=6, type=T.TYPE_MESSAGE, type_name=".shop.Order.AttrsEntry", label=T.LABEL_REPEATED
    )
    order.field.add(name="kind", number=7, type=T.TYPE_ENUM, type_name=".shop.Kind", label=T.LABEL_OPTIONAL)
    order.field.add(name="ship", number=8, type=T.TYPE_MESSAGE, type_name=".shop.Ship", label=T.LABEL_OPTIONAL)
    order.field.add(name="count", number=9, type=T.TYPE_UINT64, label=T.LABEL_OPTIONAL)
    if version == 2:
        order.field.add(name="note", number=10, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    return f


def proto_order_class(version: int) -> Any:
    """The generated-code stand-in: ``shop.Order`` of schema version 1 or 2, each in a pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    ts = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(ts)
    pool.Add(ts)
    pool.Add(_proto_file(version))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def record(i: int, version: int) -> dict[str, Any]:
    """Record ``i`` as a dict of the Avro and JSON versions' fields."""
    out: dict[str, Any] = {
        "id": i,
        "customer": None if i % 3 == 0 else f"c{i % 97}",
        "amount": decimal.Decimal(i % 100_000) / 100,
        "at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=i * 37),
        "tags": [f"t{j}" for j in range(i % 4)],
        "attrs": {f"k{j}": i * j for j in range(i % 3)},
        "kind": "WHOLESALE" if i % 5 == 0 else "RETAIL",
        "ref": None if i % 4 == 0 else (f"r{i}" if i % 4 == 1 else i * 1000),
        "ship": {"city": f"city{i % 13}"},
    }
    if version == 2:
        out["note"] = f"n{i}"
        out["qty"] = i % 7
    return out


def json_record(i: int, version: int) -> dict[str, Any]:
    r = record(i, version)
    out = {
        "id": i,
        "customer": r["customer"],
        "amount": float(r["amount"]),
        "tags": r["tags"],
        "attrs": r["attrs"],
        "ship": r["ship"],
        "extra": f"e{i}" if i % 2 else i,
    }
    if version == 2:
        out["note"] = r["note"]
    return out


def proto_record(i: int, version: int) -> Any:
    r = record(i, version)
    message = _classes()[version]()
    message.id = i
    if r["customer"] is not None:
        message.customer = r["customer"]
    message.amount = float(r["amount"])
    message.at.FromDatetime(r["at"])
    message.tags.extend(r["tags"])
    message.attrs.update(r["attrs"])
    message.kind = 1 if r["kind"] == "WHOLESALE" else 0
    if i % 6:
        message.ship.city = r["ship"]["city"]
    message.count = (2**64 - 1 - i) if i % 11 == 0 else i
    if version == 2:
        message.note = r["note"]
    return message


_CLASSES: dict[int, Any] = {}


def _classes() -> dict[int, Any]:
    if not _CLASSES:
        _CLASSES.update({1: proto_order_class(1), 2: proto_order_class(2)})
    return _CLASSES


def serializers(fmt: str, client: Any) -> dict[int, Any]:
    """confluent-kafka's serializer of each version, registering its schema under TOPIC-value."""
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    conf = {"auto.register.schemas": True}
    if fmt == "avro":
        return {v: AvroSerializer(client, json.dumps(s), conf=conf) for v, s in ((1, AVRO_V1), (2, AVRO_V2))}
    if fmt == "json-schema":
        return {v: JSONSerializer(json.dumps(s), client, conf=conf) for v, s in ((1, JSON_V1), (2, JSON_V2))}
    if fmt == "protobuf":
        return {
            v: ProtobufSerializer(_classes()[v], client, conf={**conf, "use.deprecated.format": False}) for v in (1, 2)
        }
    raise ValueError(f"format {fmt!r}: one of {FORMATS}")


def payloads(fmt: str, client: Any, topic: str, n: int, *, switch_at: int | None = None) -> list[bytes]:
    """``n`` framed values for ``topic``: version 1 below ``switch_at`` (default: half), version 2 after."""
    from confluent_kafka.serialization import MessageField, SerializationContext

    ctx = SerializationContext(topic, MessageField.VALUE)
    sers = serializers(fmt, client)
    switch = n // 2 if switch_at is None else switch_at
    make = {"avro": record, "json-schema": json_record, "protobuf": proto_record}[fmt]
    return [sers[1 if i < switch else 2](make(i, 1 if i < switch else 2), ctx) for i in range(n)]


def peer_deserializer(fmt: str, client: Any, *, latest: bool) -> Any:
    """confluent-kafka's deserializer of ``fmt`` (Protobuf: into version 2's class when ``latest``)."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

    conf = {"use.latest.version": latest}
    if fmt == "avro":
        return AvroDeserializer(client, conf=conf)
    if fmt == "json-schema":
        return JSONDeserializer(None, schema_registry_client=client, conf=conf)
    # into version 2's class, for latest, without asking the registry for the latest version as a serialized
    # descriptor: Apicurio answers that with an error (it keeps confluent-kafka's base64 descriptor as text)
    return ProtobufDeserializer(_classes()[2 if latest else 1], conf={}, schema_registry_client=client)


def arrow_row(fmt: str, value: Any, typ: Any) -> Any:
    """confluent-kafka's value as the column's row: how the mapping (Spark's) says it is typed."""
    if fmt == "protobuf":
        d = json_format.MessageToDict(
            value, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        at = value.at.ToDatetime(tzinfo=datetime.UTC)
        return {
            "id": int(d["id"]),
            "customer": d["customer"],
            "amount": d["amount"],
            "at": at,
            "tags": d["tags"],
            "attrs": sorted((k, v) for k, v in d["attrs"].items()),
            "kind": d["kind"],
            "ship": d.get("ship"),
            "count": int(d["count"]),
            "note": d["note"],
        }
    out = dict(value)
    out["attrs"] = sorted(out["attrs"].items()) if out.get("attrs") is not None else None
    if fmt == "avro":
        ref = out["ref"]
        out["ref"] = (
            None
            if ref is None
            else {"member0": ref if isinstance(ref, str) else None, "member1": ref if isinstance(ref, int) else None}
        )
        return out
    out["extra"] = json.dumps(out["extra"], separators=(",", ":"))
    return {f.name: out.get(f.name) for f in typ}
