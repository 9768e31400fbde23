"""Kafka messages kafka-python 3.0 does not define, defined with its own message machinery.

Each class is kafka-python's ``ApiMessage`` built from a JSON file beside this module that states the
message's field layout as in Kafka's message definitions (``clients/src/main/resources/common/message``):
kafka-python encodes and decodes them, nothing here touches bytes.

The consumer group protocol (KIP-848): ConsumerGroupHeartbeat. Share groups (KIP-932), in the layout of
Apache Kafka 4.2 (checked field by field against kafka-clients 4.2.2): ShareGroupHeartbeat and
ShareGroupDescribe to the group coordinator; ShareFetch and ShareAcknowledge to the partition leaders, in
a share session that belongs to the connection that opened it; Describe-, Alter- and
DeleteShareGroupOffsets for the group's start offsets. Kafka's ``validVersions`` are kept as they are
(ShareFetch 1-2, not 0-2): kafka-python treats every message as starting at version 0 whatever the file
says, so the broker's ApiVersions answer is what keeps a withdrawn version 0 from being sent.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

__all__ = [
    "AlterShareGroupOffsetsRequest",
    "AlterShareGroupOffsetsResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "DeleteShareGroupOffsetsRequest",
    "DeleteShareGroupOffsetsResponse",
    "DescribeShareGroupOffsetsRequest",
    "DescribeShareGroupOffsetsResponse",
    "ShareAcknowledgeRequest",
    "ShareAcknowledgeResponse",
    "ShareFetchRequest",
    "ShareFetchResponse",
    "ShareGroupDescribeRequest",
    "ShareGroupDescribeResponse",
    "ShareGroupHeartbeatRequest",
    "ShareGroupHeartbeatResponse",
]


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """KIP-848: join, heartbeat, acknowledge an assignment and leave, in one request (API key 68)."""


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """The member id and epoch, the heartbeat interval and, when it changed, the target assignment."""


class ShareGroupHeartbeatRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """KIP-932: join, stay in and leave a share group; the coordinator assigns, no member revokes (API key 76)."""


class ShareGroupHeartbeatResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """The member's epoch, the heartbeat interval and, when it changed, the partitions to fetch from."""


class ShareGroupDescribeRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Describe share groups: what an admin or a test asks to see members and assignments (API key 77)."""


class ShareGroupDescribeResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Each group's state, epochs, assignor and members with their assignments, or its error."""


class ShareFetchRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Acquire records in a share session and acknowledge earlier ones in the same trip (API key 78)."""


class ShareFetchResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Records with the offset ranges this member acquired (and their delivery counts), and the acks' outcome."""


class ShareAcknowledgeRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Acknowledge acquired records without fetching more, e.g. on commit or before closing (API key 79)."""


class ShareAcknowledgeResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Each partition's acknowledgement outcome, which tells the member whether its acks were applied."""


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Ask where a share group starts delivering in each partition (and, from v1, its lag) (API key 90)."""


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Share-partition start offsets (and lag) per group, topic and partition, or their errors."""


class AlterShareGroupOffsetsRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Move an empty share group's start offsets, to replay or skip records (API key 91)."""


class AlterShareGroupOffsetsResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Whether each partition's start offset was altered."""


class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Forget an empty share group's state for whole topics, so it starts afresh there (API key 92)."""


class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """Whether each topic's share-group state was deleted."""
