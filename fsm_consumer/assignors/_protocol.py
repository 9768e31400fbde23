"""Bytes of the "consumer" group protocol: JoinGroup metadata and SyncGroup assignments.

The layouts are kafka-python's ``ConsumerProtocolSubscription`` /
``ConsumerProtocolAssignment``, generated from Kafka's own JSON schemas; this
module only converts between them and our :class:`Subscription` /
:class:`Assignment`.

Versions: subscriptions are written at v3 (owned partitions, generation,
rack), as Java 3.5+ and librdkafka 2.x do. Reading accepts v0-v3 and, like
Java, a newer version is read with the v3 layout and its extra trailing
fields are ignored: Kafka only appends fields to this schema.
"""

from __future__ import annotations

import io
from collections.abc import Iterable

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from fsm_consumer.errors import FsmConsumerError

from ..structs import TopicPartition
from ._base import Assignment, Subscription

#: Versions we write by default: the newest the schemas describe (Java writes these too).
SUBSCRIPTION_VERSION: int = ConsumerProtocolSubscription.max_version
ASSIGNMENT_VERSION: int = ConsumerProtocolAssignment.max_version


class ConsumerProtocolError(FsmConsumerError, ValueError):
    """Subscription or assignment bytes that cannot be decoded."""


def _grouped(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    # Sorted so the same state always encodes to the same bytes.
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return list(by_topic.items())


def _flatten(topic_partitions: Iterable[object] | None) -> tuple[TopicPartition, ...]:
    return tuple(
        TopicPartition(tp.topic, p)  # type: ignore[attr-defined]
        for tp in topic_partitions or ()
        for p in tp.partitions  # type: ignore[attr-defined]
    )


def _user_data(value: object) -> bytes | None:
    # The schema marks UserData zero-copy, so it may come back as a memoryview.
    return None if value is None else bytes(value)  # type: ignore[call-overload]


def _check_version(version: int, cls: type) -> int:
    highest: int = cls.max_version  # type: ignore[attr-defined]
    if not 0 <= version <= highest:
        raise ValueError(f"{cls.__name__} version must be 0..{highest}, not {version}")
    return version


def _decode(cls: type, data: bytes | bytearray | memoryview) -> object:
    try:
        return cls.decode(io.BytesIO(bytes(data)))  # type: ignore[attr-defined]
    except Exception as exc:  # kafka-python raises struct.error, ValueError, UnicodeError...
        raise ConsumerProtocolError(f"cannot decode {cls.__name__} from {len(data)} bytes: {exc}") from exc


def encode_subscription(sub: Subscription, version: int | None = None) -> bytes:
    """Encode ``sub`` as JoinGroup protocol metadata (default: v3).

    Fields a lower ``version`` cannot carry are left out, as in Java: v0 has
    topics and user data, v1 adds owned partitions, v2 the generation, v3 the rack.
    """
    version = _check_version(SUBSCRIPTION_VERSION if version is None else version, ConsumerProtocolSubscription)
    tp_type = ConsumerProtocolSubscription.TopicPartition
    data = ConsumerProtocolSubscription(
        version=version,
        topics=list(sub.topics),
        user_data=sub.user_data,
        owned_partitions=[tp_type(topic=t, partitions=ps) for t, ps in _grouped(sub.owned_partitions)],
        generation_id=sub.generation,
        rack_id=sub.rack,
    )
    return data.encode()


def decode_subscription(data: bytes | bytearray | memoryview, group_instance_id: str | None = None) -> Subscription:
    """Decode JoinGroup protocol metadata of any version.

    ``group_instance_id`` is not part of these bytes (JoinGroup carries it
    beside them); pass it through to get a complete :class:`Subscription`.
    """
    decoded = _decode(ConsumerProtocolSubscription, data)
    return Subscription(
        topics=tuple(decoded.topics or ()),  # type: ignore[attr-defined]
        owned_partitions=_flatten(decoded.owned_partitions),  # type: ignore[attr-defined]
        generation=decoded.generation_id,  # type: ignore[attr-defined]
        user_data=_user_data(decoded.user_data),  # type: ignore[attr-defined]
        rack=decoded.rack_id,  # type: ignore[attr-defined]
        group_instance_id=group_instance_id,
    )


def encode_assignment(assignment: Assignment, version: int | None = None) -> bytes:
    """Encode ``assignment`` for SyncGroup (default v3, as Java; every version has the v0 layout)."""
    version = _check_version(ASSIGNMENT_VERSION if version is None else version, ConsumerProtocolAssignment)
    tp_type = ConsumerProtocolAssignment.TopicPartition
    data = ConsumerProtocolAssignment(
        version=version,
        assigned_partitions=[tp_type(topic=t, partitions=ps) for t, ps in _grouped(assignment.partitions)],
        user_data=assignment.user_data,
    )
    return data.encode()


def decode_assignment(data: bytes | bytearray | memoryview | None) -> Assignment:
    """Decode a SyncGroup assignment. Empty bytes mean "nothing assigned".

    Coordinators send empty bytes to members the leader left out, and to every
    member when the leader failed to assign; Java and librdkafka read that as
    an empty assignment too.
    """
    if not data:
        return Assignment(partitions=())
    decoded = _decode(ConsumerProtocolAssignment, data)
    return Assignment(
        partitions=_flatten(decoded.assigned_partitions),  # type: ignore[attr-defined]
        user_data=_user_data(decoded.user_data),  # type: ignore[attr-defined]
    )
