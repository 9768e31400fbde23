"""ShareBuffer.acknowledge_many: explicit mode's acknowledgements given together (gathered on the application
thread until its next poll or commit) leave every batch as acknowledging each record in turn leaves it; those of a
lost batch, or of records no batch holds, are reported failed and never sent; taken ones are refused."""

from __future__ import annotations

import kafka.errors as ke
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm_consumer.managers._share_buffer import ShareBuffer
from fsm_consumer.managers._share_session import TopicIdPartition

from .test_share_batch import ACCEPT, LOCK, REJECT, RELEASE, RENEW, TP, TQ, acquired

KINDS = st.sampled_from([ACCEPT, RELEASE, REJECT, RENEW])


def _two_batches(buffer: ShareBuffer) -> None:
    acquired(buffer, 0, 4)
    acquired(buffer, 5, 9, records=[5, 6, 8, 9])  # 7 a gap
    acquired(buffer, 0, 3, tp=TQ)
    buffer.take(100, 10)


@given(st.dictionaries(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 8, 9]), KINDS, min_size=1))
def test_given_together_they_leave_the_batches_as_one_by_one(acks):
    one_by_one, together = ShareBuffer(), ShareBuffer()
    _two_batches(one_by_one)
    _two_batches(together)
    for offset, kind in acks.items():
        one_by_one.acknowledge(TP, offset, kind, 11)
    together.acknowledge_many(TP, acks, 11)
    assert [(b.state, b.acks) for b in together.batches()] == [(b.state, b.acks) for b in one_by_one.batches()]
    assert together.take_acks(12) == one_by_one.take_acks(12)
    assert together.pending_acks(1) == one_by_one.pending_acks(1)


def test_each_batch_is_marked_once_all_its_records_are_acknowledged():
    buffer = ShareBuffer()
    _two_batches(buffer)
    buffer.acknowledge_many(TP, dict.fromkeys([0, 1, 2, 3, 4, 5], ACCEPT), 11)
    first, second, other = buffer.batches()
    assert (first.state, second.state, other.state) == ("marked", "handed_out", "handed_out")
    buffer.acknowledge_many(TP, {6: ACCEPT, 8: REJECT, 9: ACCEPT, 0: RELEASE}, 12)  # 0 again: the last type counts
    assert (first.state, second.state) == ("marked", "marked") and first.acks[0] == RELEASE


def test_those_of_a_lost_batch_are_reported_failed_never_sent():
    buffer = ShareBuffer()
    _two_batches(buffer)
    buffer.tick(LOCK)  # the application took too long
    buffer.acknowledge_many(TP, {1: ACCEPT, 0: REJECT}, LOCK + 1)
    outcome = buffer.drain_outcomes()[-1]
    assert outcome.partition == TP and outcome.acks == ((0, REJECT), (1, ACCEPT)) and not outcome.ok
    assert outcome.reason == "the acquisition lock ran out"
    assert buffer.take_acks(LOCK + 2) == 0 and buffer.pending_acks(1) == {}


def test_those_no_batch_holds_are_reported_failed():
    buffer = ShareBuffer()
    _two_batches(buffer)
    elsewhere = TopicIdPartition("t-id", 7)
    buffer.acknowledge_many(elsewhere, {3: ACCEPT, 2: ACCEPT}, 11)
    [outcome] = buffer.drain_outcomes()
    assert outcome.partition == elsewhere and outcome.acks == ((2, ACCEPT), (3, ACCEPT)) and not outcome.ok


def test_once_taken_they_are_refused():
    buffer = ShareBuffer()
    _two_batches(buffer)
    buffer.acknowledge_many(TQ, dict.fromkeys(range(4), ACCEPT), 11)
    assert buffer.take_acks(12) == 1
    with pytest.raises(ke.IllegalStateError):
        buffer.acknowledge_many(TQ, {0: REJECT}, 13)
