"""What goes wrong between a record's bytes and its typed value. Each error says what failed and what to do;
the consumer adds the record's partition and offset (a note on the exception, as for any deserializer)."""

from __future__ import annotations

from ..errors import FsmConsumerError


class SchemaError(FsmConsumerError):
    """Base of the schema errors. ``schema_id`` is the registry id the record named, when it named one."""

    def __init__(self, message: str, *, schema_id: int | None = None) -> None:
        super().__init__(message)
        self.schema_id = schema_id


class FramingError(SchemaError, ValueError):
    """The bytes are not in Confluent's framing (a zero byte, a 4-byte schema id, the payload): the topic holds
    records written without a registry serializer, or another format than the one configured."""


class SchemaNotFoundError(SchemaError):
    """The registry has no schema under the id the record names: the record was written against another
    registry (or one whose schemas were deleted)."""


class NewerSchemaError(SchemaError):
    """A record written with a schema registered after the reader schema a read was started with, where the
    read asked to stop there (``newer="stop"``: ``fsm-consumer ingest`` restarts its query with the new version,
    so the new fields are landed, not dropped by resolving to the older reader). Ends a typed column even when
    the deserializer keeps bad records as nulls: it is not a bad record."""

    ends_column = True


class RegistryUnavailableError(SchemaError):
    """The registry did not answer (refused, timed out, 5xx) within ``timeout_s``, retries included. Retriable:
    the record's position stays, the next poll() tries again."""


class RegistryAuthError(SchemaError):
    """The registry refused the credentials (401) or the access (403): fix ``basic_auth`` or ``bearer_token``."""


class SchemaDecodeError(SchemaError, ValueError):
    """The payload does not decode with its writer schema, or the writer schema cannot be resolved to the
    reader schema (an incompatible version)."""
