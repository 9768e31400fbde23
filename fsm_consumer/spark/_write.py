"""The write side of the ``fsm_kafka`` data source: rows to Kafka records, as Spark's Kafka sink does.

Columns (names case-insensitive; other columns are ignored):

* ``value`` (required): binary or string (UTF-8); null is a tombstone;
* ``key``: binary or string, null when absent;
* ``headers``: array<struct<key: string, value: binary>>;
* ``topic``: string; the ``topic`` option, when set, overrides it for every row (Spark's rule);
* ``partition``: int; null or absent lets the producer's partitioner choose.

Options: ``kafka.bootstrap.servers`` (required) and any ``kafka.<setting>`` of kafka-python's
KafkaProducer, written the Java way (``kafka.acks`` -> ``acks``, ``kafka.compression.type`` ->
``compression_type``). kafka-python's defaults apply (acks=all, idempotence on, retries until
``delivery.timeout.ms``). A missing, unknown or bad option raises KafkaOptionError naming it; a
column of the wrong type, ValueError naming the column.

At least once: each task sends its rows with one producer, flushes, and fails if any record was not
acknowledged, so Spark fails (or retries) the task; records acknowledged before a failure stay in
Kafka (there are no transactions), and a retried task or micro-batch sends its rows again.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from ._kafka_options import convert_option
from ._option_values import KafkaOptionError

if TYPE_CHECKING:
    from pyarrow import RecordBatch

_PREFIX = "kafka."
# KafkaProducer settings that are Python objects, or that would break the bytes the rows give
_NOT_OPTIONS = {
    "key_serializer": "keys are sent as the key column's bytes",
    "value_serializer": "values are sent as the value column's bytes",
    "partitioner": "a Python object; use the partition column to choose partitions",
    "selector": "a Python object",
    "kafka_client": "a Python object",
    "socket_options": "a Python object",
    "ssl_context": "a Python object",
    "sasl_oauth_token_provider": "a Python object",
    "metric_reporters": "a Python object",
}
_INT_OR_NONE = {"receive_buffer_bytes", "send_buffer_bytes"}  # None by default, numbers when set


@dataclass
class KafkaWriteCommitMessage(WriterCommitMessage):
    """What one task sent: ``records`` acknowledged by the brokers."""

    records: int


class KafkaWriteError(RuntimeError):
    """Some records of a task were not acknowledged; the message says how many and the first error."""


def _producer_defaults() -> dict[str, Any]:
    from kafka import KafkaProducer

    defaults: dict[str, Any] = KafkaProducer.DEFAULT_CONFIG  # kafka-python is untyped
    return defaults


def _kind(key: str, default: Any) -> str:
    """A producer setting's type written as the consumer's config types are, for ``convert_option``."""
    if isinstance(default, bool):
        return "bool"
    if key in _INT_OR_NONE:
        return "int | None"
    if isinstance(default, int):
        return "int"
    return "float" if isinstance(default, float) else "str"


def _convert(option: str, key: str, text: Any, default: Any) -> Any:
    """An option's text as the KafkaProducer setting's type: the read's conversion (``convert_option``) but
    for the three settings whose values are lists or tuples."""
    if not isinstance(text, str):  # already typed (options given from Python code)
        return text
    try:
        if key == "bootstrap_servers":
            return [s.strip() for s in text.split(",") if s.strip()]
        if key == "acks":
            return "all" if text.strip().lower() == "all" else int(text)
        if key == "api_version":
            return tuple(int(part) for part in text.split("."))
    except ValueError:
        raise KafkaOptionError(
            option, f"{text!r} is not a valid value (kafka-python's {key} is like {default!r})"
        ) from None
    return convert_option(option, key, text, _kind(key, default))


def producer_config(options: Mapping[str, Any]) -> dict[str, Any]:
    """The KafkaProducer keyword arguments of the ``kafka.*`` options; raises KafkaOptionError naming
    a missing ``kafka.bootstrap.servers``, an unknown setting (with the closest one) or a bad value."""
    defaults = _producer_defaults()
    config: dict[str, Any] = {}
    for option, text in options.items():
        option = option.lower()
        if not option.startswith(_PREFIX):
            continue
        key = option[len(_PREFIX) :].replace(".", "_").replace("-", "_")
        if key in _NOT_OPTIONS:
            raise KafkaOptionError(option, f"not supported: {_NOT_OPTIONS[key]}")
        if key not in defaults:
            close = difflib.get_close_matches(key, [k for k in defaults if k not in _NOT_OPTIONS], n=1)
            hint = f"; did you mean {_PREFIX}{close[0].replace('_', '.')}?" if close else ""
            raise KafkaOptionError(option, f"not a setting of kafka-python's KafkaProducer{hint}")
        config[key] = _convert(option, key, text, defaults[key])
    if not config.get("bootstrap_servers"):
        raise KafkaOptionError(
            "kafka.bootstrap.servers", "required: the Kafka brokers to write to (host:port[,host:port...])"
        )
    return config


_HEADER_TYPE = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))


@dataclass(frozen=True)
class WritePlan:
    """Checked on the driver, pickled to the tasks: which column plays which part, and the producer's
    settings. ``columns`` maps a part (value, key, headers, topic, partition) to its column's name."""

    producer: dict[str, Any]
    topic: str | None
    columns: dict[str, str]

    @classmethod
    def of(cls, options: Mapping[str, Any], schema: StructType) -> WritePlan:
        producer = producer_config(options)
        topic = options.get("topic") or None
        fields = {f.name.lower(): f for f in schema.fields}  # Spark resolves names case-insensitively
        allowed = {
            "value": (BinaryType, StringType),
            "key": (BinaryType, StringType),
            "topic": (StringType,),
            "partition": (IntegerType,),
        }
        columns: dict[str, str] = {}
        for part, types in allowed.items():
            field = fields.get(part)
            if field is None or (part == "topic" and topic is not None):
                continue
            if not isinstance(field.dataType, types):
                wanted = " or ".join(t.typeName() for t in types)
                raise ValueError(f"column {field.name} must be {wanted}, not {field.dataType.simpleString()}")
            columns[part] = field.name
        if "value" not in columns:
            raise ValueError(
                "the value column is required (binary or string); columns: " + ", ".join(f.name for f in schema.fields)
            )
        if "headers" in fields:
            field = fields["headers"]
            if field.dataType.simpleString() != _HEADER_TYPE.simpleString():
                raise ValueError(
                    f"column {field.name} must be {_HEADER_TYPE.simpleString()}, not {field.dataType.simpleString()}"
                )
            columns["headers"] = field.name
        if topic is None and "topic" not in columns:
            raise KafkaOptionError("topic", "no topic: set the topic option or give a topic column (string)")
        return cls(producer, topic, columns)


class _Acks:
    """Counts the producer's answers (they arrive on its sender thread) and keeps the first error."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked = self.failed = 0
        self.first_error: BaseException | None = None

    def ok(self, _metadata: object) -> None:
        with self.lock:
            self.acked += 1

    def error(self, exc: BaseException) -> None:
        with self.lock:
            self.failed += 1
            if self.first_error is None:
                self.first_error = exc


def _utf8(value: Any) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else value


def _headers(entries: Sequence[Mapping[str, Any] | None] | None, column: str) -> list[tuple[str, bytes]]:
    if not entries:
        return []
    out = []
    for h in entries:
        if h is None or h["key"] is None or h["value"] is None:
            # kafka-python sends neither a null header key nor a null header value
            raise ValueError(f"column {column}: a header, its key or its value is null: {h!r}")
        out.append((h["key"], h["value"]))
    return out


def send_batches(plan: WritePlan, batches: Iterable[RecordBatch]) -> KafkaWriteCommitMessage:
    """Send every row of ``batches`` (pyarrow RecordBatches) with one KafkaProducer, flush, and raise
    KafkaWriteError unless every record was acknowledged."""
    from kafka import KafkaProducer

    producer = None
    acks, sent = _Acks(), 0
    cols = plan.columns
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if producer is None:  # a task without rows opens no connection
                producer = KafkaProducer(**plan.producer)
            data = {part: batch.column(name).to_pylist() for part, name in cols.items()}
            n = batch.num_rows
            values, keys = data["value"], data.get("key", [None] * n)
            topics = data.get("topic") or [plan.topic] * n
            partitions = data.get("partition", [None] * n)
            headers = data.get("headers", [None] * n)
            for i in range(n):
                if topics[i] is None:
                    raise ValueError(f"column {cols['topic']} is null in a row; set the topic option to send such rows")
                future = producer.send(
                    topics[i],
                    value=_utf8(values[i]),
                    key=_utf8(keys[i]),
                    headers=_headers(headers[i], cols.get("headers", "headers")),
                    partition=partitions[i],
                )
                future.add_callback(acks.ok)
                future.add_errback(acks.error)
                sent += 1
            if acks.first_error is not None:  # fail fast: no point sending the rest
                break
        if producer is not None:
            producer.flush(timeout=plan.producer.get("delivery_timeout_ms", 120000) / 1000 + 30)
    except BaseException:
        if producer is not None:
            producer.close(timeout=0)  # the task fails anyway: do not wait for what is queued
            producer = None
        raise
    finally:
        if producer is not None:
            producer.close()
    if acks.acked != sent:
        raise KafkaWriteError(
            f"{sent - acks.acked} of {sent} records were not acknowledged "
            f"({acks.failed} failed); first error: {acks.first_error!r}"
        )
    return KafkaWriteCommitMessage(records=sent)


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("fsm_kafka")``: see the module docstring for the columns and options. Kafka
    topics are append-only, so ``overwrite=True`` (mode "overwrite") is refused."""

    def __init__(self, options: Mapping[str, Any], schema: StructType, overwrite: bool = False) -> None:
        if overwrite:
            raise ValueError("fsm_kafka cannot overwrite: Kafka topics are append-only (use mode append)")
        self.plan = WritePlan.of(options, schema)

    def write(self, iterator: Iterator[RecordBatch]) -> KafkaWriteCommitMessage:
        return send_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # every record was acknowledged when its task returned

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # what succeeded tasks sent stays in Kafka: nothing can take it back


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("fsm_kafka")``: as KafkaBatchWriter, per micro-batch. At least once: a
    micro-batch replayed after a failure (from the checkpoint) is sent again."""

    def __init__(self, options: Mapping[str, Any], schema: StructType, overwrite: bool = False) -> None:
        # complete mode (overwrite) sends the whole result every micro-batch, as Spark's Kafka sink does
        self.plan = WritePlan.of(options, schema)

    def write(self, iterator: Iterator[RecordBatch]) -> KafkaWriteCommitMessage:
        return send_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
