"""The schema deserializers against confluent-kafka's own, record by record, on records its serializers wrote
(two versions per format), with confluent-kafka's in-memory registry client; the typed columns against the
same values; and every kind of bad input named. The real registry and broker: tests/integration/schemas."""

from __future__ import annotations

import datetime
import decimal
import logging
import time

import pyarrow as pa
import pytest

pytest.importorskip("confluent_kafka.schema_registry", reason="the schemas extra: pip install fsm_consumer[schemas]")

from confluent_kafka.schema_registry._sync.mock_schema_registry_client import MockSchemaRegistryClient  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from google.protobuf import json_format  # noqa: E402

from fsm_consumer.schemas import (  # noqa: E402
    AvroDeserializer,
    FramingError,
    JsonSchemaDeserializer,
    ProtobufDeserializer,
    Registry,
    RegistryUnavailableError,
    SchemaDecodeError,
    SchemaError,
    SchemaNotFoundError,
)
from fsm_consumer.schemas._framing import message_indexes  # noqa: E402
from fsm_consumer.testing import _schema_peer as peer  # noqa: E402


def _mock():
    """confluent-kafka's in-memory registry client, a new registry each time."""
    _mock.count = getattr(_mock, "count", 0) + 1
    return MockSchemaRegistryClient({"url": f"mock://registry{_mock.count}"})


OURS = {"avro": AvroDeserializer, "json-schema": JsonSchemaDeserializer, "protobuf": ProtobufDeserializer}
CTX = SerializationContext("t", MessageField.VALUE)
N = 60


@pytest.fixture(params=peer.FORMATS)
def written(request):
    fmt = request.param
    client = _mock()
    return fmt, client, peer.payloads(fmt, client, "t", N)


def _plain(fmt, value):
    """A deserializer's value in a form both sides share (Protobuf messages of two pools as dicts)."""
    if fmt == "protobuf":
        return json_format.MessageToDict(value, preserving_proto_field_name=True)
    return value


@pytest.mark.parametrize("latest", [False, True], ids=["writer-schema", "latest-schema"])
def test_poll_deserializers_give_what_confluent_kafkas_give(written, latest):
    fmt, client, data = written
    ours = OURS[fmt](Registry(client=client), latest=latest)
    theirs = peer.peer_deserializer(fmt, client, latest=latest)
    # confluent-kafka's Protobuf deserializer reads into one generated class: version 1's reads version 1
    checked = data if latest or fmt != "protobuf" else data[: N // 2]
    for payload in checked:
        assert _plain(fmt, ours.deserialize("t", [], payload)) == _plain(fmt, theirs(payload, CTX))
    assert ours.deserialize("t", [], None) is None


def test_typed_columns_hold_what_confluent_kafka_reads_with_the_latest_schema(written):
    """Every row of the column equals confluent-kafka's value resolved to the latest version, in Arrow's form."""
    fmt, client, data = written
    column, failed = OURS[fmt](Registry(client=client)).to_arrow("t", [*data, None])
    assert failed == []
    theirs = peer.peer_deserializer(fmt, client, latest=True)
    rows = column.to_pylist()
    assert rows[-1] is None
    for payload, row in zip(data, rows, strict=False):
        if fmt == "protobuf":  # a Protobuf map has no order
            row["attrs"] = sorted(row["attrs"])
        assert peer.arrow_row(fmt, theirs(payload, CTX), column.type) == row


def test_avro_types_are_sparks():
    client = _mock()
    peer.payloads("avro", client, "t", 2)
    typ = AvroDeserializer(Registry(client=client)).arrow_type("t")
    assert typ.field("id").type == pa.int64() and not typ.field("id").nullable
    assert typ.field("customer").type == pa.string() and typ.field("customer").nullable
    assert typ.field("amount").type == pa.decimal128(12, 2)
    assert typ.field("at").type == pa.timestamp("ms", tz="UTC")
    assert typ.field("tags").type.value_type == pa.string()
    assert (typ.field("attrs").type.key_type, typ.field("attrs").type.item_type) == (pa.string(), pa.int32())
    assert typ.field("kind").type == pa.string()
    assert typ.field("ref").type == pa.struct([("member0", pa.string()), ("member1", pa.int64())])
    assert typ.field("ship").type == pa.struct([pa.field("city", pa.string(), nullable=False)])
    assert typ.field("note").type == pa.string() and typ.field("qty").type == pa.int32()


def test_a_given_reader_schema_resolves_every_record_by_avros_rules():
    client = _mock()
    data = peer.payloads("avro", client, "t", 10)
    reader = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "qty", "type": "long", "default": -1}],
    }
    ours = AvroDeserializer(Registry(client=client), reader_schema=reader)
    values = [ours.deserialize("t", [], p) for p in data]
    assert values[:5] == [{"id": i, "qty": -1} for i in range(5)]  # version 1: no qty, the reader's default
    assert values[5:] == [{"id": i, "qty": i % 7} for i in range(5, 10)]  # int promoted to long
    column, failed = ours.to_arrow("t", data)
    assert failed == [] and column.type == pa.struct(
        [pa.field("id", pa.int64(), False), pa.field("qty", pa.int64(), False)]
    )


def test_an_incompatible_reader_schema_is_a_decode_error_naming_the_schema_id():
    client = _mock()
    data = peer.payloads("avro", client, "t", 2)
    reader = {"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "missing", "type": "string"}]}
    with pytest.raises(SchemaDecodeError, match=r"\(schema id 1\) cannot be resolved") as caught:
        AvroDeserializer(Registry(client=client), reader_schema=reader).deserialize("t", [], data[0])
    assert caught.value.schema_id == 1


@pytest.mark.parametrize("fmt", peer.FORMATS)
def test_bad_input_is_named(fmt):
    client = _mock()
    data = peer.payloads(fmt, client, "t", 2)
    ours = OURS[fmt](Registry(client=client))
    with pytest.raises(FramingError, match="not 0: the record was not written by a schema-registry serializer"):
        ours.deserialize("t", [], b'{"plain": "json"}')
    with pytest.raises(FramingError, match="cannot hold Confluent's 5-byte header"):
        ours.deserialize("t", [], b"\x00\x00")
    with pytest.raises(SchemaNotFoundError, match="has no schema with id 4242") as caught:
        ours.deserialize("t", [], b"\x00" + (4242).to_bytes(4, "big") + data[0][5:])
    assert caught.value.schema_id == 4242
    with pytest.raises(SchemaDecodeError, match="schema id 1"):
        ours.deserialize(
            "t",
            [],
            {"avro": data[0][:9], "json-schema": data[0][:5] + b"{no", "protobuf": data[0][:5] + b"\x00\xff\xff"}[fmt],
        )


def test_a_schema_of_another_format_says_which_deserializer_to_use():
    client = _mock()
    data = peer.payloads("json-schema", client, "t", 1)
    with pytest.raises(SchemaError, match="is JSON, not Avro"):
        AvroDeserializer(Registry(client=client)).deserialize("t", [], data[0])


def test_columns_stop_at_the_first_bad_value_or_keep_it_as_null_with_its_error():
    client = _mock()
    data = peer.payloads("avro", client, "t", 6)
    values = [*data[:3], b"plain", *data[3:]]
    column, failed = AvroDeserializer(Registry(client=client)).to_arrow("t", values)
    assert len(column) == 3 and [i for i, _ in failed] == [3] and isinstance(failed[0][1], FramingError)
    column, failed = AvroDeserializer(Registry(client=client), on_error="null").to_arrow("t", values, True)
    assert len(column) == 7 and column[3].as_py() is None and [i for i, _ in failed] == [3]
    assert column[4].as_py()["id"] == 3


def test_protobuf_message_indexes():
    assert message_indexes(b"\x00\x00\x00\x00\x01\x00rest") == ([0], 6)
    assert message_indexes(b"\x00\x00\x00\x00\x01\x04\x02\x06rest") == ([1, 3], 8)
    with pytest.raises(FramingError, match="does not fit the record"):
        message_indexes(b"\x00\x00\x00\x00\x01\x7e")
    with pytest.raises(FramingError, match="negative Protobuf message index"):
        message_indexes(b"\x00\x00\x00\x00\x01\x02\x01")


def test_an_unreachable_registry_is_retried_then_unavailable_warned_once(caplog, free_port):
    registry = Registry(f"http://127.0.0.1:{free_port}", timeout_s=1.0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "fsm_consumer.schemas"):
        with pytest.raises(
            RegistryUnavailableError, match=r"did not answer for schema id 7 within 1 s \(ConnectError"
        ) as caught:
            AvroDeserializer(registry).deserialize("t", [], b"\x00\x00\x00\x00\x07\x02")
    assert 0.9 < time.monotonic() - started < 5
    assert caught.value.schema_id == 7
    warnings = [r for r in caught_records(caplog) if "retrying for up to 1 s" in r.getMessage()]
    assert len(warnings) == 1, caplog.text


def caught_records(caplog):
    return [r for r in caplog.records if r.name == "fsm_consumer.schemas"]


@pytest.fixture
def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_values_decimal_and_timestamp_logical_types_round_trip():
    client = _mock()
    data = peer.payloads("avro", client, "t", 3)
    row = AvroDeserializer(Registry(client=client)).to_arrow("t", data)[0][2].as_py()
    assert row["amount"] == decimal.Decimal("0.02")
    assert row["at"] == datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=74)


def test_unions_and_uuids_inside_arrays_and_maps_take_their_arrow_form():
    import json
    import uuid

    from confluent_kafka.schema_registry.avro import AvroSerializer

    schema = {
        "type": "record",
        "name": "Nested",
        "fields": [
            {"name": "mixed", "type": {"type": "array", "items": ["null", "string", "long"]}},
            {"name": "ids", "type": {"type": "map", "values": {"type": "string", "logicalType": "uuid"}}},
        ],
    }
    client = _mock()
    one = uuid.UUID(int=1)
    payload = AvroSerializer(client, json.dumps(schema))({"mixed": ["a", 2, None], "ids": {"k": str(one)}}, CTX)
    column, failed = AvroDeserializer(Registry(client=client)).to_arrow("t", [payload])
    assert failed == []
    assert column.to_pylist() == [
        {
            "mixed": [{"member0": "a", "member1": None}, {"member0": None, "member1": 2}, None],
            "ids": [("k", str(one))],
        }
    ]
