"""ShareGroupAdmin and ``fsm-consumer share-group`` against Apache Kafka 4.2, with members that join by hand
(ShareGroupHeartbeat over ``_wire.Connection``, tests/integration/kafka/share_wire.py): describe, start
offsets moving as records are acknowledged, lag, settings set and read back, offsets reset and deleted on an
empty group, and the errors a user meets (an unknown group, a wrong setting, a group with members). Tansu
has no share groups: the one Tansu test checks that the admin says so."""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

import kafka.errors as ke
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "kafka"))  # importlib mode: the raw share-protocol helper

from share_wire import ACCEPT, RawShareMember, ShareSession, acquired, offsets_by_count, topic_id, wait_until  # noqa: E402

from fsm_consumer import cli  # noqa: E402
from fsm_consumer.errors import ConfigError  # noqa: E402
from fsm_consumer.share._admin import ShareGroupAdmin, group_config, set_group_config  # noqa: E402
from fsm_consumer.structs import TopicPartition  # noqa: E402

TP = TopicPartition


@pytest.fixture
def kafka(broker):
    return broker


@pytest.fixture
def admin(kafka):
    with ShareGroupAdmin(kafka.bootstrap_servers, timeout_ms=20_000) as made:
        yield made


@pytest.fixture
def members():
    made: list[RawShareMember] = []
    yield made
    for m in made:
        m.close()


def new_group() -> str:
    return f"share-admin-{uuid.uuid4().hex[:10]}"


def join(kafka, members, group: str, topic: str, client_id: str = "raw-member") -> RawShareMember:
    member = RawShareMember(kafka, group, [topic], client_id=client_id)
    members.append(member)
    member.join()
    return member


def consume_and_accept(kafka, member: RawShareMember, topic: str, count: int, accept: int) -> None:
    """Acquire ``count`` records of partition 0 in a share session, ACCEPT the first ``accept`` of them and
    close the session (which gives the rest back). Two state writes, so the start offset the broker shows,
    which is the one from before the last write's acknowledgements, is past the accepted ones."""
    tid = topic_id(kafka, topic)
    wait_until(lambda: 0 in member.assignment.get(tid, []), 20, "partition 0 assigned", lambda: repr(member.assignment))
    session = ShareSession(kafka, member.group, member.member_id)
    try:
        got: dict[int, int] = {}
        epoch = 0
        deadline = time.monotonic() + 20
        while len(got) < count:
            answer = session.fetch(epoch, {tid: [0]} if epoch == 0 else None, max_wait_ms=2000)
            assert answer.error_code == 0, answer
            epoch += 1
            got.update(offsets_by_count(acquired(answer).get((tid, 0), [])))
            assert time.monotonic() < deadline, f"acquired {got}"
        answer = session.acknowledge(epoch, {(tid, 0): [(0, accept - 1, ACCEPT)]})
        assert answer.error_code == 0 and [p.error_code for t in answer.responses for p in t.partitions] == [0]
        closing = session.acknowledge(-1, {})
        assert closing.error_code == 0
    finally:
        session.close()


@pytest.mark.brokers("kafka")
def test_describe_shows_the_members_and_how_the_partitions_are_split(kafka, admin, make_topic, members):
    topic = make_topic(partitions=4)
    group = new_group()
    first = join(kafka, members, group, topic, client_id="first")
    second = join(kafka, members, group, topic, client_id="second")
    tid = topic_id(kafka, topic)

    def split() -> bool:
        owned = [p for m in (first, second) for p in m.assignment.get(tid, [])]
        return sorted(owned) == [0, 1, 2, 3] and all(m.assignment.get(tid) for m in (first, second))

    wait_until(split, 20, "the two members to split the partitions", lambda: f"{first.assignment} {second.assignment}")
    described = wait_until(
        lambda: (d := admin.describe_group(group)).assignment_epoch == d.group_epoch and len(d.members) == 2 and d,
        10,
        "the description to show both members at the group's epoch",
    )
    assert (described.group_id, described.state, described.assignor) == (group, "Stable", "simple")
    by_client = {m.client_id: m for m in described.members}
    assert set(by_client) == {"first", "second"}
    assert by_client["first"].member_id == first.member_id and by_client["second"].member_id == second.member_id
    assert by_client["first"].subscribed_topics == (topic,)
    owned = sorted(tp for m in described.members for tp in m.assignment)
    assert owned == [TP(topic, p) for p in range(4)]
    assert all(m.host.endswith("127.0.0.1") and m.epoch >= 1 for m in described.members)
    for m in described.members:  # as the members themselves were told
        mine = first if m.member_id == first.member_id else second
        assert [tp.partition for tp in m.assignment] == mine.assignment[tid]


@pytest.mark.brokers("kafka")
def test_the_start_offset_moves_as_records_are_acknowledged_and_lag_follows(kafka, admin, make_topic, produce, members):
    topic = make_topic(partitions=2)
    group = new_group()
    admin.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    produce(topic, 10, partition=0)
    member = join(kafka, members, group, topic)
    tid = topic_id(kafka, topic)
    member.wait_for_assignment({tid: [0, 1]})

    before = admin.describe_offsets(group)
    assert list(before) == [TP(topic, 0), TP(topic, 1)]  # every subscribed partition
    zero = before[TP(topic, 0)]
    # nothing acknowledged yet: the broker has written no start offset (nor lag) for the group
    assert (zero.start_offset, zero.end_offset, zero.lag) == (None, 10, None)
    assert before[TP(topic, 1)].end_offset == 0

    consume_and_accept(kafka, member, topic, 10, accept=6)
    after = wait_until(
        lambda: (o := admin.describe_offsets(group))[TP(topic, 0)].start_offset == 6 and o,
        10,
        "the start offset to move past the accepted records",
    )
    assert (after[TP(topic, 0)].end_offset, after[TP(topic, 0)].lag) == (10, 4)
    produce(topic, 5, partition=0)
    assert admin.describe_offsets(group)[TP(topic, 0)].lag == 9


@pytest.mark.brokers("kafka")
def test_settings_round_trip(kafka, admin):
    group = new_group()
    defaults = admin.group_config(group)
    assert set(defaults) >= {
        "share.auto.offset.reset",
        "share.isolation.level",
        "share.record.lock.duration.ms",
        "share.heartbeat.interval.ms",
        "share.session.timeout.ms",
    }
    assert defaults["share.auto.offset.reset"] == "latest"
    assert defaults["share.record.lock.duration.ms"] == "5000"  # KafkaBroker's group.share.record.lock.duration.ms
    assert all(e.is_default for e in admin.group_config_entries(group))

    admin.set_group_config(group, {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": 2000})
    entries = {e.name: e for e in admin.group_config_entries(group)}
    assert (entries["share.auto.offset.reset"].value, entries["share.auto.offset.reset"].source) == (
        "earliest",
        "group",
    )
    assert (
        entries["share.record.lock.duration.ms"].value == "2000"
        and not entries["share.isolation.level"].source == "group"
    )

    # the one-liners, over their own connections
    set_group_config(kafka.bootstrap_servers, group, {"share.auto.offset.reset": None})  # back to the default
    again = group_config(kafka.bootstrap_servers, group)
    assert again["share.auto.offset.reset"] == "latest" and again["share.record.lock.duration.ms"] == "2000"


@pytest.mark.brokers("kafka")
def test_wrong_settings_are_refused_with_the_reason(kafka, admin):
    group = new_group()
    with pytest.raises(ConfigError, match="'share.lock.ms' is not a share group setting"):
        admin.set_group_config(group, {"share.lock.ms": 1000})  # share.*, unknown to this broker too
    with pytest.raises(ke.InvalidConfigurationError) as caught:
        admin.set_group_config(group, {"share.record.lock.duration.ms": 10})  # below the broker's minimum (1 s)
    assert "at least 1000" in str(caught.value) and repr(group) in str(caught.value)
    with pytest.raises(ke.InvalidConfigurationError):
        admin.set_group_config(group, {"share.auto.offset.reset": "sometimes"})
    assert admin.group_config(group)["share.auto.offset.reset"] == "latest"  # nothing was set


@pytest.mark.brokers("kafka")
def test_reset_and_delete_offsets_on_an_empty_group(kafka, admin, make_topic, produce, members):
    topic = make_topic(partitions=1)
    group = new_group()
    admin.set_group_config(group, {"share.auto.offset.reset": "earliest"})
    produce(topic, 10, partition=0)
    member = join(kafka, members, group, topic)
    consume_and_accept(kafka, member, topic, 10, accept=6)
    tp = TP(topic, 0)
    wait_until(lambda: admin.describe_offsets(group)[tp].start_offset == 6, 10, "start offset 6")

    with pytest.raises(ke.NonEmptyGroupError) as caught:  # a member is still in the group
        admin.reset_offsets(group, topic, "earliest")
    assert repr(group) in str(caught.value) and "stop its consumers" in str(caught.value)

    assert member.leave().member_epoch == -1
    wait_until(lambda: admin.describe_group(group).state == "Empty", 10, "the group to be empty")
    assert admin.reset_offsets(group, topic, 3) == {tp: 3}
    assert admin.describe_offsets(group)[tp].start_offset == 3
    assert admin.reset_offsets(group, topic, "earliest") == {tp: 0}
    assert admin.describe_offsets(group)[tp].lag == 10
    assert admin.reset_offsets(group, topic, "latest") == {tp: 10}
    assert admin.describe_offsets(group)[tp].start_offset == 10

    admin.delete_offsets(group, [topic])
    gone = admin.describe_offsets(group)
    assert tp not in gone or gone[tp].start_offset is None


@pytest.mark.brokers("kafka")
def test_an_unknown_group_is_one_clear_error(kafka, admin, capsys):
    group = new_group()
    with pytest.raises(ke.GroupIdNotFoundError) as caught:
        admin.describe_group(group)
    assert repr(group) in str(caught.value)
    assert cli.main(["share-group", "describe", group, "--bootstrap-server", kafka.bootstrap_servers]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and group in err and "GroupIdNotFoundError" in err
    assert "Traceback" not in err


@pytest.mark.brokers("kafka")
def test_the_cli_describes_the_member_and_the_lag(kafka, admin, make_topic, produce, members, capsys):
    topic = make_topic(partitions=1)
    group = new_group()
    assert (
        cli.main(
            ["share-group", "config", group, "--set", "share.auto.offset.reset=earliest", "-b", kafka.bootstrap_servers]
        )
        == 0
    )
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["share.auto.offset.reset", "earliest", "group"] in rows
    produce(topic, 7, partition=0)
    member = join(kafka, members, group, topic, client_id="cli-watched")
    consume_and_accept(kafka, member, topic, 7, accept=3)
    wait_until(lambda: admin.describe_offsets(group)[TP(topic, 0)].start_offset == 3, 10, "start offset 3")

    assert cli.main(["share-group", "describe", group, "-b", kafka.bootstrap_servers]) == 0
    out = capsys.readouterr().out
    assert member.member_id in out and "cli-watched" in out and f"{topic}:0" in out
    [row] = [line.split() for line in out.splitlines() if line.startswith(topic + " ")]
    assert row == [topic, "0", "3", "7", "4"]

    assert cli.main(["share-group", "describe", group, "-b", kafka.bootstrap_servers, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["members"][0]["member_id"] == member.member_id
    assert doc["offsets"] == [{"topic": topic, "partition": 0, "start_offset": 3, "end_offset": 7, "lag": 4}]


@pytest.mark.brokers("tansu")
def test_a_broker_without_share_groups_says_so(broker):
    with ShareGroupAdmin(broker.bootstrap_servers, timeout_ms=10_000) as admin:
        with pytest.raises(ke.UnsupportedVersionError, match="does not support share groups"):
            admin.describe_group(new_group())
