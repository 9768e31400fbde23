"""``fsm_kafka``'s typed keys and values: the options that name a record format and a schema registry, the
Spark type of the column they give, and the deserializers an executor reads with.

``valueFormat`` / ``keyFormat``: ``binary`` (Spark's Kafka source's column, the default), ``avro``,
``protobuf`` or ``json-schema`` (Confluent's framing, schemas from ``schema.registry.url``). The reader schema
is chosen once, on the driver, when the read is planned: ``valueSchema`` when given (Avro or JSON Schema text),
else the latest version of ``valueSubject`` (default ``TOPIC-value``); its registry id is carried to the
executors, so every task resolves records to the same schema whatever is registered meanwhile. ``mode``:
``FAILFAST`` (default, as Spark's ``from_avro``) fails the read at a record that does not decode, naming its
partition, offset and schema id; ``PERMISSIVE`` gives it a null value and the error in ``valueError``
(``keyError``). ``newerSchemas``: a record written with a schema registered after the reader's is resolved to
the reader's (``resolve``, the default: fields it does not know are dropped) or fails the read with
``NewerSchemaError`` (``stop``: what ``fsm-consumer ingest`` asks, to restart with the new version).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ._option_values import KafkaOptionError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType

FORMATS = ("binary", "avro", "protobuf", "json-schema")
MODES = ("FAILFAST", "PERMISSIVE")
# option names (Spark's spelling); pyspark hands them over lower-cased
OPTIONS = (
    "valueFormat",
    "keyFormat",
    "valueSchema",
    "keySchema",
    "valueSubject",
    "keySubject",
    "valueMessage",
    "keyMessage",
    "mode",
    "newerSchemas",
    "schema.registry.url",
    "schema.registry.basic.auth.user.info",
    "schema.registry.bearer.auth.token",
    "schema.registry.ssl.ca.location",
    "schema.registry.ssl.certificate.location",
    "schema.registry.ssl.key.location",
)


@dataclass(frozen=True)
class Side:
    """How the key or the value is read: its format, and the reader schema (given text, or its registry id
    once the driver has chosen it)."""

    origin: str  # "key" or "value"
    format: str = "binary"
    schema: str | None = None
    subject: str | None = None
    message: str | None = None  # Protobuf: the message the column holds (full name)
    reader_id: int | None = None

    @property
    def typed(self) -> bool:
        return self.format != "binary"


@dataclass(frozen=True)
class Formats:
    key: Side
    value: Side
    permissive: bool = False
    registry: tuple[tuple[str, str], ...] = ()  # the schema.registry.* options, as given
    newer: str = "resolve"  # newerSchemas: a record of a schema registered after the reader's is resolved, or stops

    @property
    def typed(self) -> bool:
        return self.key.typed or self.value.typed

    def pinned(self, topics: tuple[str, ...]) -> Formats:
        """These formats with each side's reader schema chosen now (the driver, at planning): the latest version
        of its subject, by registry id, so every executor reads with that one."""
        from dataclasses import replace

        sides = []
        for side in (self.key, self.value):
            if side.typed and side.schema is None and side.reader_id is None:
                subject = _subject(side, topics)
                registry = self.client()
                registry.refresh_latest()  # its client is the process's: a reused planning worker asked before
                registered = registry.latest(subject)
                side = replace(side, reader_id=registered.schema_id, subject=subject)
            sides.append(side)
        return replace(self, key=sides[0], value=sides[1])

    def client(self) -> Any:
        """A Registry for these settings over the process's one client for them (a Spark worker reads task
        after task with the same settings)."""
        from ..schemas import Registry

        conf = dict(self.registry)
        url = conf.get("schema.registry.url")
        if not url:
            raise KafkaOptionError(
                "schema.registry.url", "required with valueFormat/keyFormat avro, protobuf or json-schema"
            )
        return Registry(
            url,
            basic_auth=conf.get("schema.registry.basic.auth.user.info"),
            bearer_token=conf.get("schema.registry.bearer.auth.token"),
            ca_location=conf.get("schema.registry.ssl.ca.location"),
            cert_location=conf.get("schema.registry.ssl.certificate.location"),
            key_location=conf.get("schema.registry.ssl.key.location"),
            shared=True,
        )

    def deserializers(self) -> dict[str, Any]:
        """The Consumer's key_deserializer and value_deserializer for these formats."""
        registry = self.client() if self.typed else None
        return {
            f"{side.origin}_deserializer": _deserializer(side, registry, self.permissive, self.newer)
            for side in (self.key, self.value)
            if side.typed
        }

    def spark_types(self, topic: str) -> tuple[DataType | None, DataType | None]:
        """Spark's types of the key and value columns when typed (None: binary), for ``topic``."""
        if all(s.schema is not None or s.reader_id is not None for s in (self.key, self.value) if s.typed):
            return _chosen_types(self, topic)  # the reader schemas are fixed: so are their types
        return self._spark_types(topic)

    def _spark_types(self, topic: str) -> tuple[DataType | None, DataType | None]:
        made = self.deserializers()
        key, value = (made.get(f"{o}_deserializer") for o in ("key", "value"))
        return (
            None if key is None else spark_type(key.arrow_type(topic)),
            None if value is None else spark_type(value.arrow_type(topic)),
        )


NONE = Formats(Side("key"), Side("value"))


@lru_cache(maxsize=32)
def _chosen_types(formats: Formats, topic: str) -> tuple[DataType | None, DataType | None]:
    """Once per process for formats whose reader schemas are chosen (a Spark worker asked for every task:
    deserializers made and schemas turned into types, about 40 ms a partition)."""
    return formats._spark_types(topic)


def parse(opt: dict[str, Any]) -> Formats:
    """The formats of a read from its options (canonical names)."""
    sides = []
    for origin in ("key", "value"):
        fmt = str(opt.get(f"{origin}Format", "binary")).strip().lower()
        if fmt not in FORMATS:
            raise KafkaOptionError(f"{origin}Format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
        schema = opt.get(f"{origin}Schema")
        if schema is not None and fmt not in ("avro", "json-schema"):
            raise KafkaOptionError(
                f"{origin}Schema", f"a reader schema given as text is for avro and json-schema, not {fmt}"
            )
        sides.append(
            Side(
                origin,
                fmt,
                None if schema is None else str(schema),
                _text(opt.get(f"{origin}Subject")),
                _text(opt.get(f"{origin}Message")),
            )
        )
    mode = str(opt.get("mode", "FAILFAST")).strip().upper()
    if mode not in MODES:
        raise KafkaOptionError("mode", f"{mode!r} is not one of {', '.join(MODES)}")
    registry = tuple(sorted((k, str(v)) for k, v in opt.items() if k.startswith("schema.registry.")))
    newer = str(opt.get("newerSchemas", "resolve")).strip().lower()
    if newer not in ("resolve", "stop"):
        raise KafkaOptionError("newerSchemas", f"{newer!r} is not one of resolve, stop")
    formats = Formats(sides[0], sides[1], mode == "PERMISSIVE", registry, newer)
    if formats.typed and not dict(registry).get("schema.registry.url"):
        raise KafkaOptionError(
            "schema.registry.url", "required with valueFormat/keyFormat avro, protobuf or json-schema"
        )
    if not formats.typed:  # the options that say how a typed side is read, given without one
        for name in OPTIONS:
            if name not in ("valueFormat", "keyFormat") and not name.startswith("schema.registry.") and name in opt:
                raise KafkaOptionError(name, "only with valueFormat or keyFormat avro, protobuf or json-schema")
    return formats


def spark_type(arrow: pa.DataType) -> DataType:
    """Spark's type of a column of ``arrow`` values: Arrow types Spark has none of widened first (unsigned
    integers to the next signed or decimal(20, 0), a millisecond time to microseconds)."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(widened(arrow))


def widened(arrow: pa.DataType) -> pa.DataType:
    import pyarrow as pa

    if pa.types.is_uint8(arrow) or pa.types.is_uint16(arrow):
        return pa.int32()
    if pa.types.is_uint32(arrow):
        return pa.int64()
    if pa.types.is_uint64(arrow):
        return pa.decimal128(20, 0)
    if pa.types.is_time32(arrow):
        return pa.time64("us")
    if pa.types.is_struct(arrow):
        return pa.struct([f.with_type(widened(f.type)) for f in arrow])
    if pa.types.is_map(arrow):
        return pa.map_(widened(arrow.key_type), arrow.item_field.with_type(widened(arrow.item_type)))
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return pa.list_(arrow.value_field.with_type(widened(arrow.value_type)))
    return arrow


def _subject(side: Side, topics: tuple[str, ...]) -> str:
    if side.subject:
        return side.subject
    if len(topics) != 1:
        raise KafkaOptionError(
            f"{side.origin}Subject",
            f"needed with {side.origin}Format {side.format} when the read is not of exactly one topic named by "
            f"subscribe (got {', '.join(topics) or 'a pattern'}): the subject whose latest version types the column",
        )
    return f"{topics[0]}-{side.origin}"


def _deserializer(side: Side, registry: Any, permissive: bool, newer: str) -> Any:
    from ..schemas import AvroDeserializer, JsonSchemaDeserializer, ProtobufDeserializer

    on_error = "null" if permissive else "fail"
    common: dict[str, Any] = {
        "subject": side.subject,
        "is_key": side.origin == "key",
        "on_error": on_error,
        "newer": newer,
    }
    if side.format == "protobuf":
        return ProtobufDeserializer(registry, reader_id=side.reader_id, message=side.message, **common)
    cls = AvroDeserializer if side.format == "avro" else JsonSchemaDeserializer
    return cls(registry, reader_schema=side.schema, reader_id=side.reader_id, **common)


def _text(value: Any) -> str | None:
    return None if value is None or not str(value).strip() else str(value).strip()
