"""Protobuf records in Confluent's framing: the 5-byte header, the message indexes (which message of the schema
file), the payload. The writer's schema comes from the registry as a serialized ``FileDescriptorProto``
(``format=serialized``, as confluent-kafka's ``ProtobufDeserializer`` asks for it), its imports by reference,
built into a descriptor pool: no generated code is needed.

``poll()`` gets a message (of ``message_type`` when given, else a class made from the writer's descriptor).
``poll_batch()`` types a column as Spark's ``from_protobuf`` does: a message a struct of its fields in
declaration order, repeated fields lists, maps map<K, V>, enums their names, 64-bit unsigned uint64,
``google.protobuf.Timestamp`` a timestamp[us, UTC]; an unset message field is null, a scalar its default.
"""

from __future__ import annotations

import base64
import datetime
import functools
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from ._column import check_newer, check_on_error, stop_if_newer, typed_column
from ._errors import SchemaDecodeError, SchemaError
from ._framing import message_indexes, schema_id_of
from ._registry import Registry
from ._subjects import subject_for

_WELL_KNOWN = (  # in dependency order
    "descriptor_pb2",
    "source_context_pb2",
    "any_pb2",
    "duration_pb2",
    "empty_pb2",
    "field_mask_pb2",
    "struct_pb2",
    "timestamp_pb2",
    "wrappers_pb2",
    "type_pb2",
    "api_pb2",
)

_FD = FieldDescriptor
_SCALARS = {
    _FD.TYPE_DOUBLE: pa.float64(),
    _FD.TYPE_FLOAT: pa.float32(),
    _FD.TYPE_INT64: pa.int64(),
    _FD.TYPE_SINT64: pa.int64(),
    _FD.TYPE_SFIXED64: pa.int64(),
    _FD.TYPE_UINT64: pa.uint64(),
    _FD.TYPE_FIXED64: pa.uint64(),
    _FD.TYPE_INT32: pa.int32(),
    _FD.TYPE_SINT32: pa.int32(),
    _FD.TYPE_SFIXED32: pa.int32(),
    _FD.TYPE_UINT32: pa.uint32(),
    _FD.TYPE_FIXED32: pa.uint32(),
    _FD.TYPE_BOOL: pa.bool_(),
    _FD.TYPE_STRING: pa.string(),
    _FD.TYPE_BYTES: pa.binary(),
}
_TIMESTAMP = "google.protobuf.Timestamp"


class ProtobufDeserializer:
    """Protobuf values (or keys, ``is_key=True``) of Confluent-framed records. ``message_type``: a generated
    message class every record is parsed into (as confluent-kafka's deserializer requires); without it each
    record is a message of its writer's descriptor. ``latest``, ``subject``, ``reader_id``, ``newer``, ``on_error``
    as for ``AvroDeserializer``. A column holds one message of the reader's file: ``message`` (its full name), else the
    file's root (the top-level message no other one of the file refers to; the first of several); each record is
    parsed as that message of the reader's version (Protobuf's evolution: fields the reader does not know are
    skipped, those the writer did not know take their defaults)."""

    format = "protobuf"

    def __init__(
        self,
        registry: Registry,
        *,
        message_type: Any = None,
        latest: bool = False,
        subject: str | None = None,
        is_key: bool = False,
        on_error: str = "fail",
        reader_id: int | None = None,
        message: str | None = None,
        newer: str = "resolve",
    ) -> None:
        self.reader_id, self.message, self.newer = reader_id, message, check_newer(newer)
        self._reader_ids: dict[str, int] = {}
        self.registry, self.message_type, self.latest = registry, message_type, latest
        self.subject, self.is_key, self.on_error = subject, is_key, check_on_error(on_error)
        self._pools: dict[int, tuple[Any, descriptor_pb2.FileDescriptorProto]] = {}
        self._classes: dict[tuple[int, tuple[int, ...]], Any] = {}
        self._readers: dict[str, tuple[Any, pa.DataType, Callable[[Any], Any]]] = {}

    def deserialize(self, topic: str, headers: Any, data: bytes | None) -> Any:
        if data is None:
            return None
        return self._read(data)

    def arrow_type(self, topic: str) -> pa.DataType:
        """The type of the column's message."""
        return self._reader(topic)[1]

    def to_arrow(
        self, topic: str, values: list[bytes | None] | pa.Array, permissive: bool = False
    ) -> tuple[pa.Array, list[tuple[int, Exception]]]:
        """The column of ``values``, each parsed into the reader's message of the writer's name (Protobuf's
        evolution: fields the reader does not know are skipped, those the writer did not know take defaults)."""
        cls, typ, conv = self._reader(topic)
        column = cls.DESCRIPTOR.full_name

        def row(data: bytes) -> Any:
            schema_id = schema_id_of(data)
            stop_if_newer(self.newer, schema_id, self._reader_ids.get(topic))
            indexes, start = message_indexes(data)
            name = self._message_class(schema_id, tuple(indexes)).DESCRIPTOR.full_name
            if name != column:
                raise SchemaDecodeError(
                    f"the record is a {name} (schema id {schema_id}), the column holds {column}", schema_id=schema_id
                )
            return conv(_parse(cls, data, start, schema_id))

        return typed_column(values, row, lambda: typ, permissive)

    def _read(self, data: bytes) -> Any:
        schema_id = schema_id_of(data)
        indexes, start = message_indexes(data)
        return _parse(self.message_type or self._message_class(schema_id, tuple(indexes)), data, start, schema_id)

    def _message_class(self, schema_id: int, indexes: tuple[int, ...]) -> Any:
        key = (schema_id, indexes)
        if key not in self._classes:
            pool, file = self._pool(schema_id)
            self._classes[key] = message_factory.GetMessageClass(_find(pool, file, indexes, schema_id))
        return self._classes[key]

    def _pool(self, schema_id: int) -> tuple[Any, descriptor_pb2.FileDescriptorProto]:
        if schema_id not in self._pools:
            schema = self.registry.schema(schema_id)
            if schema.schema_type != "PROTOBUF":
                raise SchemaError(
                    f"schema id {schema_id} is {schema.schema_type or 'AVRO'}, not Protobuf", schema_id=schema_id
                )
            pool = _new_pool()
            self._add_references(pool, schema.references or ())
            file = _descriptor(
                schema.schema_str,
                lambda: self.registry.schema(schema_id, fmt="serialized").schema_str,
                f"schema id {schema_id}",
                schema_id,
            )
            if not file.name:
                file.name = f"schema-{schema_id}.proto"
            pool.Add(file)
            self._pools[schema_id] = (pool, file)
        return self._pools[schema_id]

    def _add_references(self, pool: Any, references: Any) -> None:
        for ref in references:
            registered = self.registry.version(ref.subject, ref.version)
            self._add_references(pool, registered.schema.references or ())
            file = _descriptor(
                registered.schema.schema_str,
                functools.partial(self._serialized_version, ref.subject, ref.version),
                f"reference {ref.name}",
                None,
            )
            file.name = ref.name
            try:
                pool.Add(file)
            except TypeError:  # already there (a reference shared by two imports)
                pass

    def _serialized_version(self, subject: str, version: int) -> str | None:
        return self.registry.version(subject, version, fmt="serialized").schema.schema_str

    def _reader(self, topic: str) -> tuple[Any, pa.DataType, Callable[[Any], Any]]:
        """The column's message of the reader's file (or message_type): its class, Arrow type and converter."""
        if topic not in self._readers:
            if self.message_type is not None:
                descriptor = self.message_type.DESCRIPTOR
            else:
                reader_id, _ = self.registry.reader(subject_for(topic, self.subject, self.is_key), self.reader_id)
                self._reader_ids[topic] = reader_id
                pool, file = self._pool(reader_id)
                full = self.message or _root(file)
                try:
                    descriptor = pool.FindMessageTypeByName(full)
                except KeyError:
                    raise SchemaError(f"schema id {reader_id} has no message {full!r}", schema_id=reader_id) from None
            typ, conv = _message_type(descriptor, ())
            self._readers[topic] = (message_factory.GetMessageClass(descriptor), typ, conv)
        return self._readers[topic]


def _root(file: descriptor_pb2.FileDescriptorProto) -> str:
    """The full name of the file's root message: the first top-level one no message of the file refers to."""
    prefix = f".{file.package}." if file.package else "."
    used: set[str] = set()

    def refer(messages: Any) -> None:
        for message in messages:
            used.update(f.type_name for f in message.field if f.type_name)
            refer(message.nested_type)

    refer(file.message_type)
    names = [prefix + m.name for m in file.message_type]
    roots = [n for n in names if n not in used] or names
    return roots[0][1:]


def _parse(cls: Any, data: bytes, start: int, schema_id: int) -> Any:
    message = cls()
    try:
        message.ParseFromString(memoryview(data)[start:].tobytes())
    except DecodeError as exc:
        raise SchemaDecodeError(
            f"the payload is not a {cls.DESCRIPTOR.full_name} (schema id {schema_id}): {exc}", schema_id=schema_id
        ) from exc
    return message


def _new_pool() -> Any:
    import importlib

    pool = descriptor_pool.DescriptorPool()
    for name in _WELL_KNOWN:
        module = importlib.import_module(f"google.protobuf.{name}")
        file = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(file)
        pool.Add(file)
    return pool


def _descriptor(
    text: str | None, serialized: Callable[[], str | None], what: str, schema_id: int | None
) -> descriptor_pb2.FileDescriptorProto:
    """The schema as a FileDescriptorProto: its text when that is one already (a registry that keeps what
    confluent-kafka's serializer registered, a base64 descriptor, as Apicurio does, and answers
    ``format=serialized`` with an error), else the registry's ``format=serialized`` answer (Confluent's, which
    keeps .proto text)."""
    file = _decoded(text or "")
    if file is None:
        file = _decoded(serialized() or "")
    if file is None:
        raise SchemaError(
            f"the registry gives {what} as .proto text only, not as a serialized descriptor (format=serialized): "
            "without a .proto compiler here, pass message_type (the generated class)",
            schema_id=schema_id,
        )
    return file


def _decoded(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    file = descriptor_pb2.FileDescriptorProto()
    try:
        file.ParseFromString(base64.b64decode(text, validate=True))
    except (ValueError, DecodeError):
        return None
    return file if file.message_type or file.enum_type else None


def _find(
    pool: Any, file: descriptor_pb2.FileDescriptorProto, indexes: tuple[int, ...], schema_id: int | None
) -> Descriptor:
    """The message the indexes name: the i-th top-level message, then nested ones."""
    path, messages = [], list(file.message_type)
    for index in indexes:
        if index >= len(messages):
            raise SchemaError(
                f"the record names message index {index} of {len(messages)} in schema id {schema_id}",
                schema_id=schema_id,
            )
        path.append(messages[index].name)
        messages = list(messages[index].nested_type)
    full = ".".join(([file.package] if file.package else []) + path)
    return pool.FindMessageTypeByName(full)


def _message_type(descriptor: Descriptor, seen: tuple[str, ...]) -> tuple[pa.DataType, Callable[[Any], Any]]:
    if descriptor.full_name == _TIMESTAMP:
        return pa.timestamp("us", tz="UTC"), _timestamp
    if descriptor.full_name in seen:
        raise SchemaError(f"the message {descriptor.full_name} contains itself: a recursive message has no Arrow type")
    fields, converts = [], []
    for field in descriptor.fields:
        typ, conv = _field_type(field, (*seen, descriptor.full_name))
        fields.append(pa.field(field.name, typ))
        converts.append((field.name, field, conv))

    def convert(message: Any) -> Any:
        out: dict[str, Any] = {}
        for name, field, conv in converts:
            if field.message_type is not None and not _repeated(field) and not message.HasField(name):
                out[name] = None
            else:
                out[name] = conv(getattr(message, name))
        return out

    return pa.struct(fields), convert


def _repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _field_type(field: FieldDescriptor, seen: tuple[str, ...]) -> tuple[pa.DataType, Callable[[Any], Any]]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_type, key_conv = _single(field.message_type.fields_by_name["key"], seen)
        value_type, value_conv = _single(field.message_type.fields_by_name["value"], seen)
        return pa.map_(key_type, value_type), lambda m: [(key_conv(k), value_conv(v)) for k, v in m.items()]
    typ, conv = _single(field, seen)
    if _repeated(field):
        return pa.list_(typ), lambda values: [conv(v) for v in values]
    return typ, conv


def _single(field: FieldDescriptor, seen: tuple[str, ...]) -> tuple[pa.DataType, Callable[[Any], Any]]:
    if field.type == _FD.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return pa.string(), lambda v: names.get(v, str(v))
    if field.message_type is not None:
        return _message_type(field.message_type, seen)
    return _SCALARS[field.type], _same


def _same(value: Any) -> Any:
    return value


def _timestamp(message: Any) -> Any:
    micros = message.seconds * 1_000_000 + message.nanos // 1000
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(microseconds=micros)
