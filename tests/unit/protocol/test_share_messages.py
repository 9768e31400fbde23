"""The share-group messages (KIP-932) of fsm_consumer.protocol against Apache Kafka 4.2.2's own definitions.

Three checks, none needs Java or a broker when the tests run:

- layout: every field of every version (name, wire type, nullability, tags, order, Kafka's doc text) as
  kafka-python reads our JSON files, against ``kafka-4.2.2-share-schemas.txt``: the listing that
  ``java/SchemaDump.java`` prints of each ``org.apache.kafka.common.message.*Data.SCHEMAS`` in
  kafka-clients-4.2.2.jar. Kafka's ``Schema`` cannot say that a struct field is nullable, so the one
  nullable struct (ShareGroupHeartbeatResponse.Assignment) is proven by the golden bytes instead.
- golden bytes: each message below, built here and encoded by kafka-python, against the bytes Kafka's own
  serializer writes for the same values (``GOLDEN``, made by ``java/KafkaEncode.java``).
- round trips: encode, decode, compare, for every message and version, with and without the request and
  response headers.

To remake both files after a change (a Kafka upgrade: use its jars), from the repository root::

    LIBS=~/.cache/fsm-consumer/kafka-4.2.2/libs
    CP=$(ls $LIBS/kafka-clients-*.jar $LIBS/jackson-databind-*.jar $LIBS/jackson-core-*.jar \\
         $LIBS/jackson-annotations-*.jar | tr '\\n' :)
    javac -d /tmp/kjava -cp "$CP" tests/unit/protocol/java/*.java
    java -cp "$CP:/tmp/kjava" SchemaDump --docs > tests/unit/protocol/kafka-4.2.2-share-schemas.txt
    python tests/unit/protocol/test_share_messages.py | java -cp "$CP:/tmp/kjava" KafkaEncode

The last line reads this module's messages as Kafka's JSON form (``kafka_json``: what Kafka's generated
``*DataJsonConverter.read`` takes), serializes each with ``MessageUtil.toByteBufferAccessor`` and prints
``label hex``: paste those into ``GOLDEN``.
"""

from __future__ import annotations

import base64
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS, BrokerVersionData
from kafka.protocol.schemas.fields.array import ArrayField
from kafka.protocol.schemas.fields.simple import SimpleField
from kafka.protocol.schemas.fields.struct import StructField
from kafka.protocol.schemas.fields.struct_array import StructArrayField

from fsm_consumer.broker._wire import pick_version
from fsm_consumer.protocol import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)

HERE = Path(__file__).parent

# (request, response, API key, the versions Apache Kafka 4.2.2 offers)
MESSAGES = [
    (ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse, 76, (1, 1)),
    (ShareGroupDescribeRequest, ShareGroupDescribeResponse, 77, (1, 1)),
    (ShareFetchRequest, ShareFetchResponse, 78, (1, 2)),
    (ShareAcknowledgeRequest, ShareAcknowledgeResponse, 79, (1, 2)),
    (DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, 90, (0, 1)),
    (AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, 91, (0, 0)),
    (DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse, 92, (0, 0)),
]

ORDERS = uuid.UUID("5a3c1e2f-8b4d-4c6e-9f10-a1b2c3d4e5f6")
PAYMENTS = uuid.UUID("0f1e2d3c-4b5a-4968-8776-655443322110")
MEMBER = "kJ0Yq3vVQ8G7x2b1nM4pZw"  # a share member's id is made by the client: a UUID, base64
GROUP = "orders-share"
ACCEPT, RELEASE, REJECT, RENEW, GAP = 1, 2, 3, 4, 0  # acknowledge types; RENEW from version 2
NOT_FOUND = "Group audit-share not found."
# a record batch's first bytes; the codec never looks inside ``records``
RECORDS = bytes.fromhex("0000000000000064000000490000000002a1b2c3d40000000000000000018f")


# --- the messages: one builder per case, taking the version -------------------------------------------------


def heartbeat_join(v: int) -> Any:
    return ShareGroupHeartbeatRequest(
        version=v,
        group_id=GROUP,
        member_id=MEMBER,
        member_epoch=0,
        rack_id="rack-a",
        subscribed_topic_names=["orders", "payments"],
    )


def heartbeat_steady(v: int) -> Any:  # nothing changed since the last heartbeat: the nullable fields are null
    return ShareGroupHeartbeatRequest(
        version=v, group_id=GROUP, member_id=MEMBER, member_epoch=7, rack_id=None, subscribed_topic_names=None
    )


def heartbeat_assigned(v: int) -> Any:
    a = ShareGroupHeartbeatResponse.Assignment
    return ShareGroupHeartbeatResponse(
        version=v,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        member_id=MEMBER,
        member_epoch=3,
        heartbeat_interval_ms=5000,
        assignment=a(
            topic_partitions=[
                a.TopicPartitions(topic_id=ORDERS, partitions=[0, 1, 2]),
                a.TopicPartitions(topic_id=PAYMENTS, partitions=[3]),
            ]
        ),
    )


def heartbeat_fenced(v: int) -> Any:  # an error, no member id, no assignment (a null struct: one byte, -1)
    return ShareGroupHeartbeatResponse(
        version=v,
        throttle_time_ms=12,
        error_code=25,  # UNKNOWN_MEMBER_ID
        error_message="The member is not in the group.",
        member_id=None,
        member_epoch=-1,
        heartbeat_interval_ms=0,
        assignment=None,
    )


def describe_groups(v: int) -> Any:
    return ShareGroupDescribeRequest(version=v, group_ids=[GROUP, "audit-share"], include_authorized_operations=True)


def groups_described(v: int) -> Any:
    g = ShareGroupDescribeResponse.DescribedGroup
    assignment = g.Member.Assignment(
        topic_partitions=[
            g.Member.Assignment.TopicPartitions(topic_id=ORDERS, topic_name="orders", partitions=[0, 1]),
            g.Member.Assignment.TopicPartitions(topic_id=PAYMENTS, topic_name="payments", partitions=[]),
        ]
    )
    member = g.Member(
        member_id=MEMBER,
        rack_id=None,
        member_epoch=4,
        client_id="fsm-consumer",
        client_host="/127.0.0.1",
        subscribed_topic_names=["orders", "payments"],
        assignment=assignment,
    )
    empty = g.Member.Assignment(topic_partitions=[])
    return ShareGroupDescribeResponse(
        version=v,
        throttle_time_ms=0,
        groups=[
            g(
                error_code=0,
                error_message=None,
                group_id=GROUP,
                group_state="Stable",
                group_epoch=4,
                assignment_epoch=4,
                assignor_name="simple",
                members=[
                    member,
                    g.Member(
                        member_id="Zm9vYmFyYmF6cXV4cXV1eA",
                        rack_id="rack-b",
                        member_epoch=3,
                        client_id="worker-2",
                        client_host="/10.0.0.7",
                        subscribed_topic_names=["orders"],
                        assignment=empty,
                    ),
                ],
                authorized_operations=0x0AF8,
            ),
            g(
                error_code=69,  # GROUP_ID_NOT_FOUND
                error_message=NOT_FOUND,
                group_id="audit-share",
                group_state="Dead",
                group_epoch=0,
                assignment_epoch=0,
                assignor_name="",
                members=[],
                authorized_operations=-2147483648,
            ),
        ],
    )


def _fetch_topics(v: int) -> list[Any]:
    t = ShareFetchRequest.FetchTopic
    batch = t.FetchPartition.AcknowledgementBatch
    return [
        t(
            topic_id=ORDERS,
            partitions=[
                t.FetchPartition(
                    partition_index=0,
                    acknowledgement_batches=[
                        batch(first_offset=100, last_offset=104, acknowledge_types=[ACCEPT]),
                        # one type per offset: 105 accepted, 106 a gap (not a record), 107 rejected
                        batch(first_offset=105, last_offset=107, acknowledge_types=[ACCEPT, GAP, REJECT]),
                    ],
                ),
                t.FetchPartition(partition_index=1, acknowledgement_batches=[]),
            ],
        ),
        t(
            topic_id=PAYMENTS,
            partitions=[
                t.FetchPartition(
                    partition_index=3,
                    acknowledgement_batches=[
                        batch(first_offset=7, last_offset=7, acknowledge_types=[RENEW if v >= 2 else RELEASE])
                    ],
                )
            ],
        ),
    ]


def share_fetch(v: int) -> Any:
    extra = {"share_acquire_mode": 1, "is_renew_ack": True} if v >= 2 else {}  # record-limit; RENEW in a batch
    return ShareFetchRequest(
        version=v,
        group_id=GROUP,
        member_id=MEMBER,
        share_session_epoch=1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        max_records=500,
        batch_size=500,
        topics=_fetch_topics(v),
        forgotten_topics_data=[ShareFetchRequest.ForgottenTopic(topic_id=PAYMENTS, partitions=[4, 5])],
        **extra,
    )


def share_fetch_close(v: int) -> Any:  # epoch -1 closes the session; the nullable group id left null
    return ShareFetchRequest(
        version=v,
        group_id=None,
        member_id=MEMBER,
        share_session_epoch=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=0x7FFFFFFF,
        max_records=0,
        batch_size=0,
        topics=[],
        forgotten_topics_data=[],
    )


def share_fetched(v: int) -> Any:
    t = ShareFetchResponse.ShareFetchableTopicResponse
    p = t.PartitionData
    return ShareFetchResponse(
        version=v,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        acquisition_lock_timeout_ms=30000,
        responses=[
            t(
                topic_id=ORDERS,
                partitions=[
                    p(
                        partition_index=0,
                        error_code=0,
                        error_message=None,
                        acknowledge_error_code=0,
                        acknowledge_error_message=None,
                        current_leader=p.LeaderIdAndEpoch(leader_id=1, leader_epoch=5),
                        records=RECORDS,
                        acquired_records=[
                            p.AcquiredRecords(first_offset=100, last_offset=109, delivery_count=1),
                            p.AcquiredRecords(first_offset=110, last_offset=110, delivery_count=3),
                        ],
                    ),
                    p(
                        partition_index=1,
                        error_code=6,  # NOT_LEADER_OR_FOLLOWER
                        error_message="This server is not the leader for that topic-partition.",
                        acknowledge_error_code=124,  # FENCED_STATE_EPOCH (INVALID_RECORD_STATE is 121)
                        acknowledge_error_message="The record state is invalid.",
                        current_leader=p.LeaderIdAndEpoch(leader_id=2, leader_epoch=6),
                        records=b"",  # what Kafka sends with an error (it cannot even write null: see below)
                        acquired_records=[],
                    ),
                ],
            )
        ],
        node_endpoints=[
            ShareFetchResponse.NodeEndpoint(node_id=2, host="broker-2.local", port=9092, rack="rack-b"),
            ShareFetchResponse.NodeEndpoint(node_id=3, host="broker-3.local", port=9093, rack=None),
        ],
    )


def share_acknowledge(v: int) -> Any:
    t = ShareAcknowledgeRequest.AcknowledgeTopic
    batch = t.AcknowledgePartition.AcknowledgementBatch
    extra = {"is_renew_ack": True} if v >= 2 else {}
    return ShareAcknowledgeRequest(
        version=v,
        group_id=GROUP,
        member_id=MEMBER,
        share_session_epoch=2,
        topics=[
            t(
                topic_id=ORDERS,
                partitions=[
                    t.AcknowledgePartition(
                        partition_index=0,
                        acknowledgement_batches=[
                            batch(first_offset=100, last_offset=104, acknowledge_types=[ACCEPT]),
                            batch(
                                first_offset=105,
                                last_offset=106,
                                acknowledge_types=[RELEASE, RENEW if v >= 2 else REJECT],
                            ),
                        ],
                    )
                ],
            )
        ],
        **extra,
    )


def share_acknowledged(v: int) -> Any:
    t = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse
    p = t.PartitionData
    extra = {"acquisition_lock_timeout_ms": 30000} if v >= 2 else {}
    return ShareAcknowledgeResponse(
        version=v,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        responses=[
            t(
                topic_id=ORDERS,
                partitions=[
                    p(
                        partition_index=0,
                        error_code=0,
                        error_message=None,
                        current_leader=p.LeaderIdAndEpoch(leader_id=1, leader_epoch=5),
                    ),
                    p(
                        partition_index=1,
                        error_code=124,  # FENCED_STATE_EPOCH (INVALID_RECORD_STATE is 121)
                        error_message="The record state is invalid.",
                        current_leader=p.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
                    ),
                ],
            )
        ],
        node_endpoints=[ShareAcknowledgeResponse.NodeEndpoint(node_id=1, host="localhost", port=9092, rack=None)],
        **extra,
    )


def describe_offsets(v: int) -> Any:
    g = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
    return DescribeShareGroupOffsetsRequest(
        version=v,
        groups=[
            g(
                group_id=GROUP,
                topics=[g.DescribeShareGroupOffsetsRequestTopic(topic_name="orders", partitions=[0, 1, 2])],
            ),
            g(group_id="audit-share", topics=None),  # null: every topic-partition of the group
        ],
    )


def offsets_described(v: int) -> Any:
    g = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
    t = g.DescribeShareGroupOffsetsResponseTopic
    p = t.DescribeShareGroupOffsetsResponsePartition

    def partition(index: int, start: int, epoch: int, lag: int) -> Any:
        extra = {"lag": lag} if v >= 1 else {}
        return p(
            partition_index=index, start_offset=start, leader_epoch=epoch, error_code=0, error_message=None, **extra
        )

    return DescribeShareGroupOffsetsResponse(
        version=v,
        throttle_time_ms=0,
        groups=[
            g(
                group_id=GROUP,
                topics=[
                    t(
                        topic_name="orders",
                        topic_id=ORDERS,
                        partitions=[partition(0, 120, 5, 3), partition(1, -1, -1, -1)],
                    )
                ],
                error_code=0,
                error_message=None,
            ),
            g(group_id="audit-share", topics=[], error_code=69, error_message=NOT_FOUND),
        ],
    )


def alter_offsets(v: int) -> Any:
    t = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
    return AlterShareGroupOffsetsRequest(
        version=v,
        group_id=GROUP,
        topics=[
            t(
                topic_name="orders",
                partitions=[
                    t.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0),
                    t.AlterShareGroupOffsetsRequestPartition(partition_index=1, start_offset=250),
                ],
            )
        ],
    )


def offsets_altered(v: int) -> Any:
    t = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic
    p = t.AlterShareGroupOffsetsResponsePartition
    return AlterShareGroupOffsetsResponse(
        version=v,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        responses=[
            t(
                topic_name="orders",
                topic_id=ORDERS,
                partitions=[
                    p(partition_index=0, error_code=0, error_message=None),
                    p(
                        partition_index=1,
                        error_code=3,  # UNKNOWN_TOPIC_OR_PARTITION
                        error_message="This server does not host this topic-partition.",
                    ),
                ],
            )
        ],
    )


def delete_offsets(v: int) -> Any:
    t = DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic
    return DeleteShareGroupOffsetsRequest(
        version=v, group_id=GROUP, topics=[t(topic_name="orders"), t(topic_name="payments")]
    )


def offsets_deleted(v: int) -> Any:
    t = DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic
    return DeleteShareGroupOffsetsResponse(
        version=v,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        responses=[
            t(topic_name="orders", topic_id=ORDERS, error_code=0, error_message=None),
            t(
                topic_name="payments",
                topic_id=None,  # Kafka's zero UUID (the topic is unknown): kafka-python writes and reads it as None
                error_code=3,
                error_message="This server does not host this topic-partition.",
            ),
        ],
    )


BUILDERS: list[tuple[Callable[[int], Any], Any]] = [
    (heartbeat_join, ShareGroupHeartbeatRequest),
    (heartbeat_steady, ShareGroupHeartbeatRequest),
    (heartbeat_assigned, ShareGroupHeartbeatResponse),
    (heartbeat_fenced, ShareGroupHeartbeatResponse),
    (describe_groups, ShareGroupDescribeRequest),
    (groups_described, ShareGroupDescribeResponse),
    (share_fetch, ShareFetchRequest),
    (share_fetch_close, ShareFetchRequest),
    (share_fetched, ShareFetchResponse),
    (share_acknowledge, ShareAcknowledgeRequest),
    (share_acknowledged, ShareAcknowledgeResponse),
    (describe_offsets, DescribeShareGroupOffsetsRequest),
    (offsets_described, DescribeShareGroupOffsetsResponse),
    (alter_offsets, AlterShareGroupOffsetsRequest),
    (offsets_altered, AlterShareGroupOffsetsResponse),
    (delete_offsets, DeleteShareGroupOffsetsRequest),
    (offsets_deleted, DeleteShareGroupOffsetsResponse),
]

# (label, builder, version): every builder at every version Apache Kafka 4.2.2 offers of its message
CASES = [
    (f"{build.__name__}-v{v}", build, v)
    for build, cls in BUILDERS
    for v in range(cls.valid_versions[0], cls.valid_versions[1] + 1)
]


# --- Kafka's JSON form of a message: the input of java/KafkaEncode.java ----------------------------------------


def kafka_json(message: Any, version: int) -> dict[str, Any]:
    """``message`` as Kafka's generated ``*DataJsonConverter.read`` takes it (lowerCamel names, Kafka's UUID
    text, base64 bytes): built from the fields kafka-python encodes at ``version``, so a field left out or
    misnamed on our side fails there as 'unable to locate field'."""
    return _json_struct(message, message._struct, version)


def _json_struct(item: Any, struct: Any, version: int) -> dict[str, Any]:
    out = {}
    for field in struct.untagged_fields(version):
        out[field._name[0].lower() + field._name[1:]] = _json_value(field, getattr(item, field.name), version)
    assert not struct.tagged_fields(version)._fields, "no tagged fields in these messages"
    return out


def _json_value(field: Any, value: Any, version: int) -> Any:
    if value is None and getattr(field, "type_str", None) == "uuid":
        value = uuid.UUID(int=0)  # kafka-python writes None as Kafka's zero UUID
    if value is None:
        return None
    if isinstance(field, StructArrayField):
        return [_json_struct(v, field.array_of, version) for v in value]
    if isinstance(field, StructField):
        return _json_struct(value, field, version)
    if isinstance(field, ArrayField):
        return list(value)
    assert isinstance(field, SimpleField)
    if field.type_str == "uuid":
        return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()  # org.apache.kafka.common.Uuid
    if field.type_str in ("bytes", "records"):
        return base64.b64encode(bytes(value)).decode()
    return value


def java_input() -> str:
    lines = []
    for label, build, v in CASES:
        message = build(v)
        name = type(message).__name__
        lines.append(f"{label} {name} {v} {json.dumps(kafka_json(message, v), separators=(',', ':'))}")
    return "\n".join(lines)


# --- Kafka's bytes ------------------------------------------------------------------------------------------

# Produced by java/KafkaEncode.java against kafka-clients-4.2.2.jar from java_input() (see the module
# docstring): MessageUtil.toByteBufferAccessor(<Kafka's *Data read from the JSON>, version), the body
# without header or size, as Kafka's clients and brokers write it.
GOLDEN: dict[str, str] = {
    "heartbeat_join-v1": (
        "0d6f72646572732d7368617265176b4a30597133765651384737783262316e4d34705a7700000000077261636b2d6103"
        "076f7264657273097061796d656e747300"
    ),
    "heartbeat_steady-v1": "0d6f72646572732d7368617265176b4a30597133765651384737783262316e4d34705a7700000007000000",
    "heartbeat_assigned-v1": (
        "00000000000000176b4a30597133765651384737783262316e4d34705a77000000030000138801035a3c1e2f8b4d4c6e"
        "9f10a1b2c3d4e5f604000000000000000100000002000f1e2d3c4b5a496887766554433221100200000003000000"
    ),
    "heartbeat_fenced-v1": (
        "0000000c001920546865206d656d626572206973206e6f7420696e207468652067726f75702e00ffffffff00000000ff00"
    ),
    "describe_groups-v1": "030d6f72646572732d73686172650c61756469742d73686172650100",
    "groups_described-v1": (
        "00000000030000000d6f72646572732d736861726507537461626c6500000004000000040773696d706c6503176b4a30"
        "597133765651384737783262316e4d34705a7700000000040d66736d2d636f6e73756d65720b2f3132372e302e302e31"
        "03076f7264657273097061796d656e7473035a3c1e2f8b4d4c6e9f10a1b2c3d4e5f6076f726465727303000000000000"
        "0001000f1e2d3c4b5a49688776655443322110097061796d656e747301000000175a6d3976596d4679596d4636635856"
        "34635856316541077261636b2d620000000309776f726b65722d320a2f31302e302e302e3702076f7264657273010000"
        "00000af80000451d47726f75702061756469742d7368617265206e6f7420666f756e642e0c61756469742d7368617265"
        "054465616400000000000000000101800000000000"
    ),
    "share_fetch-v1": (
        "0d6f72646572732d7368617265176b4a30597133765651384737783262316e4d34705a7700000001000001f400000001"
        "03200000000001f4000001f4035a3c1e2f8b4d4c6e9f10a1b2c3d4e5f603000000000300000000000000640000000000"
        "0000680201000000000000000069000000000000006b040100030000000000010100000f1e2d3c4b5a49688776655443"
        "322110020000000302000000000000000700000000000000070202000000020f1e2d3c4b5a4968877665544332211003"
        "00000004000000050000"
    ),
    "share_fetch-v2": (
        "0d6f72646572732d7368617265176b4a30597133765651384737783262316e4d34705a7700000001000001f400000001"
        "03200000000001f4000001f40101035a3c1e2f8b4d4c6e9f10a1b2c3d4e5f60300000000030000000000000064000000"
        "00000000680201000000000000000069000000000000006b040100030000000000010100000f1e2d3c4b5a4968877665"
        "5443322110020000000302000000000000000700000000000000070204000000020f1e2d3c4b5a496887766554433221"
        "100300000004000000050000"
    ),
    "share_fetch_close-v1": (
        "00176b4a30597133765651384737783262316e4d34705a77ffffffff00000000000000007fffffff0000000000000000010100"
    ),
    "share_fetch_close-v2": (
        "00176b4a30597133765651384737783262316e4d34705a77ffffffff00000000000000007fffffff00000000000000000000010100"
    ),
    "share_fetched-v1": (
        "0000000000000000007530025a3c1e2f8b4d4c6e9f10a1b2c3d4e5f60300000000000000000000000000010000000500"
        "200000000000000064000000490000000002a1b2c3d40000000000000000018f03000000000000006400000000000000"
        "6d000100000000000000006e000000000000006e00030000000000010006385468697320736572766572206973206e6f"
        "7420746865206c656164657220666f72207468617420746f7069632d706172746974696f6e2e007c1d54686520726563"
        "6f726420737461746520697320696e76616c69642e0000000200000006000101000003000000020f62726f6b65722d32"
        "2e6c6f63616c00002384077261636b2d6200000000030f62726f6b65722d332e6c6f63616c00002385000000"
    ),
    "share_fetched-v2": (
        "0000000000000000007530025a3c1e2f8b4d4c6e9f10a1b2c3d4e5f60300000000000000000000000000010000000500"
        "200000000000000064000000490000000002a1b2c3d40000000000000000018f03000000000000006400000000000000"
        "6d000100000000000000006e000000000000006e00030000000000010006385468697320736572766572206973206e6f"
        "7420746865206c656164657220666f72207468617420746f7069632d706172746974696f6e2e007c1d54686520726563"
        "6f726420737461746520697320696e76616c69642e0000000200000006000101000003000000020f62726f6b65722d32"
        "2e6c6f63616c00002384077261636b2d6200000000030f62726f6b65722d332e6c6f63616c00002385000000"
    ),
    "share_acknowledge-v1": (
        "0d6f72646572732d7368617265176b4a30597133765651384737783262316e4d34705a7700000002025a3c1e2f8b4d4c"
        "6e9f10a1b2c3d4e5f6020000000003000000000000006400000000000000680201000000000000000069000000000000"
        "006a03020300000000"
    ),
    "share_acknowledge-v2": (
        "0d6f72646572732d7368617265176b4a30597133765651384737783262316e4d34705a770000000201025a3c1e2f8b4d"
        "4c6e9f10a1b2c3d4e5f60200000000030000000000000064000000000000006802010000000000000000690000000000"
        "00006a03020400000000"
    ),
    "share_acknowledged-v1": (
        "00000000000000025a3c1e2f8b4d4c6e9f10a1b2c3d4e5f603000000000000000000000100000005000000000001007c"
        "1d546865207265636f726420737461746520697320696e76616c69642effffffffffffffff00000002000000010a6c6f"
        "63616c686f737400002384000000"
    ),
    "share_acknowledged-v2": (
        "0000000000000000007530025a3c1e2f8b4d4c6e9f10a1b2c3d4e5f60300000000000000000000010000000500000000"
        "0001007c1d546865207265636f726420737461746520697320696e76616c69642effffffffffffffff00000002000000"
        "010a6c6f63616c686f737400002384000000"
    ),
    "describe_offsets-v0": (
        "030d6f72646572732d736861726502076f72646572730400000000000000010000000200000c61756469742d7368617265000000"
    ),
    "describe_offsets-v1": (
        "030d6f72646572732d736861726502076f72646572730400000000000000010000000200000c61756469742d7368617265000000"
    ),
    "offsets_described-v0": (
        "00000000030d6f72646572732d736861726502076f72646572735a3c1e2f8b4d4c6e9f10a1b2c3d4e5f6030000000000"
        "00000000000078000000050000000000000001ffffffffffffffffffffffff0000000000000000000c61756469742d73"
        "686172650100451d47726f75702061756469742d7368617265206e6f7420666f756e642e0000"
    ),
    "offsets_described-v1": (
        "00000000030d6f72646572732d736861726502076f72646572735a3c1e2f8b4d4c6e9f10a1b2c3d4e5f6030000000000"
        "000000000000780000000500000000000000030000000000000001ffffffffffffffffffffffffffffffffffffffff00"
        "00000000000000000c61756469742d73686172650100451d47726f75702061756469742d7368617265206e6f7420666f"
        "756e642e0000"
    ),
    "alter_offsets-v0": (
        "0d6f72646572732d736861726502076f726465727303000000000000000000000000000000000100000000000000fa000000"
    ),
    "offsets_altered-v0": (
        "0000000000000002076f72646572735a3c1e2f8b4d4c6e9f10a1b2c3d4e5f60300000000000000000000000100033054"
        "6869732073657276657220646f6573206e6f7420686f7374207468697320746f7069632d706172746974696f6e2e0000"
        "00"
    ),
    "delete_offsets-v0": "0d6f72646572732d736861726503076f726465727300097061796d656e74730000",
    "offsets_deleted-v0": (
        "0000000000000003076f72646572735a3c1e2f8b4d4c6e9f10a1b2c3d4e5f600000000097061796d656e747300000000"
        "000000000000000000000000000330546869732073657276657220646f6573206e6f7420686f7374207468697320746f"
        "7069632d706172746974696f6e2e0000"
    ),
}


# --- the tests ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("request_cls", "response_cls", "api_key", "versions"), MESSAGES)
def test_api_keys_and_versions(request_cls: Any, response_cls: Any, api_key: int, versions: tuple[int, int]) -> None:
    assert request_cls.is_request() and not response_cls.is_request()
    assert request_cls.API_KEY == response_cls.API_KEY == api_key
    # Kafka's validVersions kept as they are; kafka-python reads every message as starting at version 0
    assert request_cls.valid_versions == response_cls.valid_versions == versions
    assert request_cls.max_version == response_cls.max_version == versions[1]
    assert request_cls.min_version == 0
    assert all(request_cls.flexible_version_q(v) for v in range(versions[0], versions[1] + 1))
    # what kafka-python's own table says Apache Kafka 4.2 offers, and the version both ends then pick
    broker = BROKER_API_VERSIONS[(4, 2)]
    assert broker[api_key] == versions
    assert BrokerVersionData(api_versions=broker).api_version(request_cls) == versions[1]
    assert pick_version(broker, request_cls) == versions[1]


def test_every_message_and_version_has_a_case() -> None:
    covered = {(type(build(v)), v) for _, build, v in CASES}
    for request_cls, response_cls, _, (low, high) in MESSAGES:
        for cls in (request_cls, response_cls):
            assert {(cls, v) for v in range(low, high + 1)} <= covered


def _schema_listing(docs: bool = True) -> list[str]:
    """What java/SchemaDump.java prints of Kafka's SCHEMAS, made from kafka-python's reading of our JSON."""
    out = []
    for request_cls, response_cls, _, (low, high) in MESSAGES:
        for cls in (request_cls, response_cls):
            out.append(f"# {cls.__name__} key={cls.API_KEY} versions={low}-{high}")
            for v in range(low, high + 1):
                out.append(f"## v{v}")
                _list_struct(cls._struct, "", v, docs, out)
    return out


_WIRE = {"int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "uuid": "UUID", "bool": "BOOLEAN"}


def _wire_type(type_str: str, nullable: bool) -> str:  # flexible versions only: every version here is
    if type_str == "string":
        return "COMPACT_NULLABLE_STRING" if nullable else "COMPACT_STRING"
    if type_str == "records":
        return "COMPACT_RECORDS"
    return _WIRE[type_str]


def _list_struct(struct: Any, prefix: str, v: int, docs: bool, out: list[str]) -> None:
    tagged = struct.tagged_fields(v)._fields
    for field in [*struct.untagged_fields(v), *tagged]:
        tag = f" tag={field.tag}" if field.tagged_field_q(v) else ""
        doc = f" doc={field._about}" if docs else ""
        path = prefix + field.name
        nullable = str(field.nullable_for_version_q(v)).lower()
        if isinstance(field, StructArrayField):
            out.append(f"{path} COMPACT_ARRAY(STRUCT) nullable={nullable}{tag}{doc}")
            _list_struct(field.array_of, path + "[].", v, docs, out)
        elif isinstance(field, ArrayField):
            inner = _wire_type(field.array_of.type_str, False)
            out.append(f"{path} COMPACT_ARRAY({inner}) nullable={nullable}{tag}{doc}")
        elif isinstance(field, StructField):
            out.append(f"{path} STRUCT nullable=false{tag}{doc}")  # Kafka's Schema has no nullable struct
            _list_struct(field, path + ".", v, docs, out)
        else:
            wire = _wire_type(field.type_str, field.nullable_for_version_q(v))
            if wire == "COMPACT_RECORDS":  # Kafka's records type is always nullable
                nullable = "true"
            out.append(f"{path} {wire} nullable={nullable}{tag}{doc}")


def test_field_layouts_are_kafka_4_2_2s() -> None:
    expected = (HERE / "kafka-4.2.2-share-schemas.txt").read_text().splitlines()
    assert _schema_listing() == expected


@pytest.mark.parametrize(("label", "build", "version"), CASES, ids=[c[0] for c in CASES])
def test_encoding_is_kafkas(label: str, build: Callable[[int], Any], version: int) -> None:
    message = build(version)
    golden = bytes.fromhex(GOLDEN[label])
    assert message.encode(version=version) == golden
    decoded = type(message).decode(golden, version=version)
    assert decoded == message
    assert kafka_json(decoded, version) == kafka_json(message, version)


@pytest.mark.parametrize(("label", "build", "version"), CASES, ids=[c[0] for c in CASES])
def test_round_trip(label: str, build: Callable[[int], Any], version: int) -> None:
    message = build(version)
    cls = type(message)
    data = message.encode(version=version)
    decoded = cls.decode(data, version=version)
    assert decoded == message
    assert decoded.version == version
    assert decoded.encode() == data  # at the version it was read at (encode(version=...) fails on it: no _header)
    # every field of the version, nested ones too, compared one by one
    assert kafka_json(decoded, version) == kafka_json(message, version)

    # framed, with the header (request header v2 / response header v1: every version here is flexible)
    message.with_header(correlation_id=4242, client_id="fsm-consumer-test")
    # at the version it was built with: encode(version=...) of a response with a header fails in
    # kafka-python (it sets request_api_version on the response header)
    framed = message.encode(header=True, framed=True)
    assert int.from_bytes(framed[:4], "big") == len(framed) - 4
    decoded = cls.decode(framed, version=version, header=True, framed=True)
    assert decoded == message
    assert decoded.header.correlation_id == 4242
    if cls.is_request():
        assert decoded.header.request_api_key == cls.API_KEY
        assert decoded.header.request_api_version == version
        assert decoded.header.client_id == "fsm-consumer-test"


def test_uuids_and_acknowledge_types_decode_as_sent() -> None:
    decoded = ShareFetchRequest.decode(share_fetch(2).encode(version=2), version=2)
    orders, payments = decoded.topics
    assert isinstance(orders.topic_id, uuid.UUID) and orders.topic_id == ORDERS
    assert [p.partition_index for p in orders.partitions] == [0, 1]
    batches = orders.partitions[0].acknowledgement_batches
    assert [(b.first_offset, b.last_offset, b.acknowledge_types) for b in batches] == [
        (100, 104, [ACCEPT]),
        (105, 107, [ACCEPT, GAP, REJECT]),
    ]
    assert payments.partitions[0].acknowledgement_batches[0].acknowledge_types == [RENEW]
    assert (decoded.share_acquire_mode, decoded.is_renew_ack) == (1, True)
    assert decoded.forgotten_topics_data[0].partitions == [4, 5]


def test_null_records_read_as_null() -> None:
    # Records is nullable in Kafka's definition (one varint 0 on the wire), but kafka-clients 4.2.2 cannot
    # write a null (ShareFetchResponseData.addSize dereferences it): brokers send empty records instead.
    # Both read back as sent.
    fetched = share_fetched(2)
    fetched.responses[0].partitions[1].records = None
    data = fetched.encode(version=2)
    assert len(data) == len(share_fetched(2).encode(version=2))  # varint 0 (null) and varint 1 (empty)
    decoded = ShareFetchResponse.decode(data, version=2)
    assert decoded.responses[0].partitions[1].records is None
    assert bytes(decoded.responses[0].partitions[0].records) == RECORDS
    empty = ShareFetchResponse.decode(share_fetched(2).encode(version=2), version=2)
    assert bytes(empty.responses[0].partitions[1].records) == b""


def test_version_1_has_no_version_2_fields() -> None:
    # ShareFetch v2 adds ShareAcquireMode and IsRenewAck after BatchSize: v1's bytes are 2 shorter and
    # decode to their defaults
    v1, v2 = share_fetch(1).encode(version=1), share_fetch(2).encode(version=2)
    assert len(v2) == len(v1) + 2
    decoded = ShareFetchRequest.decode(v1, version=1)
    assert (decoded.share_acquire_mode, decoded.is_renew_ack) == (0, False)
    # ShareAcknowledge v2 adds IsRenewAck to the request and AcquisitionLockTimeoutMs to the response
    assert len(share_acknowledge(2).encode(version=2)) == len(share_acknowledge(1).encode(version=1)) + 1
    assert len(share_acknowledged(2).encode(version=2)) == len(share_acknowledged(1).encode(version=1)) + 4
    # DescribeShareGroupOffsets v1 adds Lag; a v0 answer reads as lag -1 (unknown), Kafka's default
    described = DescribeShareGroupOffsetsResponse.decode(offsets_described(0).encode(version=0), version=0)
    assert described.groups[0].topics[0].partitions[0].lag == -1


def test_defaults_are_kafkas() -> None:
    # the defaults of a fresh *Data in kafka-clients 4.2.2 (its toString())
    fetch = ShareFetchRequest(version=2)
    assert (fetch.group_id, fetch.member_id, fetch.max_bytes, fetch.share_acquire_mode, fetch.is_renew_ack) == (
        None,
        "",
        0x7FFFFFFF,
        0,
        False,
    )
    assert (fetch.topics, fetch.forgotten_topics_data) == ([], [])
    heartbeat = ShareGroupHeartbeatRequest(version=1)
    assert (heartbeat.group_id, heartbeat.member_id, heartbeat.member_epoch) == ("", "", 0)
    assert (heartbeat.rack_id, heartbeat.subscribed_topic_names) == (None, None)
    answer = ShareGroupHeartbeatResponse(version=1)
    assert (answer.error_message, answer.member_id, answer.assignment) == (None, None, None)
    group = ShareGroupDescribeResponse.DescribedGroup(version=1)
    assert (group.error_message, group.authorized_operations) == (None, -2147483648)
    assert ShareAcknowledgeRequest(version=2).is_renew_ack is False
    assert ShareAcknowledgeResponse(version=2).acquisition_lock_timeout_ms == 0
    partition = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
    assert (
        partition.DescribeShareGroupOffsetsResponseTopic.DescribeShareGroupOffsetsResponsePartition(version=1).lag == -1
    )


def test_an_unknown_tagged_field_from_a_newer_broker_is_kept_aside() -> None:
    # the body's last byte is the top-level tagged-field count (0); a later Kafka may add a tagged field
    body = share_acknowledged(2).encode(version=2)
    assert body[-1] == 0
    newer = body[:-1] + bytes([1, 9, 2]) + b"hi"  # one field: tag 9, 2 bytes
    decoded = ShareAcknowledgeResponse.decode(newer, version=2)
    assert decoded.responses == share_acknowledged(2).responses
    assert decoded.unknown_tags and list(decoded.unknown_tags.values()) == [b"hi"]


if __name__ == "__main__":  # the input of java/KafkaEncode.java (see the module docstring)
    sys.stdout.write(java_input() + "\n")
