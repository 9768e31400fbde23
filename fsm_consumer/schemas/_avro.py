"""Avro records in Confluent's framing, decoded with fastavro against the schemas in a registry.

``AvroDeserializer`` is a kafka-python style deserializer for ``poll()`` (``value_deserializer=``): each record
as the dict fastavro reads with its writer's schema, or resolved to a reader schema (one given, or the subject's
latest version) by Avro's resolution rules, as confluent-kafka's ``AvroDeserializer`` gives it. For
``poll_batch()`` it also types a whole column at once (``to_arrow``): every record resolved to one reader
schema, the struct column Spark's ``from_avro`` would make.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
from fastavro import parse_schema, schemaless_reader
from fastavro.read import SchemaResolutionError

from ._avro_arrow import arrow_type, converter
from ._avro_columns import compiled_column
from ._avro_plan import Layout, Program, Unsupported, compile_pair
from ._column import check_newer, check_on_error, stop_if_newer, typed_column
from ._errors import SchemaDecodeError, SchemaError
from ._framing import HEADER_SIZE, schema_id_of
from ._registry import Registry
from ._subjects import subject_for


class AvroDeserializer:
    """Avro values (or keys, ``is_key=True``) of Confluent-framed records.

    ``reader_schema``: an Avro schema (JSON text or dict) every record is resolved to. ``latest=True``: the
    subject's latest version is the reader schema (``subject``, else ``TOPIC-value`` / ``TOPIC-key``). Neither:
    each record is read with its writer's schema in ``poll()``, and ``poll_batch()`` resolves to the latest.
    ``reader_id``: the registry id of the reader schema (instead of ``reader_schema``; ``latest`` takes it then).
    ``newer="stop"``: a column ends at a record written with a schema registered after the reader's
    (``NewerSchemaError``), where ``"resolve"`` (the default) resolves it to the reader's, dropping new fields.
    ``on_error`` (columns only: ``poll()`` raises): ``"fail"`` stops at a record that does not decode, as
    ``poll()`` does; ``"null"`` gives it a null value and its error in a ``value_error`` column."""

    format = "avro"

    def __init__(
        self,
        registry: Registry,
        *,
        reader_schema: str | dict | None = None,
        latest: bool = False,
        subject: str | None = None,
        is_key: bool = False,
        on_error: str = "fail",
        reader_id: int | None = None,
        newer: str = "resolve",
    ) -> None:
        self.reader_id, self.newer = reader_id, check_newer(newer)
        self._reader_ids: dict[str, int] = {}
        self.on_error = check_on_error(on_error)
        self.registry = registry
        self.is_key = is_key
        self.subject = subject
        self.latest = latest
        self._given = (
            self._parse(json.loads(reader_schema) if isinstance(reader_schema, str) else reader_schema)
            if reader_schema
            else None
        )
        self._writers: dict[int, Any] = {}
        self._readers: dict[str, tuple[Any, pa.DataType, Any]] = {}
        self._layouts: dict[str, Layout | None] = {}  # None: the reader schema is fastavro's to type
        self._programs: dict[tuple[str, int], Program | Unsupported] = {}

    # poll()
    def deserialize(self, topic: str, headers: Any, data: bytes | None) -> Any:
        if data is None:
            return None
        schema_id = schema_id_of(data)
        writer = self._writer(schema_id)
        pinned = self._given is not None or self.latest or self.reader_id is not None
        reader = self._reader(topic)[0] if pinned else None
        return self._read(data, schema_id, writer, reader, False)

    # poll_batch()
    def arrow_type(self, topic: str) -> pa.DataType:
        """The Arrow type of the reader schema (given, else the subject's latest version)."""
        return self._reader(topic)[1]

    def to_arrow(
        self, topic: str, values: list[bytes | None] | pa.Array, permissive: bool = False
    ) -> tuple[pa.Array, list[tuple[int, Exception]]]:
        """The column of ``values`` (a list or a binary array) resolved to the reader schema, and the (index,
        error) of those that did not decode: permissive, each is a null row; else the column ends before the
        first. The compiled decoder reads it where it can, fastavro where it cannot: the same column."""
        reader, typ, conv = self._reader(topic)
        if not isinstance(values, pa.Array):
            values = pa.array(values, pa.binary())
        layout = self._layout(topic)
        if layout is not None:
            done = compiled_column(values, layout, lambda schema_id: self._program(topic, schema_id), permissive)
            if done is not None:
                return done
        return self._python_column(topic, values.to_pylist(), permissive)

    def _layout(self, topic: str) -> Layout | None:
        if topic not in self._layouts:
            try:
                self._layouts[topic] = Layout(parse_schema(self._reader(topic)[0], expand=True))
            except Unsupported:
                self._layouts[topic] = None
        return self._layouts[topic]

    def _program(self, topic: str, schema_id: int) -> Program:
        """The compiled program of a writer schema id for the topic's reader (Unsupported: fastavro's)."""
        stop_if_newer(self.newer, schema_id, self._reader_ids.get(topic))
        got = self._programs.get((topic, schema_id))
        if got is None:
            layout = self._layout(topic)
            assert layout is not None
            writer = self._writer(schema_id)
            try:
                # equal to the reader: fastavro's schemaless_reader reads it unresolved (_read gets these two)
                got = compile_pair(parse_schema(writer, expand=True), layout, writer == self._reader(topic)[0])
            except Unsupported as exc:
                got = exc
            self._programs[(topic, schema_id)] = got
        if isinstance(got, Unsupported):
            raise got
        return got

    def _python_column(
        self, topic: str, values: list[bytes | None], permissive: bool
    ) -> tuple[pa.Array, list[tuple[int, Exception]]]:
        reader, typ, conv = self._reader(topic)

        def row(data: bytes) -> Any:
            schema_id = schema_id_of(data)
            stop_if_newer(self.newer, schema_id, self._reader_ids.get(topic))
            value = self._read(data, schema_id, self._writer(schema_id), reader, True)
            return value if conv is None else conv(value)

        return typed_column(values, row, lambda: typ, permissive)

    def _read(self, data: bytes, schema_id: int, writer: Any, reader: Any, typed: bool) -> Any:
        payload = io.BytesIO(memoryview(data)[HEADER_SIZE:])
        try:
            return schemaless_reader(
                payload, writer, reader, return_record_name=typed, return_record_name_override=typed
            )
        except SchemaResolutionError as exc:
            raise SchemaDecodeError(
                f"the record's schema (schema id {schema_id}) cannot be resolved to the reader schema: {exc}",
                schema_id=schema_id,
            ) from exc
        except (EOFError, ValueError, IndexError, KeyError, UnicodeDecodeError, OverflowError) as exc:
            raise SchemaDecodeError(
                f"the payload does not decode with its writer schema (schema id {schema_id}): "
                f"{type(exc).__name__}: {exc}",
                schema_id=schema_id,
            ) from exc

    def _writer(self, schema_id: int) -> Any:
        parsed = self._writers.get(schema_id)
        if parsed is None:
            schema = self.registry.schema(schema_id)
            if schema.schema_type not in (None, "AVRO"):
                raise SchemaError(
                    f"schema id {schema_id} is {schema.schema_type}, not Avro: use the "
                    f"{schema.schema_type.lower().replace('json', 'json-schema')} deserializer",
                    schema_id=schema_id,
                )
            parsed = self._writers[schema_id] = self._parse(json.loads(schema.schema_str or "null"), schema.references)
        return parsed

    def _reader(self, topic: str) -> tuple[Any, pa.DataType, Any]:
        got = self._readers.get(topic)
        if got is None:
            if self._given is not None:
                parsed = self._given
            else:
                rid, schema = self.registry.reader(subject_for(topic, self.subject, self.is_key), self.reader_id)
                self._reader_ids[topic] = rid
                parsed = self._parse(json.loads(schema.schema_str or "null"), schema.references)
            expanded = parse_schema(parsed, expand=True)
            got = self._readers[topic] = (parsed, arrow_type(expanded), converter(expanded))
        return got

    def _parse(self, schema: Any, references: Any = ()) -> Any:
        named: dict[str, Any] = {}
        self._add_references(references or (), named)
        return parse_schema(schema, named_schemas=named)

    def _add_references(self, references: Any, named: dict[str, Any]) -> None:
        for ref in references:
            registered = self.registry.version(ref.subject, ref.version)
            self._add_references(registered.schema.references or (), named)
            parse_schema(json.loads(registered.schema.schema_str or "null"), named_schemas=named)
