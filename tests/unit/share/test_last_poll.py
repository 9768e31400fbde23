"""Explicit mode's acknowledge() on the application thread (LastPoll, as Java's ShareInFlightBatch): it keeps
only records the last poll() handed out, the last type given to each, and gives them by partition to the call
that sends them; records it does not keep go to the buffer, which refuses what it must."""

from __future__ import annotations

from fsm_consumer.managers._share_batch import ShareRecord as Held
from fsm_consumer.managers._share_session import TopicIdPartition
from fsm_consumer.share._acks import LastPoll
from fsm_consumer.structs import ConsumerRecord

P0, P1 = TopicIdPartition("id-t", 0), TopicIdPartition("id-t", 1)


def _batch(where: TopicIdPartition, offsets: range) -> tuple[float, list[Held]]:
    def record(offset: int) -> ConsumerRecord:
        return ConsumerRecord("t", where.partition, 0, offset, 0, 0, None, b"v", (), None, -1, 1, -1)

    return 5000.0, [Held(where, o, 1, record(o)) for o in offsets]


def test_it_keeps_only_what_the_last_poll_handed_out():
    last = LastPoll()
    last.handed_out([_batch(P0, range(0, 3)), _batch(P1, range(10, 12)), _batch(P0, range(3, 5))], True)
    assert last.record("t", 0, 4, 1) and last.record("t", 1, 11, 2)
    assert not last.record("t", 0, 5, 1)  # not handed out
    assert not last.record("t", 2, 0, 1)  # nor anything of another partition
    assert not last.record("u", 0, 0, 1)
    last.handed_out([_batch(P1, range(12, 14))], True)  # the next poll: those before are gone
    assert not last.record("t", 0, 0, 1) and last.record("t", 1, 13, 1)


def test_take_gives_the_last_type_of_each_record_by_partition_and_lets_them_go():
    last = LastPoll()
    last.handed_out([_batch(P0, range(0, 3)), _batch(P1, range(10, 12))], True)
    for offset, kind in [(0, 1), (1, 2), (0, 3)]:
        assert last.record("t", 0, offset, kind)
    assert last.record("t", 1, 10, 1) and last.record("t", 1, 11, 1)
    assert last.take() == [(P0, {0: 3, 1: 2}), (P1, {10: 1, 11: 1})]
    assert last.take() == []  # given once
    assert not last.record("t", 0, 0, 1)  # taken: the buffer decides (it refuses once the batch's acks are taken)
    assert last.record("t", 0, 2, 1)  # not acknowledged before: still kept
    assert last.take() == [(P0, {2: 1})]


def test_it_knows_where_the_last_poll_handed_out_in_either_mode():
    for explicit in (True, False):
        last = LastPoll()
        last.handed_out([_batch(P0, range(0, 3)), _batch(P1, range(10, 12))], explicit)
        assert last.where("t", 0) == P0 and last.where("t", 1) == P1 and last.where("t", 2) is None
        assert last.record("t", 0, 1, 1) is explicit  # implicit mode keeps no records
        last.take()
        assert last.where("t", 0) == P0  # after the acknowledgements are given, until the next poll
        last.handed_out([_batch(P1, range(12, 14))], explicit)
        assert last.where("t", 0) is None and last.where("t", 1) == P1
