"""The records poll() hands out, built from the buffer's held records (ShareConsumer._records_of): the decoder's
record fields as they are, then the delivery count and the lock deadline in seconds. The shortcut for a batch of
one delivery count (no Python step per record) gives what the per-record path gives."""

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from fsm_consumer.managers._share_batch import ShareRecord as Held
from fsm_consumer.managers._share_session import TopicIdPartition
from fsm_consumer.share import ShareRecord
from fsm_consumer.share._consumer import ShareConsumer
from fsm_consumer.structs import ConsumerRecord

TP = TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAA", 3)


def _held(offset: int, count: int) -> Held:
    record = ConsumerRecord("t", 3, 0, offset, 1000 + offset, 0, None, b"v%d" % offset, (), None, -1, 2, -1)
    return Held(TP, offset, count, record)


def _hand_out(taken):
    consumer = SimpleNamespace(_key_fn=None, _value_fn=None, _pending=[])
    return ShareConsumer._records_of(consumer, taken)  # type: ignore[arg-type]


def _expected(taken):
    return [
        ShareRecord(*h.record, delivery_count=h.delivery_count, lock_deadline=deadline / 1000.0)
        for deadline, held in taken
        for h in held
    ]


@given(st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=12), min_size=1, max_size=4))
def test_hand_out_equals_the_record_by_record_answer(batches):
    taken, offset = [], 0
    for i, counts in enumerate(batches):
        held = [_held(offset + k, c) for k, c in enumerate(counts)]
        offset += len(counts)
        taken.append((5000.0 + i, held))
    got = _hand_out(taken)
    assert got == _expected(taken)
    assert all(type(r) is ShareRecord for r in got)
    assert [r.offset for r in got] == list(range(offset))


def test_one_delivery_count_per_batch_keeps_each_batch_its_own_lock():
    taken = [(2000.0, [_held(0, 2), _held(1, 2)]), (3500.0, [_held(2, 1)])]
    got = _hand_out(taken)
    assert [(r.offset, r.delivery_count, r.lock_deadline) for r in got] == [(0, 2, 2.0), (1, 2, 2.0), (2, 1, 3.5)]
    assert got[0].value == b"v0" and got[0].topic == "t" and got[0].partition == 3
