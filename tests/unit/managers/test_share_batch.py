"""Acquired batches of a share group (specs/share_batch.yaml) in the ShareBuffer, sans-IO: the acquisition lock as a
deadline counted from the ShareFetch's sending, hand-out only within it, acknowledgements recorded, coalesced into
Kafka's AcknowledgementBatch form (as Java's Acknowledgements), sent, answered, renewed, or failed when lost."""

from __future__ import annotations

import kafka.errors as ke
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm_consumer.managers._share_batch import AckType, ShareBatch
from fsm_consumer.managers._share_buffer import AckBatch, ShareBuffer, _optimise, _single_typed, ack_batches
from fsm_consumer.managers._share_session import TopicIdPartition

TP, TQ = TopicIdPartition("t-id", 0), TopicIdPartition("t-id", 1)
LOCK = 30_000
ACCEPT, RELEASE, REJECT, RENEW, GAP = (
    int(t) for t in (AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.RENEW, AckType.GAP)
)


class Rec:
    """A decoded record as the wiring layer's decoder gives it."""

    def __init__(self, offset):
        self.offset = offset


def acquired(
    buffer, first, last, *, sent_at=0.0, now=None, tp=TP, records=None, delivery_count=1, node=1, generation=1
):
    """One answer's acquired records first..last of ``tp`` (every offset a record unless ``records`` says)."""
    records = list(range(first, last + 1)) if records is None else records
    return buffer.add(
        node,
        generation,
        tp,
        [(first, last, delivery_count)],
        records,
        sent_at=sent_at,
        now=sent_at + 5 if now is None else now,
        lock_ms=LOCK,
    )


def handed_and_acked(buffer, now, ack=ACCEPT):
    for r in buffer.take(500, now):
        buffer.acknowledge(r.partition, r.offset, ack, now)


# -- Kafka's AcknowledgementBatch form (Java's AcknowledgementsTest cases) ---------------------------------


def test_one_type_over_contiguous_offsets_is_one_range_with_one_type():
    assert ack_batches({0: ACCEPT}) == [AckBatch(0, 0, (ACCEPT,))]
    assert ack_batches(dict.fromkeys(range(5), ACCEPT)) == [AckBatch(0, 4, (ACCEPT,))]
    assert ack_batches({}) == []


@given(
    first=st.integers(0, 2**40),
    count=st.integers(1, 700),
    kind=st.sampled_from([ACCEPT, RELEASE, REJECT, RENEW, GAP]),
)
def test_the_shortcut_for_one_type_over_contiguous_offsets_gives_what_javas_steps_give(first, count, kind):
    acks = dict.fromkeys(range(first, first + count), kind)
    assert ack_batches(acks) == _single_typed(_optimise(first, [kind] * count))


def test_offsets_apart_make_separate_ranges():
    assert ack_batches({0: ACCEPT, 1: ACCEPT, 5: REJECT, 6: REJECT, 9: RELEASE}) == [
        AckBatch(0, 1, (ACCEPT,)),
        AckBatch(5, 6, (REJECT,)),
        AckBatch(9, 9, (RELEASE,)),
    ]


def test_a_short_mixed_run_carries_one_type_per_offset():
    assert ack_batches({0: ACCEPT, 1: RELEASE, 2: ACCEPT, 3: GAP}) == [AckBatch(0, 3, (ACCEPT, RELEASE, ACCEPT, GAP))]


def test_a_run_of_more_than_ten_of_one_type_becomes_its_own_range():
    acks = dict.fromkeys(range(12), ACCEPT) | dict.fromkeys(range(12, 23), REJECT)
    assert ack_batches(acks) == [AckBatch(0, 11, (ACCEPT,)), AckBatch(12, 22, (REJECT,))]


def test_gaps_coalesce_like_any_type():
    assert ack_batches(dict.fromkeys(range(12), GAP)) == [AckBatch(0, 11, (GAP,))]


def test_optimised_batches_as_java():
    acks = dict.fromkeys(range(10), ACCEPT) | {10: REJECT, 11: ACCEPT, 12: RELEASE, 13: GAP}
    acks |= dict.fromkeys(range(14, 25), ACCEPT) | {25: REJECT, 26: RELEASE}
    got = ack_batches(acks)
    assert [(b.first_offset, b.last_offset, len(b.acknowledge_types)) for b in got] == [
        (0, 13, 14),
        (14, 24, 1),
        (25, 26, 2),
    ]
    assert got[0].acknowledge_types == (ACCEPT,) * 10 + (REJECT, ACCEPT, RELEASE, GAP)


# -- the lock ------------------------------------------------------------------------------------------------


def test_the_lock_counts_from_the_sending_not_the_answer():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 2, sent_at=1_000, now=9_000)  # answered 8 s after it was sent
    assert batch.deadline == 1_000 + LOCK
    assert [r.offset for r in buffer.take(10, 1_000 + LOCK - 1)] == [0, 1, 2]


def test_no_record_is_handed_out_once_its_lock_ran_out():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 4, sent_at=0, now=100)
    assert buffer.take(10, LOCK) == []  # deadline: sent_at + lock, whatever the answer's arrival
    assert batch.state == "lost" and batch.machine.attribute("hand_out") == "refused"
    assert batch.lost_why == "the acquisition lock ran out" and batch.machine.log[-1].trigger == "lock_expired"


def test_an_answer_read_after_the_lock_ran_out_hands_out_nothing():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 1, sent_at=0, now=LOCK + 1)
    assert batch.state == "lost" and buffer.take(10, LOCK + 1) == []


def test_the_lock_duration_is_the_answers_or_the_default():
    b = ShareBatch(1, 1, TP, [], [7], lock_from=100, lock_ms=None)
    assert b.deadline == 100 + 30_000
    b = ShareBatch(1, 1, TP, [], [7], lock_from=100, lock_ms=45_000)
    assert b.deadline == 100 + 45_000


# -- hand-out and acknowledgement ----------------------------------------------------------------------------


def test_records_are_handed_out_in_arrival_order_with_their_delivery_count():
    buffer = ShareBuffer()
    acquired(buffer, 5, 6, tp=TQ, delivery_count=3, records=[Rec(5), Rec(6)])
    acquired(buffer, 0, 1, tp=TP)
    got = buffer.take(10, 10)
    assert [(r.partition, r.offset, r.delivery_count) for r in got] == [(TQ, 5, 3), (TQ, 6, 3), (TP, 0, 1), (TP, 1, 1)]
    assert isinstance(got[0].record, Rec) and got[2].record is None


def test_records_outside_the_acquired_ranges_are_skipped_and_acquired_offsets_without_one_are_gaps():
    buffer = ShareBuffer()
    batch = buffer.add(1, 1, TP, [(10, 14, 1)], [8, 9, 10, 12, 14], sent_at=0, now=1, lock_ms=LOCK)
    assert batch.offsets == [10, 12, 14] and batch.gaps == [11, 13]
    handed_and_acked(buffer, 2)
    buffer.take_acks(3)
    assert buffer.pending_acks(1) == {TP: (AckBatch(10, 14, (ACCEPT, GAP, ACCEPT, GAP, ACCEPT)),)}


def test_a_batch_of_gaps_only_is_acknowledged_as_gaps_at_once():
    buffer = ShareBuffer()
    batch = buffer.add(1, 1, TP, [(3, 4, 1)], [], sent_at=0, now=1, lock_ms=LOCK)
    assert batch.state == "marked"
    buffer.take_acks(2)
    assert buffer.pending_acks(1) == {TP: (AckBatch(3, 4, (GAP,)),)}


def test_a_batch_handed_out_in_part_is_split_under_the_same_lock():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 4, sent_at=200)
    first = buffer.take(2, 300)
    assert [r.offset for r in first] == [0, 1] and batch.offsets == [0, 1] and batch.state == "handed_out"
    rest = buffer.batches()[1]
    assert rest.offsets == [2, 3, 4] and rest.state == "buffered" and rest.deadline == batch.deadline == 200 + LOCK
    assert [r.offset for r in buffer.take(2, 400)] == [2, 3]
    assert [r.offset for r in buffer.take(2, 500)] == [4]


def test_acknowledging_all_then_taking_queues_the_acks_for_the_sessions_leader():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 2)
    records = buffer.take(10, 10)
    assert batch.machine.attribute("acknowledge") == "recorded"
    buffer.acknowledge(TP, 0, ACCEPT, 11)
    assert batch.state == "handed_out"  # not all acknowledged yet
    buffer.acknowledge(TP, 1, REJECT, 12)
    buffer.acknowledge(TP, 2, ACCEPT, 13)
    assert batch.state == "marked"
    buffer.acknowledge(TP, 1, RELEASE, 14)  # changed its mind before the acks were taken: the last one counts
    assert batch.state == "marked" and len(records) == 3
    assert buffer.pending_acks(1) == {}  # not taken yet
    assert buffer.take_acks(15) == 1 and batch.state == "ack_queued"
    assert buffer.pending_acks(1) == {TP: (AckBatch(0, 2, (ACCEPT, RELEASE, ACCEPT)),)} and buffer.pending_acks(2) == {}
    with pytest.raises(ke.IllegalStateError):
        buffer.acknowledge(TP, 0, ACCEPT, 16)  # taken already


def test_a_record_not_handed_out_cannot_be_acknowledged():
    buffer = ShareBuffer()
    acquired(buffer, 0, 2)
    with pytest.raises(ke.IllegalStateError):
        buffer.acknowledge(TP, 1, ACCEPT, 5)
    with pytest.raises(ke.IllegalStateError):
        buffer.acknowledge(TP, 99, ACCEPT, 5)


def test_acknowledge_all_fills_in_only_what_is_missing():
    buffer = ShareBuffer()
    acquired(buffer, 0, 3)
    buffer.take(10, 1)
    buffer.acknowledge(TP, 1, REJECT, 2)
    buffer.acknowledge_all(ACCEPT, 3)
    buffer.take_acks(4)
    assert buffer.pending_acks(1) == {TP: (AckBatch(0, 3, (ACCEPT, REJECT, ACCEPT, ACCEPT)),)}


def test_sent_acks_are_settled_by_the_answer_with_each_outcome():
    buffer = ShareBuffer()
    a = acquired(buffer, 0, 1, tp=TP)
    b = acquired(buffer, 0, 0, tp=TQ)
    handed_and_acked(buffer, 10)
    buffer.take_acks(11)
    sent = buffer.acks_sent(1, 12)
    assert {x.state for x in sent} == {"ack_in_flight"} and buffer.pending_acks(1) == {}
    buffer.acks_answered(sent, {TP: 0, TQ: 121}, 13)  # INVALID_RECORD_STATE for TQ
    assert a.state == b.state == "settled"
    outcomes = buffer.drain_outcomes()
    assert [(o.partition, o.acks, o.ok, o.error_code) for o in outcomes] == [
        (TP, ((0, ACCEPT), (1, ACCEPT)), True, 0),
        (TQ, ((0, ACCEPT),), False, 121),
    ]
    buffer.tick(14)
    assert len(buffer) == 0  # settled batches are let go


def test_acks_not_answered_or_retriable_go_again():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 0)
    handed_and_acked(buffer, 1)
    buffer.take_acks(2)
    sent = buffer.acks_sent(1, 3)
    buffer.acks_answered(sent, {}, 4)  # the partition is not in the answer: not processed
    assert batch.state == "ack_queued" and buffer.pending_acks(1) == {TP: (AckBatch(0, 0, (ACCEPT,)),)}
    sent = buffer.acks_sent(1, 5)
    buffer.acks_answered(sent, {TP: 7}, 6, retry=lambda code: code == 7)
    assert batch.state == "ack_queued"
    sent = buffer.acks_sent(1, 7)
    buffer.acks_not_processed(sent, "top-level error 15", 8)
    assert batch.state == "ack_queued" and buffer.drain_outcomes() == []


# -- lost: late acknowledgements fail, never succeed ------------------------------------------------------------


def test_an_acknowledgement_after_the_lock_ran_out_is_reported_failed_and_never_sent():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 1, sent_at=0)
    buffer.take(10, 100)
    buffer.tick(LOCK)  # the application took too long
    assert batch.state == "lost" and batch.machine.attribute("acknowledge") == "failed"
    assert buffer.acknowledge(TP, 0, ACCEPT, LOCK + 1) is False
    buffer.acknowledge_all(ACCEPT, LOCK + 2)
    outcomes = buffer.drain_outcomes()
    assert [(o.acks, o.ok, o.reason) for o in outcomes] == [
        (((0, ACCEPT),), False, "the acquisition lock ran out"),
        (((1, ACCEPT),), False, "the acquisition lock ran out"),
    ]
    assert buffer.take_acks(LOCK + 3) == 0 and buffer.pending_acks(1) == {} and len(buffer) == 0


def test_acks_sent_before_the_lock_ran_out_are_the_brokers_to_judge():
    """Sent before the deadline, answered after it: the broker refuses what reaches it after the lock, so its
    answer decides (an accept it applied is done, as Java reports it); not processed, they may not go again."""

    def sent_then_lock_ran_out():
        buffer = ShareBuffer()
        batch = acquired(buffer, 0, 1, sent_at=0)
        handed_and_acked(buffer, 100)
        buffer.take_acks(200)
        sent = buffer.acks_sent(1, LOCK - 10)
        buffer.tick(LOCK)
        return buffer, batch, sent

    for code, ok in ((0, True), (121, False)):  # INVALID_RECORD_STATE: it reached the broker after the lock
        buffer, batch, sent = sent_then_lock_ran_out()
        assert batch.state == "ack_in_flight_late" and buffer.drain_outcomes() == []
        assert buffer.take(10, LOCK) == []  # nothing of it is handed out
        buffer.acks_answered(sent, {TP: code}, LOCK + 5)
        assert batch.state == "settled"
        assert [(o.acks, o.ok) for o in buffer.drain_outcomes()] == [(((0, ACCEPT), (1, ACCEPT)), ok)]
    for answer in ({}, {TP: 6}):  # not processed; NOT_LEADER_OR_FOLLOWER (retriable): not to go again
        buffer, batch, sent = sent_then_lock_ran_out()
        buffer.acks_answered(sent, answer, LOCK + 5, retry=lambda code: code == 6)
        assert batch.state == "lost" and buffer.pending_acks(1) == {}
        assert [(o.acks, o.ok) for o in buffer.drain_outcomes()] == [(((0, ACCEPT), (1, ACCEPT)), False)]


def test_acks_sent_after_the_session_ended_are_failed_whatever_the_answer_says():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 1, sent_at=0, generation=4)
    handed_and_acked(buffer, 100)
    buffer.take_acks(200)
    sent = buffer.acks_sent(1, 300)
    buffer.lose(1, 4, "SHARE_SESSION_NOT_FOUND", 310)
    assert [(o.acks, o.ok) for o in buffer.drain_outcomes()] == [(((0, ACCEPT), (1, ACCEPT)), False)]
    buffer.acks_answered(sent, {TP: 0}, 320)  # whatever it says: the broker released them with the session
    assert batch.state == "lost" and buffer.drain_outcomes() == []


@pytest.mark.parametrize("state", ["buffered", "handed_out", "marked", "ack_queued", "ack_in_flight", "late"])
def test_a_session_that_ends_loses_its_batches_in_every_live_state(state):
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 0, generation=4)
    other = acquired(buffer, 0, 0, tp=TQ, generation=5, sent_at=10)  # acquired under a later session: kept
    steps = ["buffered", "handed_out", "marked", "ack_queued", "ack_in_flight", "late"]
    for step in steps[1 : steps.index(state) + 1]:
        {
            "handed_out": lambda: buffer.take(1, 10),
            "marked": lambda: buffer.acknowledge(TP, 0, REJECT, 11),
            "ack_queued": lambda: buffer.take_acks(12),
            "ack_in_flight": lambda: buffer.acks_sent(1, 13),
            "late": lambda: buffer.tick(LOCK),  # the lock ran out with the acknowledgements in flight
        }[step]()
    assert batch.state == {"late": "ack_in_flight_late"}.get(state, state)
    assert buffer.lose(1, 4, "SHARE_SESSION_NOT_FOUND", 20) == [batch]
    assert batch.state == "lost" and other.state != "lost"
    assert batch.lost_why == "its share session ended: SHARE_SESSION_NOT_FOUND"
    outcomes = buffer.drain_outcomes()
    assert all(not o.ok for o in outcomes) and (outcomes != []) == (state not in ("buffered", "handed_out"))
    assert buffer.lose(1, 4, "again", 21) == []


# -- RENEW (Kafka 4.2, KIP-1222) ---------------------------------------------------------------------------------


def test_renew_comes_back_to_be_handed_out_again_under_a_fresh_lock():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 2, sent_at=0)
    buffer.take(10, 100)
    buffer.acknowledge(TP, 0, ACCEPT, 101)
    buffer.acknowledge(TP, 1, RENEW, 102)
    buffer.acknowledge(TP, 2, RENEW, 103)
    buffer.take_acks(104)
    assert buffer.renew_pending(1)
    assert buffer.pending_acks(1) == {TP: (AckBatch(0, 2, (ACCEPT, RENEW, RENEW)),)}
    sent = buffer.acks_sent(1, 20_000)
    assert batch.state == "renewing" and batch.machine.attribute("hand_out") == "refused"
    assert buffer.take(10, 20_001) == []  # the renewed records wait for the answer
    buffer.acks_answered(sent, {TP: 0}, 20_050)
    assert batch.state == "buffered" and batch.offsets == [1, 2]
    assert batch.deadline == 20_000 + LOCK  # from the renewal's sending
    assert [(o.acks, o.ok) for o in buffer.drain_outcomes()] == [(((0, ACCEPT),), True)]
    assert [r.offset for r in buffer.take(10, LOCK + 1)] == [1, 2]  # past the first lock, within the new one
    buffer.acknowledge(TP, 1, ACCEPT, LOCK + 2)
    buffer.acknowledge(TP, 2, ACCEPT, LOCK + 3)
    buffer.take_acks(LOCK + 4)
    assert buffer.pending_acks(1) == {TP: (AckBatch(1, 2, (ACCEPT,)),)} and not buffer.renew_pending(1)


def test_a_refused_renewal_loses_the_batch():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 0)
    buffer.take(1, 1)
    buffer.acknowledge(TP, 0, RENEW, 2)
    buffer.take_acks(3)
    sent = buffer.acks_sent(1, 4)
    buffer.acks_answered(sent, {TP: 121}, 5)
    assert batch.state == "lost" and batch.lost_why == "the renewal was refused (error 121)"
    assert [o.ok for o in buffer.drain_outcomes()] == [False]


def test_a_renewal_the_broker_did_not_process_is_given_up():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 0)
    buffer.take(1, 1)
    buffer.acknowledge(TP, 0, RENEW, 2)
    buffer.take_acks(3)
    buffer.acks_not_processed(buffer.acks_sent(1, 4), "top-level error 15", 5)
    assert batch.state == "lost" and "not processed" in batch.lost_why


def test_the_old_lock_running_out_before_the_renewal_answer_loses_it():
    buffer = ShareBuffer()
    batch = acquired(buffer, 0, 0, sent_at=0)
    buffer.take(1, 1)
    buffer.acknowledge(TP, 0, RENEW, 2)
    buffer.take_acks(3)
    sent = buffer.acks_sent(1, LOCK - 5)
    buffer.tick(LOCK)
    assert batch.state == "lost"
    buffer.acks_answered(sent, {TP: 0}, LOCK + 1)
    assert batch.state == "lost"
