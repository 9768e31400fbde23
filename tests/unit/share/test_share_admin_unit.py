"""ShareGroupAdmin without a broker: its answers read from scripted responses (the real message classes), its
errors (typed, saying what failed and how to fix it), its retries (a coordinator that moved, a connection
lost) and its checks of setting names before anything is sent."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import kafka.errors as ke
import pytest

from fsm_consumer.errors import AuthenticationFailedError, ConfigError, KafkaTimeoutError
from fsm_consumer.protocol import (
    AlterShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponse,
    ShareGroupDescribeResponse,
)
from fsm_consumer.share._admin import SHARE_GROUP_CONFIG_KEYS, ShareGroupAdmin
from fsm_consumer.share._admin_wire import NO_SHARE_GROUPS, broker_error
from fsm_consumer.structs import TopicPartition
from fsm_consumer.transport._base import Pending
from fsm_consumer.transport._errors import AuthenticationError, ConnectionLost, UnsupportedVersion

TP = TopicPartition
ORDERS = uuid.UUID("5a3c1e2f-8b4d-4c6e-9f10-a1b2c3d4e5f6")


class ScriptedTransport:
    """Answers each request from ``script[request class name]``: a list consumed in order (an item is a
    response, an exception, or a function of (request, node)). Records what was sent where."""

    def __init__(self, script):
        self.script = {k: list(v) for k, v in script.items()}
        self.sent: list[tuple[str, int | None, object]] = []
        self.closed = False
        self.brokers = {}

    def send(self, request, node=None, *, timeout_ms=None, min_version=0, **_):
        name = type(request).__name__
        self.sent.append((name, node, request))
        pending = Pending(request, node, 0.0, min_version=min_version)
        answers = self.script.get(name)
        assert answers, f"unscripted {name}"
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if callable(answer) and not isinstance(answer, Exception):
            answer = answer(request, node)
        if isinstance(answer, Exception):
            pending.settle(error=answer)
        else:
            pending.settle(response=answer)
        return pending

    def poll(self, timeout_ms):
        return []

    def update_brokers(self, brokers):
        self.brokers = dict(brokers)

    def node_states(self):
        return {}

    def close(self):
        self.closed = True


def metadata(topics=()):
    return SimpleNamespace(
        brokers=[SimpleNamespace(node_id=1, host="b1", port=9092), SimpleNamespace(node_id=2, host="b2", port=9092)],
        topics=[
            SimpleNamespace(
                name=name,
                error_code=0,
                partitions=[SimpleNamespace(partition_index=p, leader_id=1 + p % 2) for p in range(n)],
            )
            for name, n in topics
        ],
    )


def coordinator(node=2, code=0):
    return SimpleNamespace(coordinators=[SimpleNamespace(error_code=code, node_id=node, host="b2", port=9092)])


def described(code=0, message=None, members=True):
    g = ShareGroupDescribeResponse.DescribedGroup
    a = g.Member.Assignment
    member = g.Member(
        member_id="m-1",
        rack_id=None,
        member_epoch=3,
        client_id="worker",
        client_host="/10.0.0.7",
        subscribed_topic_names=["orders"],
        assignment=a(topic_partitions=[a.TopicPartitions(topic_id=ORDERS, topic_name="orders", partitions=[1, 0])]),
    )
    return ShareGroupDescribeResponse(
        version=1,
        throttle_time_ms=0,
        groups=[
            g(
                error_code=code,
                error_message=message,
                group_id="orders-share",
                group_state="Stable" if code == 0 else "Dead",
                group_epoch=3,
                assignment_epoch=3,
                assignor_name="simple",
                members=[member] if members and code == 0 else [],
            )
        ],
    )


def offsets_described(starts):
    g = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
    t = g.DescribeShareGroupOffsetsResponseTopic
    p = t.DescribeShareGroupOffsetsResponsePartition
    return DescribeShareGroupOffsetsResponse(
        version=1,
        throttle_time_ms=0,
        groups=[
            g(
                group_id="orders-share",
                error_code=0,
                error_message=None,
                topics=[
                    t(
                        topic_name="orders",
                        topic_id=ORDERS,
                        partitions=[
                            p(
                                partition_index=i,
                                start_offset=s,
                                leader_epoch=0,
                                lag=lag,
                                error_code=0,
                                error_message=None,
                            )
                            for i, (s, lag) in starts.items()
                        ],
                    )
                ],
            )
        ],
    )


def list_offsets(ends):
    def answer(request, node):
        return SimpleNamespace(
            topics=[
                SimpleNamespace(
                    name=t.name,
                    partitions=[
                        SimpleNamespace(partition_index=p.partition_index, error_code=0, offset=ends[p.partition_index])
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )

    return answer


def admin_with(script, **kw):
    admin = ShareGroupAdmin("b0:9092", **kw)
    admin._wire.transport.close()
    admin._wire.transport = fake = ScriptedTransport(script)
    return admin, fake


def test_describe_group_reads_the_members_and_their_assignment_by_name():
    admin, fake = admin_with(
        {
            "MetadataRequest": [metadata()],
            "FindCoordinatorRequest": [coordinator(node=2)],
            "ShareGroupDescribeRequest": [described()],
        }
    )
    with admin:
        group = admin.describe_group("orders-share")
    assert (group.state, group.group_epoch, group.assignor) == ("Stable", 3, "simple")
    (member,) = group.members
    assert (member.member_id, member.client_id, member.host, member.epoch) == ("m-1", "worker", "/10.0.0.7", 3)
    assert member.assignment == (TP("orders", 0), TP("orders", 1)) and member.subscribed_topics == ("orders",)
    assert [(name, node) for name, node, _ in fake.sent] == [
        ("MetadataRequest", None),
        ("FindCoordinatorRequest", None),
        ("ShareGroupDescribeRequest", 2),
    ]
    assert fake.closed


def test_a_coordinator_that_moved_is_found_again():
    admin, fake = admin_with(
        {
            "MetadataRequest": [metadata()],
            "FindCoordinatorRequest": [coordinator(node=1), coordinator(node=2)],
            "ShareGroupDescribeRequest": [described(code=16), described()],  # NOT_COORDINATOR, then the answer
        }
    )
    with admin:
        assert admin.describe_group("orders-share").state == "Stable"
    assert [node for name, node, _ in fake.sent if name == "ShareGroupDescribeRequest"] == [1, 2]


def test_an_unknown_group_is_a_typed_error_naming_it_with_the_brokers_words():
    admin, _ = admin_with(
        {
            "MetadataRequest": [metadata()],
            "FindCoordinatorRequest": [coordinator()],
            "ShareGroupDescribeRequest": [described(code=69, message="Group nope not found.")],
        }
    )
    with admin, pytest.raises(ke.GroupIdNotFoundError) as caught:
        admin.describe_group("nope")
    text = str(caught.value)
    assert "'nope'" in text and "Group nope not found" in text and "check the group id" in text


def test_offsets_join_start_and_end_offsets_for_every_subscribed_partition():
    admin, _ = admin_with(
        {
            "MetadataRequest": [metadata([("orders", 4)])],
            "FindCoordinatorRequest": [coordinator()],
            # lag as the broker counts it (v1), or -1: from a broker that does not
            "DescribeShareGroupOffsetsRequest": [offsets_described({0: (4, 2), 1: (-1, -1), 2: (3, -1)})],
            "ShareGroupDescribeRequest": [described()],
            "ListOffsetsRequest": [list_offsets({0: 10, 1: 6, 2: 8, 3: 0})],
        }
    )
    with admin:
        offsets = admin.describe_offsets("orders-share")
    assert [(o.partition, o.start_offset, o.end_offset, o.lag) for o in offsets.values()] == [
        (0, 4, 10, 2),  # the broker's count: records acknowledged past the start are not lag
        (1, None, 6, None),  # no state written yet
        (2, 3, 8, 5),  # no count from the broker: end - start
        (3, None, 0, None),  # subscribed, never fetched
    ]
    assert list(offsets) == [TP("orders", p) for p in range(4)]


def test_altering_offsets_of_a_group_with_members_says_to_stop_them():
    refused = AlterShareGroupOffsetsResponse(
        version=0, throttle_time_ms=0, error_code=68, error_message="The group is not empty.", responses=[]
    )
    admin, _ = admin_with(
        {
            "MetadataRequest": [metadata()],
            "FindCoordinatorRequest": [coordinator()],
            "AlterShareGroupOffsetsRequest": [refused],
        }
    )
    with admin, pytest.raises(ke.NonEmptyGroupError, match="stop its consumers first"):
        admin.alter_offsets("g", {TP("orders", 0): 3})
    with pytest.raises(ValueError, match="orders-0 must be an int >= 0"):
        admin.alter_offsets("g", {TP("orders", 0): -1})


def test_a_broker_without_share_groups_says_so():
    admin, _ = admin_with(
        {
            "MetadataRequest": [metadata()],
            "FindCoordinatorRequest": [coordinator()],
            "ShareGroupDescribeRequest": [UnsupportedVersion("broker does not support ShareGroupDescribe", api_key=77)],
        }
    )
    with admin, pytest.raises(ke.UnsupportedVersionError) as caught:
        admin.describe_group("g")
    assert NO_SHARE_GROUPS in str(caught.value) and "Tansu has none" in str(caught.value)
    assert NO_SHARE_GROUPS in str(broker_error(35, "describing share group 'g'"))


def test_a_lost_connection_is_tried_again_and_a_failed_login_is_not():
    admin, fake = admin_with(
        {
            "MetadataRequest": [ConnectionLost("reset by peer"), metadata()],
            "FindCoordinatorRequest": [AuthenticationError("SASL PLAIN: wrong password")],
        }
    )
    with admin, pytest.raises(AuthenticationFailedError, match="wrong password"):
        admin.describe_group("g")
    assert [name for name, _, _ in fake.sent] == ["MetadataRequest", "MetadataRequest", "FindCoordinatorRequest"]


def test_no_broker_is_a_timeout_naming_the_call():
    with ShareGroupAdmin("127.0.0.1:1", timeout_ms=300) as admin:  # nothing listens on port 1
        with pytest.raises(KafkaTimeoutError) as caught:
            admin.describe_group("orders-share")
    text = str(caught.value)
    assert text.startswith("ShareGroupAdmin.describe_group('orders-share')") and "127.0.0.1:1" in text
    assert admin.closed


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("auto.offset.reset", None),  # a consumer's key, not a group's
        ("consumer.session.timeout.ms", None),  # a consumer group's
        ("share.auto.ofset.reset", "share.auto.offset.reset"),
        ("share.record.lock.duration", "share.record.lock.duration.ms"),
    ],
)
def test_a_wrong_setting_name_is_refused_before_anything_is_sent(key, hint):
    admin, fake = admin_with({})
    with admin, pytest.raises(ConfigError) as caught:
        admin.set_group_config("g", {key: "1"})
    assert caught.value.key == key and repr(key) in str(caught.value)
    if hint:
        assert f"did you mean {hint!r}" in str(caught.value)
    assert all(k in str(caught.value) for k in SHARE_GROUP_CONFIG_KEYS)
    assert fake.sent == []


def test_values_are_sent_as_the_broker_reads_them_and_none_deletes():
    sent = {}

    def altered(request, node):
        (resource,) = request.resources
        sent.update({c.name: (c.config_operation, c.value) for c in resource.configs})
        assert (resource.resource_type, resource.resource_name) == (32, "g")
        return SimpleNamespace(responses=[SimpleNamespace(error_code=0, error_message=None)])

    admin, _ = admin_with({"IncrementalAlterConfigsRequest": [altered]})
    with admin:
        admin.set_group_config(
            "g",
            {
                "share.record.lock.duration.ms": 15000,
                "share.auto.offset.reset": "earliest",
                "share.isolation.level": None,
            },
        )
    assert sent == {
        "share.record.lock.duration.ms": (0, "15000"),
        "share.auto.offset.reset": (0, "earliest"),
        "share.isolation.level": (1, None),
    }


def test_a_value_the_broker_refuses_carries_its_reason():
    reason = "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"
    admin, _ = admin_with(
        {
            "IncrementalAlterConfigsRequest": [
                SimpleNamespace(responses=[SimpleNamespace(error_code=40, error_message=reason)])
            ]
        }
    )
    with admin, pytest.raises(ke.InvalidConfigurationError) as caught:
        admin.set_group_config("g", {"share.record.lock.duration.ms": 10})
    assert reason in str(caught.value) and "'g'" in str(caught.value)
