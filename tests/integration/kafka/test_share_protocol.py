"""Share groups (KIP-932) on Apache Kafka 4.2, spoken by hand over ``_wire.Connection``: what the broker does
that fsm_consumer's share consumer relies on, pinned down here so that a broker upgrade that changes it
fails here first, in words.

Pinned down:

- membership: on a broker just started, ShareGroupHeartbeat is answered NOT_COORDINATOR until a
  FindCoordinator (key type GROUP) has made __consumer_offsets: a member finds its coordinator first. Then
  epoch 0 with the subscription joins with the client's own member id (a fresh UUID string) and an epoch
  >= 1, and the answer carries the broker's heartbeat interval; the assignment names the topic by id (as
  Metadata v10+ does) and gives a lone member every partition; epoch -1 leaves (the answer's epoch is -1)
  and the group is Empty; ShareGroupDescribe shows the member, its client id, subscription and assignment
  (by id and name), the ``simple`` assignor, and GROUP_ID_NOT_FOUND for a group that does not exist.
- delivery: with the group's ``share.auto.offset.reset`` set to earliest (IncrementalAlterConfigs on the
  GROUP resource, before anyone joined) the partition is ready once assigned: the ShareFetch at session
  epoch 0 acquires every produced record (``acquired_records`` ranges, delivery count 1), with the lock
  duration the group sets (``acquisition_lock_timeout_ms``). RELEASE acknowledged in the next ShareFetch
  (epoch 1) gives those records back with delivery count 2 in that fetch's own answer (once its
  max_wait_ms is out: a release does not wake a waiting fetch). ACCEPT of everything leaves nothing to
  acquire. A lock left to run out gives the records back with delivery count 2.
- acknowledgements: records this member has not acquired are INVALID_RECORD_STATE (and stay untouched);
  offsets before the start offset (accepted already) are let through without error.
- DescribeShareGroupOffsets shows the state as of its last write: -1 (no start offset) until the first
  acknowledgement, and a write carries the start offset from before the acknowledgement it writes, so
  with everything accepted it still shows 0; its lag (v1) is right all along (0, then 3 after 3 more records).
- sessions: a wrong session epoch is INVALID_SHARE_SESSION_EPOCH (the session stays usable at the right
  one); ShareFetch or ShareAcknowledge at epoch -1 closes the session, after which the next epoch finds
  SHARE_SESSION_NOT_FOUND, and epoch 0 opens a new one on the same connection.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the helper beside this file

from share_wire import (  # noqa: E402
    ACCEPT,
    GROUP_ID_NOT_FOUND,
    INVALID_RECORD_STATE,
    INVALID_SHARE_SESSION_EPOCH,
    RELEASE,
    SHARE_SESSION_NOT_FOUND,
    RawShareMember,
    ShareSession,
    acquired,
    describe_group,
    describe_offsets,
    offsets_by_count,
    partition_answer,
    set_group_config,
    start_offsets,
    topic_id,
    wait_until,
)

pytestmark = pytest.mark.brokers("kafka")

LOCK_MS = 5000  # KafkaBroker's group.share.record.lock.duration.ms
HEARTBEAT_MS = 1000  # KafkaBroker's group.share.heartbeat.interval.ms


def new_group() -> str:
    return f"share-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def members():
    made: list[RawShareMember] = []
    yield made
    for m in made:
        m.close()


@pytest.fixture
def sessions():
    made: list[ShareSession] = []
    yield made
    for s in made:
        s.close()


def joined(kafka, members, topic: str, partitions: int, group: str | None = None, earliest: bool = True):
    """A member of a new share group (reading from the earliest offset) owning every partition of ``topic``."""
    group = group or new_group()
    if earliest:
        set_group_config(kafka, group, {"share.auto.offset.reset": "earliest"})
    member = RawShareMember(kafka, group, [topic])
    members.append(member)
    member.join()
    tid = topic_id(kafka, topic)
    member.wait_for_assignment({tid: range(partitions)})
    return member, tid


def fetch_until(session: ShareSession, epoch: int, tp, want, timeout_s: float = 20, **kw):
    """ShareFetch at ``epoch``, ``epoch + 1``... until ``want({offset: delivery count})``, what the answers
    acquired in ``tp`` together, holds: (that dict, the answers, the next epoch)."""
    answers, got = [], {}
    deadline = time.monotonic() + timeout_s
    while True:
        answer = session.fetch(epoch, **kw)
        assert answer.error_code == 0, answer
        epoch += 1
        kw = {k: v for k, v in kw.items() if k not in ("partitions", "acks")}  # in the session now; acks sent
        answers.append(answer)
        for offset, count in offsets_by_count(acquired(answer).get(tp, [])).items():
            assert offset not in got, f"offset {offset} acquired twice: {[acquired(a) for a in answers]}"
            got[offset] = count
        if want(got):
            return got, answers, epoch
        assert time.monotonic() < deadline, f"fetched {[acquired(a) for a in answers]}"


def test_a_member_joins_gets_every_partition_by_topic_id_and_leaves(kafka, make_topic, members):
    topic = make_topic(partitions=3)
    tid = topic_id(kafka, topic)
    group = new_group()
    member = RawShareMember(kafka, group, [topic], client_id="pinned-client")
    members.append(member)
    first = member.join()
    assert first.error_code == 0 and first.error_message is None
    assert first.member_id == member.member_id  # the client makes the member id; the broker keeps it
    assert first.member_epoch >= 1
    assert first.heartbeat_interval_ms == HEARTBEAT_MS
    member.wait_for_assignment({tid: [0, 1, 2]})
    assert member.errors == []

    described = describe_group(kafka, group)
    assert described.error_code == 0
    assert (described.group_id, described.group_state, described.assignor_name) == (group, "Stable", "simple")
    assert described.group_epoch >= 1 and described.assignment_epoch == described.group_epoch
    (seen,) = described.members
    assert (seen.member_id, seen.client_id, seen.subscribed_topic_names) == (member.member_id, "pinned-client", [topic])
    assert seen.member_epoch == member.epoch and seen.client_host.endswith("127.0.0.1")
    (assigned,) = seen.assignment.topic_partitions
    assert (assigned.topic_id, assigned.topic_name, sorted(assigned.partitions)) == (tid, topic, [0, 1, 2])

    left = member.leave()
    assert left.error_code == 0 and left.member_epoch == -1 and left.member_id == member.member_id
    after = describe_group(kafka, group)
    assert after.error_code == 0 and after.group_state == "Empty" and after.members == []

    unknown = describe_group(kafka, new_group())
    assert unknown.error_code == GROUP_ID_NOT_FOUND and unknown.error_message


def test_records_are_acquired_released_redelivered_and_accepted(kafka, make_topic, produce, members, sessions):
    topic = make_topic(partitions=1)
    produce(topic, 10, partition=0)
    group = new_group()
    # locks long enough for the whole test (KafkaBroker's default is 5 s): none may run out on the way
    set_group_config(kafka, group, {"share.record.lock.duration.ms": "30000"})
    member, tid = joined(kafka, members, topic, 1, group=group)
    tp = (tid, 0)
    session = ShareSession(kafka, member.group, member.member_id)
    sessions.append(session)

    # epoch 0 opens the session with the partition and acquires everything from the earliest offset
    got, answers, epoch = fetch_until(
        session, 0, tp, lambda got: len(got) >= 10, partitions={tid: [0]}, max_wait_ms=5000
    )
    assert len(answers) == 1, "the partition was initialized on assignment: the first fetch acquires"
    assert got == dict.fromkeys(range(10), 1)  # each offset acquired once, delivery count 1
    (answer,) = answers
    assert answer.acquisition_lock_timeout_ms == 30000  # the group's setting, not the broker's default
    part = partition_answer(answer, tid, 0)
    assert part.error_code == 0 and part.acknowledge_error_code == 0 and len(part.records) > 0
    # the partition is listed (initialized on assignment) but its start offset is written only with the
    # first acknowledgement: -1 until then, although the group reads from 0
    assert start_offsets(kafka, member.group) == {(topic, 0): -1}

    # RELEASE 0-2 in the next ShareFetch (epoch 1): they come back, delivery count 2, in that same answer
    # (it waits out max_wait_ms first: a release does not wake a waiting fetch); 3-9 stay ours
    again, answers, epoch = fetch_until(
        session, epoch, tp, lambda got: got, acks={tp: [(0, 2, RELEASE)]}, max_wait_ms=500
    )
    assert again == {0: 2, 1: 2, 2: 2} and len(answers) == 1
    assert partition_answer(answers[0], tid, 0).acknowledge_error_code == 0
    # the first acknowledgement wrote the partition's state: the start offset is known from now on
    wait_until(lambda: start_offsets(kafka, group) == {(topic, 0): 0}, 10, "start offset 0")

    # ACCEPT everything: nothing more to acquire, and the start offset moves past it
    answer = session.fetch(epoch, acks={tp: [(0, 9, ACCEPT)]}, max_wait_ms=500)
    epoch += 1
    assert answer.error_code == 0 and acquired(answer) == {}
    assert partition_answer(answer, tid, 0).acknowledge_error_code == 0
    # what DescribeShareGroupOffsets says is the state as of its last write, and a write carries the start
    # offset from before the acknowledgement it writes: everything is accepted, yet the start offset shown
    # stays 0; its lag (v1) counts right: nothing left
    assert describe_offsets(kafka, group) == {(topic, 0): (0, 0)}
    produce(topic, 3, partition=0)
    wait_until(lambda: describe_offsets(kafka, group) == {(topic, 0): (0, 3)}, 10, "lag 3 after 3 more records")

    # records this member has not acquired (10-12, just produced) cannot be acknowledged...
    answer = session.acknowledge(epoch, {tp: [(10, 12, ACCEPT)]})
    epoch += 1
    assert answer.error_code == 0
    assert [p.error_code for t in answer.responses for p in t.partitions] == [INVALID_RECORD_STATE]
    # ...while offsets before the start offset (0-9, accepted) are let through: no error
    answer = session.acknowledge(epoch, {tp: [(0, 9, ACCEPT)]})
    epoch += 1
    assert [p.error_code for t in answer.responses for p in t.partitions] == [0]
    # and nothing of 10-12 was touched: they are acquired next, for the first time
    fresh, _, epoch = fetch_until(session, epoch, tp, lambda got: len(got) == 3)
    assert fresh == dict.fromkeys(range(10, 13), 1)

    # ShareAcknowledge at epoch -1 closes the session: the next epoch finds none
    closing = session.acknowledge(-1, {})
    assert closing.error_code == 0
    gone = session.fetch(epoch, max_wait_ms=0)
    assert gone.error_code == SHARE_SESSION_NOT_FOUND
    assert member.leave().member_epoch == -1


def test_a_wrong_session_epoch_is_refused_and_epoch_minus_one_closes(kafka, make_topic, produce, members, sessions):
    topic = make_topic(partitions=1)
    produce(topic, 3, partition=0)
    member, tid = joined(kafka, members, topic, 1)
    session = ShareSession(kafka, member.group, member.member_id)
    sessions.append(session)
    got, _, epoch = fetch_until(session, 0, (tid, 0), lambda got: len(got) == 3, partitions={tid: [0]})
    assert epoch >= 1

    wrong = session.fetch(epoch + 5, max_wait_ms=0)
    assert wrong.error_code == INVALID_SHARE_SESSION_EPOCH
    assert wrong.error_message is None or isinstance(wrong.error_message, str)
    right = session.fetch(epoch, acks={(tid, 0): [(0, 2, ACCEPT)]}, max_wait_ms=0)  # still there at the right one
    assert right.error_code == 0 and partition_answer(right, tid, 0).acknowledge_error_code == 0
    epoch += 1

    closing = session.fetch(-1, max_wait_ms=0)  # a final ShareFetch: no records, the session closed
    assert closing.error_code == 0 and acquired(closing) == {}
    assert session.fetch(epoch, max_wait_ms=0).error_code == SHARE_SESSION_NOT_FOUND
    # a new session on the same connection starts again at epoch 0
    reopened = session.fetch(0, {tid: [0]}, max_wait_ms=0)
    assert reopened.error_code == 0


def test_a_lock_left_to_run_out_gives_the_records_back(kafka, make_topic, produce, members, sessions):
    topic = make_topic(partitions=1)
    produce(topic, 4, partition=0)
    group = new_group()
    set_group_config(kafka, group, {"share.record.lock.duration.ms": "1000"})  # the broker's minimum here
    member, tid = joined(kafka, members, topic, 1, group=group)
    tp = (tid, 0)
    session = ShareSession(kafka, group, member.member_id)
    sessions.append(session)
    first, answers, epoch = fetch_until(session, 0, tp, lambda got: len(got) == 4, partitions={tid: [0]})
    assert first == dict.fromkeys(range(4), 1)
    assert answers[0].acquisition_lock_timeout_ms == 1000
    time.sleep(1.5)  # no acknowledgement: the locks run out
    again, _, epoch = fetch_until(session, epoch, tp, lambda got: len(got) == 4)
    assert again == dict.fromkeys(range(4), 2)
