"""Public record types: what a poll hands out and what a commit takes.

``TopicPartition`` and ``OffsetAndMetadata`` are kafka-python's (``kafka.structs``).
``ConsumerRecord``'s field names and order follow kafka-python's namedtuple so code written
against ``kafka.consumer.fetcher.ConsumerRecord`` keeps working. It is a ``NamedTuple`` subclass: building one with
``tuple.__new__(ConsumerRecord, fields)`` costs no Python-level ``__init__``,
which matters on the per-record path.
"""

from __future__ import annotations

from typing import Any, NamedTuple

# kafka-python's own types, so isinstance() checks in code written for it hold
from kafka.structs import OffsetAndMetadata, TopicPartition

__all__ = ["ConsumerRecord", "OffsetAndMetadata", "TopicPartition"]


class ConsumerRecord(NamedTuple):
    """One record of a partition, with key and value after deserialization.

    ``headers`` is a tuple of ``(str, bytes | None)`` pairs, ``()`` when
    there are none. kafka-python gives a list; a tuple is what keeps records
    out of the cyclic garbage collector (a tuple of immutable values is
    untracked, one holding a list never is), which makes decoding ~25%
    faster and keeps held records from slowing every later collection.
    ``timestamp``/``timestamp_type`` are -1 for magic v0 data, which has no
    timestamp. ``checksum`` is the legacy (v0/v1) record CRC, None for v2.
    The ``serialized_*_size`` fields are -1 when the key or value is null or
    there are no headers.
    """

    topic: str
    partition: int
    leader_epoch: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int
