"""Typed failures of record decoding.

Decoding never raises these out of ``decode_partition``: it returns the
records decoded before the failure with the error attached, so the consumer
can hand out what was good and raise the error when the bad offset is next.
Each one the consumer raises is the kafka-python class its consumer raises
for the same failure (a subclass of it), with this library's message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kafka.errors as _ke
from kafka.consumer.fetcher import RecordTooLargeError as _KafkaPythonRecordTooLargeError

from ..errors import FsmConsumerError


class RecordError(FsmConsumerError):
    """Base of every record decoding failure at ``offset`` of ``topic``/``partition``."""

    def __init__(self, topic: str, partition: int, offset: int, message: str) -> None:
        super().__init__(topic, partition, offset, message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.message = message

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} at offset {self.offset}: {self.message}"

    def __reduce__(
        self,
    ) -> tuple[
        Callable[[type[RecordError], tuple[object, ...], dict[str, Any]], RecordError],
        tuple[type[RecordError], tuple[object, ...], dict[str, Any]],
    ]:
        # Subclasses add attributes beyond args, which the default
        # Exception pickling (cls(*args)) would drop.
        return _restore, (type(self), self.args, self.__dict__)


def _restore(cls: type[RecordError], args: tuple[object, ...], state: dict[str, Any]) -> RecordError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


# kafka-python ships no type information: its error classes are Any, a base strict mode refuses
class CorruptRecordError(RecordError, _ke.CorruptRecordError):  # type: ignore[misc]
    """A batch failed its CRC or could not be parsed; ``offset`` is the batch's base offset
    (``kafka.errors.CorruptRecordError``, errno 2)."""


# kafka-python ships no type information (as above)
class RecordTooLargeError(RecordError, _KafkaPythonRecordTooLargeError):  # type: ignore[misc]
    """The batch at ``offset`` is larger than the consumer reads: the fetch returned bytes but not one
    complete batch (larger than the partition fetch size), or its payload decompresses past
    ``receive_buffer_max`` (Java's RecordTooLargeException; ``kafka.consumer.fetcher.RecordTooLargeError``)."""


class DeserializationError(RecordError):
    """What ``decode_partition`` reports when the key or value deserializer failed on the
    record at ``offset``: ``origin`` is ``"key"`` or ``"value"``, the deserializer's exception
    is the ``__cause__``.

    The consumer never raises it: it raises the deserializer's own exception, as kafka-python
    does (``except ValueError`` around iteration keeps working), with a note (PEP 678) saying
    where it happened; the partition stays at the record, so it is raised again until a seek
    past it.
    """

    def __init__(self, topic: str, partition: int, offset: int, message: str, *, origin: str) -> None:
        super().__init__(topic, partition, offset, message)
        self.origin = origin
