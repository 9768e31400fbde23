"""ShareFetchManager (KIP-932) driven by hand, sans-IO: plain-data intents out of poll(now), plain-data answers in.

No broker: the assignment and the leaders are callables; the records are plain offsets (the wiring layer's
decoder gives records with an .offset)."""

from __future__ import annotations

import kafka.errors as ke
import pytest

from fsm_consumer.managers._share_batch import AckType
from fsm_consumer.managers._share_buffer import AckBatch
from fsm_consumer.managers._share_fetch import (
    MAX_SCALE,
    ShareAcknowledgeIntent,
    ShareFetchAnswer,
    ShareFetchIntent,
    ShareFetchManager,
    SharePartitionAnswer,
)
from fsm_consumer.managers._share_session import (
    INVALID_SHARE_SESSION_EPOCH,
    SHARE_SESSION_LIMIT_REACHED,
    SHARE_SESSION_NOT_FOUND,
    TopicIdPartition,
)

A0, A1, B0 = TopicIdPartition("a", 0), TopicIdPartition("a", 1), TopicIdPartition("b", 0)
LEADERS = {A0: 1, A1: 2, B0: 1}
ACCEPT, RELEASE, RENEW = int(AckType.ACCEPT), int(AckType.RELEASE), int(AckType.RENEW)
LOCK = 30_000


def manager(assigned=(A0, A1, B0), leaders=None, adaptive=False, **config):
    """A fetch manager; ``adaptive`` off (the default here): Java's one fetch per poll, nothing fetched ahead."""
    state = {"assigned": list(assigned), "leaders": dict(LEADERS if leaders is None else leaders)}
    settings = {"max_poll_records": 100, "fetch_max_wait_ms": 250, "request_timeout_ms": 1_000, **config}
    fm = ShareFetchManager(
        assignment=lambda: state["assigned"],
        leader_of=lambda tp: state["leaders"].get(tp),
        config=settings,
        member_id="AAECAwQFBgcICQoLDA0ODw",
    )
    fm.adaptive = adaptive
    return fm, state


def part(tp, first=None, last=None, *, ack_error=0, error=0, delivery=1, leader=None):
    acquired = () if first is None else ((first, last, delivery),)
    records = [] if first is None else list(range(first, last + 1))
    return SharePartitionAnswer(tp.topic_id, tp.partition, error, ack_error, records, acquired, leader)


def by_node(intents):
    return {i.node: i for i in intents}


def open_sessions(fm, now=0.0):
    """Both leaders' sessions opened by a first ShareFetch answered with nothing."""
    fm.want_records()
    for intent in fm.poll(now):
        fm.on_fetch_answer(intent.node, ShareFetchAnswer(), now, now + 1)


def test_the_opening_fetch_lists_every_partition_of_its_leader_and_no_ack():
    fm, _ = manager()
    assert fm.poll(0) == []  # nothing asked for yet (Java's fetchMoreRecords)
    fm.want_records()
    intents = by_node(fm.poll(0))
    assert set(intents) == {1, 2}
    one = intents[1]
    assert isinstance(one, ShareFetchIntent)
    assert (one.epoch, one.topics_to_add, one.forgotten, one.acks) == (0, (A0, B0), (), {})
    assert (one.member_id, one.max_wait_ms, one.max_records, one.batch_size) == (
        "AAECAwQFBgcICQoLDA0ODw",
        250,
        100,
        100,
    )
    assert intents[2].topics_to_add == (A1,)
    assert fm.poll(1) == []  # one request per leader in flight


def test_a_partition_without_a_known_leader_is_skipped_and_the_metadata_asked():
    fm, state = manager(leaders={A0: 1})
    fm.want_records()
    intents = fm.poll(0)
    assert [i.topics_to_add for i in intents] == [(A0,)] and fm.metadata_wanted


def test_acquired_records_go_to_the_buffer_under_a_lock_from_the_sending():
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    [intent] = fm.poll(1_000)
    answer = ShareFetchAnswer(partitions=(part(A0, 0, 2, delivery=2),), acquisition_lock_timeout_ms=45_000)
    assert fm.on_fetch_answer(1, answer, 1_000, 3_000) == []
    [batch] = fm.buffer.batches()
    assert batch.deadline == 1_000 + 45_000 and fm.lock_ms == 45_000
    assert [(r.offset, r.delivery_count) for r in fm.buffer.take(10, 3_000)] == [(0, 2), (1, 2), (2, 2)]
    assert not fm.fetch_more  # records came: fetched again when the application asks
    assert fm.session(1).epoch == 1 and fm.poll(3_001) == []


def test_fetch_ahead_sends_one_fetch_per_leader_with_the_acks_due_and_no_more():
    fm, _ = manager(assigned=[A0, A1], adaptive=True)
    open_sessions(fm)
    fm.fetch_more = False  # records came: the application works on them
    assert fm.poll(2) == []
    fm.fetch_ahead(3)
    intents = by_node(fm.poll(3))
    assert set(intents) == {1, 2} and all(isinstance(i, ShareFetchIntent) for i in intents.values())
    fm.on_fetch_answer(1, ShareFetchAnswer(), 3, 4)
    assert fm.pacing.state == "paused"  # the share-partitions' locks are held elsewhere, or nothing is left
    fm.on_fetch_answer(2, ShareFetchAnswer(), 3, 4)  # paused already: ignored
    assert fm.poll(5) == []  # a member busy with its records does not fetch again
    fm.fetch_ahead(6)  # the next poll's records handed out: none goes ahead until records come
    assert fm.poll(6) == []
    fm.want_records()  # a poll found nothing: it waits for records
    assert set(by_node(fm.poll(6))) == {1, 2}
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 1),)), 6, 7)
    assert fm.poll(8) == []  # node 2's answer is still awaited; node 1 fetched its one
    assert fm.pacing.state == "retrying"  # records came: one more try
    for r in fm.buffer.take(10, 9):
        fm.buffer.acknowledge(r.partition, r.offset, ACCEPT, 9)
    fm.buffer.take_acks(9)
    fm.fetch_ahead(10)
    [piggy] = fm.poll(10)
    assert isinstance(piggy, ShareFetchIntent) and piggy.acks == {A0: (AckBatch(0, 1, (ACCEPT,)),)}


def test_records_the_application_waited_for_are_fetched_ahead_by_the_poll_that_hands_them_out():
    fm, _ = manager(assigned=[A0], adaptive=True)
    fm.want_records()
    [first] = fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 2),)), 0, 1)
    # not at once: the application's poll sends it, with the acknowledgements of what it was handed before
    assert fm.poll(2) == []
    fm.buffer.take(100, 2)
    fm.fetch_ahead(2)
    [ahead] = fm.poll(2)  # the application works on what came; the next fetch is on its way meanwhile
    assert isinstance(ahead, ShareFetchIntent) and ahead.max_records == 100
    # the application waited for the first (the broker may hold it); nobody waits for one made ahead
    assert (first.max_wait_ms, ahead.max_wait_ms) == (250, 0)
    fm.on_fetch_answer(1, ShareFetchAnswer(), 2, 3)
    assert fm.poll(4) == []  # nothing came: a member working on its records does not fetch again


def test_a_fetch_made_ahead_waits_half_the_applications_time_between_polls_when_it_works_longer_than_the_floor():
    fm, _ = manager(assigned=[A0], adaptive=True)
    assert fm.pacing.durations["ahead_wait_floor"] == 5  # the spec's default
    waits = []
    for handed, back in [(10, 11), (20, 23), (30, 35), (40, 46), (50, 90), (100, 2_000), (2_000, 2_000)]:
        fm.want_records()
        [waited] = fm.poll(handed - 2)
        fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, handed, handed),)), handed - 2, handed - 1)
        fm.buffer.take(100, handed)
        fm.fetch_ahead(handed)  # the poll that handed the record out
        [ahead] = fm.poll(handed)
        waits.append(ahead.max_wait_ms)
        fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, handed + 1, handed + 1),)), handed, handed + 1)
        fm.buffer.take(100, handed + 1)
        fm.poll_started(back)  # the application's next poll
        assert waited.max_wait_ms == 250  # the application waits for this one: fetch_max_wait_ms as configured
    # the first is sent before any time between polls is known; then 1, 3 and 5 ms (at most the floor): none; 6
    # ms: 3; 40: 20; past twice fetch_max_wait_ms: fetch_max_wait_ms
    assert waits == [0, 0, 0, 0, 3, 20, 250]


def _fetch_ahead_answered(fm, now, answer):
    """The application takes what is buffered, its poll fetches ahead, and the broker answers with ``answer``."""
    fm.buffer.take(1_000, now)
    fm.fetch_ahead(now)
    [ahead] = fm.poll(now)
    assert ahead.max_wait_ms == 0
    fm.on_fetch_answer(1, answer, now, now + 1)
    return ahead


def _waited_answered(fm, now, answer):
    fm.want_records()
    [waited] = fm.poll(now)
    assert waited.max_wait_ms == 250
    fm.on_fetch_answer(1, answer, now, now + 1)
    return waited


def test_one_empty_fetch_made_ahead_pauses_fetching_ahead_until_records_come_then_it_tries_again():
    fm, _ = manager(assigned=[A0], adaptive=True)
    _waited_answered(fm, 0, ShareFetchAnswer(partitions=(part(A0, 0, 99),)))
    _fetch_ahead_answered(fm, 2, ShareFetchAnswer())  # chance: another member's fetch held the partition
    assert fm.pacing.state == "paused"
    fm.fetch_ahead(4)
    assert fm.poll(4) == []  # none goes ahead
    _waited_answered(fm, 5, ShareFetchAnswer(partitions=(part(A0, 100, 199),)))
    assert fm.pacing.state == "retrying"
    _fetch_ahead_answered(fm, 7, ShareFetchAnswer(partitions=(part(A0, 200, 299),)))
    assert fm.pacing.state == "fetching_ahead"


def test_two_empty_fetches_made_ahead_in_a_row_fetch_on_demand_one_poll_at_a_time_until_the_partition_runs_dry():
    fm, _ = manager(assigned=[A0], adaptive=True)
    _waited_answered(fm, 0, ShareFetchAnswer(partitions=(part(A0, 0, 99),)))
    fm.app_waited()
    assert fm.scale == 2
    ahead = _fetch_ahead_answered(fm, 2, ShareFetchAnswer())  # the window is full: other members hold the locks
    assert ahead.max_records == 200 and fm.pacing.state == "paused"
    _waited_answered(fm, 4, ShareFetchAnswer(partitions=(part(A0, 100, 199),)))
    _fetch_ahead_answered(fm, 6, ShareFetchAnswer())  # empty again
    assert (fm.pacing.state, fm.scale) == ("on_demand", 1)
    fm.app_waited()
    assert fm.scale == 1  # one poll's worth, as Java, while the locks are contended
    fm.fetch_ahead(8)
    assert fm.poll(8) == []
    waited = _waited_answered(fm, 9, ShareFetchAnswer(partitions=(part(A0, 200, 299),)))
    assert waited.max_records == 100 and fm.pacing.state == "on_demand"
    fm.buffer.take(100, 11)
    _waited_answered(fm, 12, ShareFetchAnswer())  # waited fetch_max_wait_ms for nothing: ran dry
    assert fm.pacing.state == "fetching_ahead"


def test_an_application_that_outruns_the_network_gets_larger_fetches_and_a_slow_one_smaller():
    fm, _ = manager(assigned=[A0], adaptive=True)
    fm.want_records()
    [intent] = fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 99),)), 0, 1)  # all it asked for
    fm.app_waited()  # the next poll found nothing ready: the broker had more, the application wanted it
    assert fm.scale == 2 and fm.fetch_records == 200
    fm.app_waited()
    assert fm.scale == MAX_SCALE == 2  # twice a poll's worth at most (the broker's record locks)
    fm.fetch_ahead(2)  # the poll that hands the first out
    [ahead] = fm.poll(2)
    assert ahead.max_records == ahead.batch_size == 200
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 100, 299),)), 2, 3)  # ahead of need: 300 ready
    assert fm.scale == 1
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 300, 310),)), 4, 5)  # not in flight: dropped
    fm.fetch_ahead(6)
    [ahead] = fm.poll(6)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 300, 310),)), 6, 7)  # less than it asked for
    fm.app_waited()
    assert fm.scale == 1  # the broker had no more to give: a larger fetch would not have helped


def test_record_limit_never_scales_its_fetches():
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    [intent] = fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 99),)), 0, 1)
    fm.app_waited()
    assert fm.scale == 1 and fm.fetch_records == 100


def test_later_fetches_carry_only_what_changed_and_the_acks_piggybacked():
    fm, state = manager()
    fm.want_records()
    for intent in fm.poll(0):
        parts = (part(A0, 0, 1),) if intent.node == 1 else ()
        fm.on_fetch_answer(intent.node, ShareFetchAnswer(partitions=parts), 0, 1)
    for r in fm.buffer.take(10, 2):
        fm.buffer.acknowledge(r.partition, r.offset, ACCEPT if r.offset == 0 else RELEASE, 3)
    fm.buffer.take_acks(4)
    state["assigned"] = [A0, A1]  # B0 taken away
    fm.want_records()
    intents = by_node(fm.poll(5))
    one = intents[1]
    assert isinstance(one, ShareFetchIntent)
    assert (one.epoch, one.topics_to_add, one.forgotten) == (1, (), (B0,))
    assert one.acks == {A0: (AckBatch(0, 1, (ACCEPT, RELEASE)),)}
    assert intents[2].epoch == 1 and intents[2].acks == {}
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, ack_error=0),)), 5, 6)
    assert [(o.acks, o.ok) for o in fm.buffer.drain_outcomes()] == [(((0, ACCEPT), (1, RELEASE)), True)]
    assert fm.session(1).epoch == 2


def test_acks_with_no_fetch_due_go_at_once_in_a_share_acknowledge():
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    [intent] = fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 3),)), 0, 1)
    fm.buffer.take(2, 2)  # half handed out, the rest still buffered: no fetch wanted
    fm.buffer.acknowledge(A0, 0, ACCEPT, 3)
    fm.buffer.acknowledge(A0, 1, ACCEPT, 3)
    fm.buffer.take_acks(4)
    [ack] = fm.poll(5)
    assert isinstance(ack, ShareAcknowledgeIntent)
    assert (ack.epoch, ack.acks, ack.is_renew_ack) == (1, {A0: (AckBatch(0, 1, (ACCEPT,)),)}, False)
    assert fm.session(1).partitions == {A0: None}  # a ShareAcknowledge changes no partition of the session
    fm.on_acknowledge_answer(1, ShareFetchAnswer(partitions=(part(A0),)), 5, 6)
    assert [o.ok for o in fm.buffer.drain_outcomes()] == [True] and fm.session(1).epoch == 2


def test_a_renew_goes_in_a_share_acknowledge_and_the_records_come_back():
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 1),)), 0, 1)
    fm.buffer.take(10, 2)
    fm.buffer.acknowledge(A0, 0, RENEW, 3)
    fm.buffer.acknowledge(A0, 1, ACCEPT, 3)
    fm.buffer.take_acks(4)
    fm.want_records()
    [renew] = fm.poll(10_000)
    assert isinstance(renew, ShareAcknowledgeIntent) and renew.is_renew_ack
    assert renew.acks == {A0: (AckBatch(0, 1, (RENEW, ACCEPT)),)}
    fm.on_acknowledge_answer(
        1, ShareFetchAnswer(partitions=(part(A0),), acquisition_lock_timeout_ms=LOCK), 10_000, 10_020
    )
    [batch] = fm.buffer.batches()
    assert batch.deadline == 10_000 + LOCK and [r.offset for r in fm.buffer.take(10, LOCK + 5)] == [0]


@pytest.mark.parametrize("code", [SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED])
def test_a_session_error_loses_what_the_session_acquired_and_opens_a_new_one(code):
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 1),)), 0, 1)
    fm.buffer.take(10, 2)
    fm.buffer.acknowledge(A0, 0, ACCEPT, 3)
    fm.buffer.acknowledge(A0, 1, ACCEPT, 3)
    fm.buffer.take_acks(4)
    fm.want_records()
    [sent] = fm.poll(5)
    assert sent.acks  # the acks went with the fetch
    lost = fm.on_fetch_answer(1, ShareFetchAnswer(error=code), 5, 6)
    assert [b.state for b in lost] == ["lost"] and fm.session(1).epoch == 0
    assert [(o.ok, o.reason) for o in fm.buffer.drain_outcomes()] == [(False, lost[0].lost_why)]
    if code == SHARE_SESSION_LIMIT_REACHED:
        assert fm.poll(6) == [] and fm.session(1).state == "backoff"
        fm.tick(fm.session(1).machine.next_deadline)
    [again] = fm.poll(2_000)
    assert (again.epoch, again.topics_to_add, again.acks) == (0, (A0,), {})


def test_a_disconnect_loses_what_the_session_acquired():
    fm, _ = manager(assigned=[A0])
    open_sessions(fm)
    fm.want_records()
    fm.poll(2)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 4),)), 2, 3)
    assert fm.poll(4) == []  # records buffered: nothing fetched until the application asks again
    lost = fm.on_ended(1, "connection to node 1 lost", 5)
    assert [b.offsets for b in lost] == [[0, 1, 2, 3, 4]] and fm.buffer.take(10, 6) == []
    assert fm.session(1).state == "closed" and fm.session(1).ended_why == "connection to node 1 lost"
    fm.want_records()
    [opening] = fm.poll(7)
    fm.on_ended(1, "connection to node 1 lost again", 8)  # with the opening in flight: it gets no answer
    [again] = fm.poll(9)
    assert (opening.epoch, again.epoch, fm.session(1).generation) == (0, 0, 3)


def test_a_request_that_fails_ends_the_session_and_reports_the_acks_in_flight_failed():
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 0),)), 0, 1)
    fm.buffer.take(1, 2)
    fm.buffer.acknowledge(A0, 0, ACCEPT, 2)
    fm.buffer.take_acks(3)
    [ack] = fm.poll(4)
    lost = fm.on_failure(1, "request timed out", 1_004)
    assert len(lost) == 1 and not fm.in_flight(1)
    assert [(o.ok, o.reason) for o in fm.buffer.drain_outcomes()] == [
        (False, "its share session ended: request timed out")
    ]


def test_a_top_level_error_keeps_the_session_and_sends_the_acks_again():
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 0),)), 0, 1)
    fm.buffer.take(1, 2)
    fm.buffer.acknowledge(A0, 0, ACCEPT, 2)
    fm.buffer.take_acks(3)
    fm.want_records()
    [first] = fm.poll(4)
    assert fm.on_fetch_answer(1, ShareFetchAnswer(error=100), 4, 5) == []  # UNKNOWN_TOPIC_ID
    assert fm.metadata_wanted and fm.session(1).epoch == 2  # moved on, as Java
    [again] = fm.poll(6)
    assert again.epoch == 2 and again.acks == first.acks


def test_share_acknowledge_partition_errors_retriable_resent_a_leader_change_failed():
    fm, _ = manager(assigned=[A0, B0])
    fm.want_records()
    fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 0), part(B0, 5, 5))), 0, 1)
    for r in fm.buffer.take(10, 2):
        fm.buffer.acknowledge(r.partition, r.offset, ACCEPT, 2)
    fm.buffer.take_acks(3)
    [ack] = fm.poll(4)
    answer = ShareFetchAnswer(partitions=(part(A0, error=7), part(B0, error=6, leader=(2, 9))))  # timed out; moved
    fm.on_acknowledge_answer(1, answer, 4, 5)
    assert [(o.partition, o.ok, o.error_code) for o in fm.buffer.drain_outcomes()] == [(B0, False, 6)]
    [again] = fm.poll(6)
    assert again.acks == {A0: (AckBatch(0, 0, (ACCEPT,)),)}


def test_a_partition_error_in_a_fetch_answer_asks_the_metadata_and_notes_the_new_leader():
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, error=6, leader=(2, 7)),)), 0, 1)
    assert fm.metadata_wanted and fm.leader_hints == {A0: (2, 7)}
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, error=29),)), 0, 1)  # TOPIC_AUTHORIZATION_FAILED
    assert isinstance(fm.errors[0], ke.TopicAuthorizationFailedError)


def test_a_broker_without_share_groups_is_named():
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    fm.poll(0)
    fm.on_fetch_answer(1, ShareFetchAnswer(error=35), 0, 1)
    [error] = fm.errors
    assert isinstance(error, ke.UnsupportedVersionError)
    assert "does not support share groups (KIP-932): Apache Kafka 4.2+ with share groups enabled" in str(error)
    assert fm.session(1).state == "backoff"  # the opening was refused: nothing opened
    fm.tick(fm.session(1).machine.next_deadline)
    [again] = fm.poll(2_000)
    assert again.epoch == 0
    fm.on_fetch_answer(1, ShareFetchAnswer(error=35), 2_000, 2_001)
    assert fm.errors == [error]  # held once, not once per attempt


def test_close_sends_the_last_acks_at_epoch_minus_one_and_releases_the_rest():
    fm, _ = manager()
    fm.want_records()
    for intent in fm.poll(0):
        parts = (part(A0, 0, 3),) if intent.node == 1 else ()
        fm.on_fetch_answer(intent.node, ShareFetchAnswer(partitions=parts), 0, 1)
    fm.buffer.take(2, 2)
    fm.buffer.acknowledge(A0, 0, ACCEPT, 3)
    fm.buffer.acknowledge(A0, 1, RELEASE, 3)  # marked, not taken yet: close() takes them
    intents = by_node(fm.close(4))
    assert all(isinstance(i, ShareAcknowledgeIntent) and i.epoch == -1 for i in intents.values())
    assert intents[1].acks == {A0: (AckBatch(0, 1, (ACCEPT, RELEASE)),)} and intents[2].acks == {}
    assert not fm.all_closed
    fm.on_acknowledge_answer(1, ShareFetchAnswer(partitions=(part(A0),)), 4, 5)
    lost = fm.on_acknowledge_answer(2, ShareFetchAnswer(), 4, 5)
    assert fm.all_closed and lost == []
    outcomes = fm.buffer.drain_outcomes()
    assert [(o.acks, o.ok) for o in outcomes] == [(((0, ACCEPT), (1, RELEASE)), True)]
    fm.buffer.tick(6)
    assert [(b.offsets, b.state) for b in fm.buffer.batches()] == [([2, 3], "lost")]  # released with the session
    fm.want_records()
    assert fm.poll(6) == []


def test_close_with_a_fetch_in_flight_closes_after_its_answer():
    fm, _ = manager(assigned=[A0])
    fm.want_records()
    fm.poll(0)
    assert fm.close(1) == []
    assert fm.session(1).state == "in_flight_then_close"
    fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 0),)), 0, 2)
    [close] = fm.poll(3)
    assert isinstance(close, ShareAcknowledgeIntent) and close.epoch == -1
    fm.on_acknowledge_answer(1, ShareFetchAnswer(), 3, 4)
    assert fm.all_closed and fm.buffer.take(10, 5) == []


def test_an_answer_matching_nothing_in_flight_is_dropped():
    fm, _ = manager(assigned=[A0])
    assert fm.on_fetch_answer(1, ShareFetchAnswer(partitions=(part(A0, 0, 0),)), 0, 1) == []
    assert fm.buffer.batches() == []
