"""JSON Schema records in Confluent's framing: the JSON document after the 5-byte header, validated against its
writer's schema (as confluent-kafka's ``JSONDeserializer`` does by default) with jsonschema.

For ``poll_batch()`` the reader schema (given, else the subject's latest version) types the column: an object's
properties a struct (every field nullable: JSON may leave any out), ``integer`` int64, ``number`` float64,
``boolean`` bool, ``string`` string, an array a list, an object with only ``additionalProperties`` a
map<string, T>; a value of no single type (``oneOf``, ``anyOf``, no ``type``) its JSON text in a string column.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pyarrow as pa

from ._column import by_name, check_newer, check_on_error, items, map_values, stop_if_newer, typed_column
from ._errors import SchemaDecodeError, SchemaError
from ._framing import HEADER_SIZE, schema_id_of
from ._registry import Registry
from ._subjects import subject_for

_SCALARS = {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_(), "string": pa.string()}


class JsonSchemaDeserializer:
    """JSON Schema values (or keys, ``is_key=True``) of Confluent-framed records: each record the parsed JSON
    (dicts and lists), validated against its writer's schema unless ``validate=False``. ``reader_schema``,
    ``latest``, ``subject``, ``reader_id``, ``newer`` and ``on_error`` as for ``AvroDeserializer``."""

    format = "json-schema"

    def __init__(
        self,
        registry: Registry,
        *,
        reader_schema: str | dict | None = None,
        latest: bool = False,
        subject: str | None = None,
        is_key: bool = False,
        validate: bool = True,
        on_error: str = "fail",
        reader_id: int | None = None,
        newer: str = "resolve",
    ) -> None:
        self.reader_id, self.newer = reader_id, check_newer(newer)
        self._reader_ids: dict[str, int] = {}
        self.registry, self.is_key, self.subject, self.latest = registry, is_key, subject, latest
        self.validate, self.on_error = validate, check_on_error(on_error)
        self._given = json.loads(reader_schema) if isinstance(reader_schema, str) else reader_schema
        self._validators: dict[int, Any] = {}
        self._readers: dict[str, tuple[pa.DataType, Callable[[Any], Any] | None]] = {}

    def deserialize(self, topic: str, headers: Any, data: bytes | None) -> Any:
        if data is None:
            return None
        return self._read(data)

    def arrow_type(self, topic: str) -> pa.DataType:
        return self._reader(topic)[0]

    def to_arrow(
        self, topic: str, values: list[bytes | None] | pa.Array, permissive: bool = False
    ) -> tuple[pa.Array, list[tuple[int, Exception]]]:
        typ, conv = self._reader(topic)

        def row(data: bytes) -> Any:
            stop_if_newer(self.newer, schema_id_of(data), self._reader_ids.get(topic))
            return _converted(conv, self._read(data))

        return typed_column(values, row, lambda: typ, permissive)

    def _read(self, data: bytes) -> Any:
        schema_id = schema_id_of(data)
        validator = self._validator(schema_id)
        try:
            value = json.loads(memoryview(data)[HEADER_SIZE:].tobytes())
        except ValueError as exc:
            raise SchemaDecodeError(
                f"the payload is not JSON (schema id {schema_id}): {exc}", schema_id=schema_id
            ) from exc
        if validator is not None:
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            if error is not None:
                raise SchemaDecodeError(
                    f"the JSON does not validate against its schema (id {schema_id}): {error.message}",
                    schema_id=schema_id,
                )
        return value

    def _validator(self, schema_id: int) -> Any:
        if schema_id not in self._validators:
            schema = self.registry.schema(schema_id)
            if schema.schema_type != "JSON":
                raise SchemaError(
                    f"schema id {schema_id} is {schema.schema_type or 'AVRO'}, not JSON Schema", schema_id=schema_id
                )
            parsed = json.loads(schema.schema_str or "{}")
            self._validators[schema_id] = jsonschema.validators.validator_for(parsed)(parsed) if self.validate else None
        return self._validators[schema_id]

    def _reader(self, topic: str) -> tuple[pa.DataType, Callable[[Any], Any] | None]:
        if topic not in self._readers:
            schema = self._given
            if schema is None:
                rid, registered = self.registry.reader(subject_for(topic, self.subject, self.is_key), self.reader_id)
                self._reader_ids[topic] = rid
                schema = json.loads(registered.schema_str or "{}")
            self._readers[topic] = _typed(schema, schema, 0)
        return self._readers[topic]


def _typed(node: Any, root: Any, depth: int) -> tuple[pa.DataType, Callable[[Any], Any] | None]:
    if depth > 32 or not isinstance(node, dict):
        return pa.string(), _as_text
    if "$ref" in node:
        return _typed(_resolve(node["$ref"], root), root, depth + 1)
    kinds = node.get("type")
    if isinstance(kinds, list):
        present = [k for k in kinds if k != "null"]
        if len(present) != 1:
            return pa.string(), _as_text
        kinds = present[0]
    if kinds in _SCALARS:
        return _SCALARS[kinds], (_int if kinds == "integer" else _float if kinds == "number" else None)
    if kinds == "array" and isinstance(node.get("items"), dict):
        item, conv = _typed(node["items"], root, depth + 1)
        return pa.list_(item), (None if conv is None else items(conv))
    if kinds == "object" and node.get("properties"):
        fields, converts = [], []
        for name, sub in node["properties"].items():
            ftype, fconv = _typed(sub, root, depth + 1)
            fields.append(pa.field(name, ftype))
            if fconv is not None:
                converts.append((name, fconv))
        return pa.struct(fields), by_name(converts)
    if kinds == "object" and isinstance(node.get("additionalProperties"), dict):
        value, conv = _typed(node["additionalProperties"], root, depth + 1)
        return pa.map_(pa.string(), value), (None if conv is None else map_values(conv))
    return pa.string(), _as_text


def _resolve(ref: str, root: Any) -> Any:
    if not ref.startswith("#/"):
        return {}  # a reference to another document: its JSON text
    node = root
    for part in ref[2:].split("/"):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node


def _converted(conv: Callable[[Any], Any] | None, value: Any) -> Any:
    return value if conv is None else conv(value)


def _as_text(value: Any) -> Any:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _int(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value
