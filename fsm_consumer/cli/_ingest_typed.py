"""``fsm-consumer ingest --value-format avro|protobuf|json-schema --schema-registry URL``: typed tables from
topics of Confluent-framed records. The flags become ``fsm_kafka``'s options (``_formats``); on the embedded
broker the job starts the schema registry too (Apicurio, fetched once by ``fsm-consumer broker fetch --kind
registry``) and fills the topic with records of two versions of one schema, the second adding fields, written
by confluent-kafka's serializers. A running job restarts its query when a new
version's record arrives (its batch fails before anything of it is written; the query starts again from the
checkpoint with the new reader schema), so the table takes the new columns from then on, none dropped; a rerun
does the same (Delta merges the schema, parquet files of both versions are read together with mergeSchema)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

FORMATS = ("binary", "avro", "protobuf", "json-schema")
_MAX_RESTARTS = 20  # restarts for new schema versions in a row, at most


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--value-format",
        choices=FORMATS,
        default="binary",
        help="the records' values: binary (default: Spark's Kafka column) or Confluent-framed avro, protobuf, "
        "json-schema, landed as typed columns (needs --schema-registry, or the embedded broker's demo)",
    )
    ap.add_argument("--key-format", choices=FORMATS, default="binary", help="the records' keys, as --value-format")
    ap.add_argument("--schema-registry", metavar="URL", help="the schema registry (Confluent's API) of the topic")
    ap.add_argument(
        "--mode",
        choices=("FAILFAST", "PERMISSIVE"),
        default="FAILFAST",
        help="a record that does not decode: FAILFAST (default) stops the job naming it; PERMISSIVE lands it "
        "with a null value and the error in valueError",
    )


def typed(args: argparse.Namespace) -> bool:
    return args.value_format != "binary" or args.key_format != "binary"


def source_options(args: argparse.Namespace, registry_url: str | None) -> dict[str, str]:
    """The fsm_kafka options of the flags (none for binary keys and values)."""
    if not typed(args):
        return {}
    # newerSchemas=stop: a record of a version registered after the query started fails its batch (nothing of
    # it committed), and the job restarts the query with that version instead of dropping its new fields
    options = {
        "valueFormat": args.value_format,
        "keyFormat": args.key_format,
        "mode": args.mode,
        "newerSchemas": "stop",
    }
    if registry_url:
        options["schema.registry.url"] = registry_url
    return options


def start_registry(stack: Any, say: Callable[[str], None]) -> str:
    """The embedded demo's registry, started for this run; its URL."""
    from ..broker import RegistryNotFoundError, SchemaRegistry

    try:
        registry = SchemaRegistry()
    except RegistryNotFoundError as exc:
        raise RegistryNotFoundError(f"a typed demo needs a schema registry: {exc}") from None
    started = time.monotonic()
    stack.enter_context(registry)
    say(f"schema registry: Apicurio {registry.version} at {registry.url}, up in {time.monotonic() - started:.1f} s")
    return registry.url


def demo_values(fmt: str, registry_url: str, topic: str, records: int) -> Callable[[int], bytes]:
    """Record i's value in ``fmt``, written by confluent-kafka's serializer: version 1 of the demo's schema for
    the first half, version 2 (two more fields) for the rest, both registered under TOPIC-value."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    from ..testing import _schema_peer as peer

    client = SchemaRegistryClient({"url": registry_url, "timeout": 30})  # its default waits for ever
    serializers = peer.serializers(fmt, client)
    make = {"avro": peer.record, "json-schema": peer.json_record, "protobuf": peer.proto_record}[fmt]
    ctx = SerializationContext(topic, MessageField.VALUE)
    half = records // 2

    def value(i: int) -> bytes:
        version = 1 if i < half else 2
        return serializers[version](make(i, version), ctx)

    return value


def restart_for_newer(failure: str, restarts: int, say: Callable[[str], None]) -> bool:
    """Whether a query that failed with ``failure`` is started again: a record of a schema version registered
    after it started (``NewerSchemaError``); at most a few times in a row."""
    if "NewerSchemaError" not in failure or restarts >= _MAX_RESTARTS:
        return False
    say("schema: a record of a newer version came; the query restarts with it (nothing of that batch was written)")
    return True
