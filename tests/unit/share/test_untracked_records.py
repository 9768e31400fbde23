"""The records a share consumer keeps a while (buffered, handed out) are out of the cyclic collector's sight when
nothing they hold can lead to a cycle (fetch/_cdecode.c's untrack): CPython never untracks a tuple subclass, so
each record would be traversed by every collection and, promoted to the oldest generation, trigger its full
collections. A record holding anything that can be part of a cycle stays tracked, and such a cycle is collected."""

import gc
import weakref
from typing import Any, NamedTuple

import pytest

from fsm_consumer.fetch._untrack import _keep_tracked, untrack
from fsm_consumer.managers._share_buffer import ShareBuffer
from fsm_consumer.managers._share_session import TopicIdPartition
from fsm_consumer.share._consumer import ShareConsumer
from fsm_consumer.structs import ConsumerRecord

pytestmark = pytest.mark.skipif(
    untrack is _keep_tracked, reason="the compiled module (fetch/_cdecode.c) was not built: nothing is untracked"
)


class Pair(NamedTuple):
    a: Any
    b: Any


class WithDict(tuple):
    pass


def _records(count: int) -> list[ConsumerRecord]:
    """As the compiled decoder gives them: untracked."""
    records = [ConsumerRecord("t", 0, 0, offset, 1000, 0, None, b"v", (), None, -1, 1, -1) for offset in range(count)]
    untrack(records)
    return records


def test_a_tuple_of_plain_values_is_untracked_and_one_that_can_hold_a_cycle_is_not():
    plain = Pair("x", (1, b"y"))
    holds_list = Pair("x", [1])
    holds_untracked = Pair("x", plain)
    items: list[Any] = [plain, holds_list, WithDict((1, 2)), [1, 2]]
    assert all(map(gc.is_tracked, items))
    untrack(items)
    untrack([holds_untracked])  # what it holds was untracked first
    assert [gc.is_tracked(x) for x in items] == [False, True, True, True]  # a __dict__ could close a cycle
    assert not gc.is_tracked(holds_untracked)


def test_a_record_whose_value_can_be_part_of_a_cycle_stays_tracked_and_the_cycle_is_collected():
    class Value:
        record: Any = None

    value = Value()
    record = Pair(1, value)
    value.record = record  # a deserializer's object pointing back at its record
    untrack([record])
    assert gc.is_tracked(record)
    gone = weakref.ref(value)
    del value, record
    gc.collect()
    assert gone() is None


def test_the_buffer_keeps_and_the_consumer_hands_out_untracked_records():
    tp = TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAA", 0)
    buffer = ShareBuffer()
    batch = buffer.add(1, 1, tp, [(0, 9, 1)], _records(10), sent_at=0.0, now=1.0)
    assert batch is not None and len(batch.records) == 10
    assert not any(map(gc.is_tracked, batch.records))
    taken = [(b.deadline or 0.0, b.records) for b in buffer.take_batches(10, 2.0)]
    consumer = ShareConsumer.__new__(ShareConsumer)
    consumer._key_fn = consumer._value_fn = None
    consumer._pending = []
    out = consumer._hand_out(taken)
    assert [r.offset for r in out] == list(range(10))
    assert not any(map(gc.is_tracked, out))


def test_records_of_a_value_deserializer_giving_containers_stay_tracked():
    tp = TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAA", 0)
    buffer = ShareBuffer()
    buffer.add(1, 1, tp, [(0, 1, 1)], _records(2), sent_at=0.0, now=1.0)
    taken = [(b.deadline or 0.0, b.records) for b in buffer.take_batches(10, 2.0)]
    consumer = ShareConsumer.__new__(ShareConsumer)
    consumer._key_fn = None
    # a dict of plain values is untracked itself, but may hold more (a cycle) later: its record stays tracked
    consumer._value_fn = lambda topic, headers, value: {"v": value}
    consumer._pending = []
    out = consumer._hand_out(taken)
    assert [r.value for r in out] == [{"v": b"v"}, {"v": b"v"}]
    assert all(map(gc.is_tracked, out))
