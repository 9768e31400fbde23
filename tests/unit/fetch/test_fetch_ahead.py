"""A partition's fetch state (specs/fetch.yaml) driven through the FetchManager and the FetchCollector, sans-IO:
what each Fetch lists and from where, with and without ``fetch_ahead``, and what a seek, a pause, a failed
request or a caught-up partition do to data fetched ahead. Real batches go in, records come out."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kafka.protocol.consumer import FetchResponse

from fsm_consumer._config import ConsumerConfig
from fsm_consumer._metrics import Metrics
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.fetch._buffer import FetchBuffer
from fsm_consumer.fetch._collector import FetchCollector
from fsm_consumer.fetch.testing import batch, legacy_batch
from fsm_consumer.machines import FakeClock
from fsm_consumer.managers._fetch import FetchManager
from fsm_consumer.managers._log_end import fetched_end
from fsm_consumer.state import HeldErrors, SubscriptionState

from .test_collector_races import T0, T1, Metadata  # one broker (node 1) leads every partition


class Rig:
    """One broker (node 1) holding ``log_end`` records per partition, a consumer's fetch sender and collector."""

    def __init__(self, *, ahead: bool, partitions=(T0,), log_end: int = 1_000, per_fetch: int = 10) -> None:
        self.config = ConsumerConfig.from_kwargs(
            bootstrap_servers="127.0.0.1:1", enable_incremental_fetch_sessions=False, fetch_ahead=ahead
        )
        self.subs = SubscriptionState(fetch_ahead=ahead)
        self.subs.assign(list(partitions))
        for tp in partitions:
            self.subs.seek(tp, 0)
        self.buffer = FetchBuffer(self.config.fetch_buffer_max_bytes, lambda: None)
        self.manager = FetchManager(self.config, self.subs, Metadata(), self.buffer, HeldErrors(), Metrics())
        self.collector = FetchCollector(self.config, self.subs, self.buffer, lambda: None, Metrics(), FakeClock(1.0))
        self.log_end, self.per_fetch = log_end, per_fetch

    def send(self):
        """The one Fetch the sender sends now (None: nothing), as {partition: fetch offset} and the request."""
        _, out = self.manager.poll(1_000.0)
        if not out:
            return None
        (o,) = out
        return o, {TopicPartition(t.topic, p.partition): p.fetch_offset for t in o.request.topics for p in t.partitions}

    def answer(self, sent, *, empty=(), error: bool = False) -> None:
        """The broker's answer: ``per_fetch`` records from each listed offset (none past the log end, none for
        ``empty``), in two batches, the high watermark the log end; ``error``: the request failed."""
        o, listed = sent
        if error:
            o.handler(SimpleNamespace(error=OSError("reset"), response=None), 1_000.0)
            return
        parts = []
        for tp, offset in listed.items():
            n = 0 if tp in empty else max(0, min(self.per_fetch, self.log_end - offset))
            half = n // 2
            records = b""
            if n:
                records = batch([b"%d" % (offset + i) for i in range(half)], base_offset=offset) + batch(
                    [b"%d" % (offset + i) for i in range(half, n)], base_offset=offset + half
                )
            parts.append(
                FetchResponse.FetchableTopicResponse.PartitionData(
                    partition_index=tp.partition,
                    error_code=0,
                    high_watermark=self.log_end,
                    last_stable_offset=self.log_end,
                    log_start_offset=0,
                    records=records,
                )
            )
        response = FetchResponse[12](
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=parts)],
        )
        o.handler(SimpleNamespace(error=None, response=response), 1_000.0)

    def state(self, tp=T0) -> str:
        return self.subs.state(tp).fetching.state

    def values(self, max_records: int = 1_000) -> list[int]:
        return [int(r.value) for records in self.collector.collect(max_records).values() for r in records]


def test_whole_batches_end_where_the_decoder_stops():
    two = batch([b"a", b"b", b"c"], base_offset=10) + batch([b"d", b"e"], base_offset=13)
    assert fetched_end(two, 10) == 15
    assert fetched_end(two[:-1], 10) == 13  # the second batch cut at the fetch size: fetched again
    assert fetched_end(two[:30], 10) == -1  # no whole batch: no Fetch ahead
    assert fetched_end(b"", 4) == -1
    # a compressed batch starts before the fetch offset: the end is never before where the fetch began
    assert fetched_end(batch([b"a"], base_offset=0), 5) == 5
    assert fetched_end(legacy_batch([b"a", b"b", b"c"], magic=1, base_offset=7), 7) == 10
    assert fetched_end(legacy_batch([b"a", b"b"], magic=1, base_offset=2, codec="gzip"), 2) == 4


def test_without_fetch_ahead_a_partition_is_fetched_again_only_once_its_fetch_is_handed_out():
    rig = Rig(ahead=False)
    first = rig.send()
    assert first[1] == {T0: 0} and rig.state() == "in_flight"
    assert rig.send() is None  # one Fetch in flight per broker
    rig.answer(first)
    assert rig.state() == "buffered" and rig.send() is None  # buffered: not fetched again (Java's rule)
    assert rig.values() == list(range(10))
    assert rig.state() == "idle"
    assert rig.send()[1] == {T0: 10}


def test_with_fetch_ahead_the_next_fetch_starts_where_the_buffered_one_ends():
    rig = Rig(ahead=True)
    rig.answer(rig.send())
    ahead = rig.send()
    assert ahead[1] == {T0: 10} and rig.state() == "ahead_in_flight"  # from the buffered fetch's end
    rig.answer(ahead)
    assert rig.state() == "ahead_buffered" and rig.send() is None  # two buffered: nothing more
    assert rig.values(5) == list(range(5))  # part of the first fetch: still two buffered
    assert rig.state() == "ahead_buffered"
    assert rig.values(10) == list(range(5, 15))  # the first used up, the second begun
    assert rig.state() == "buffered"
    assert rig.send()[1] == {T0: 20}  # ahead again, from the second fetch's end
    assert rig.state() == "ahead_in_flight"
    assert rig.values() == list(range(15, 20))
    assert rig.state() == "in_flight"


def test_every_record_once_and_in_order_when_fetching_ahead_to_the_end_of_the_log():
    rig = Rig(ahead=True, partitions=(T0, T1), log_end=95, per_fetch=10)
    got: dict = {T0: [], T1: []}
    for _ in range(200):
        sent = rig.send()
        if sent is not None:
            rig.answer(sent)
        for tp, records in rig.collector.collect(7).items():
            got[tp].extend(int(r.value) for r in records)
        if all(len(v) == 95 for v in got.values()):
            break
    assert got == {T0: list(range(95)), T1: list(range(95))}
    assert rig.collector.stale_fetches == 0


def test_a_caught_up_partition_is_not_fetched_ahead():
    rig = Rig(ahead=True, log_end=10)  # the first fetch reaches the high watermark
    rig.answer(rig.send())
    assert rig.state() == "buffered" and rig.send() is None  # a Fetch from there would wait on the broker
    assert rig.values() == list(range(10))
    assert rig.send()[1] == {T0: 10}  # from the position, once handed out (a long poll, as always)


def test_a_seek_drops_what_was_fetched_ahead_and_fetches_from_the_new_position():
    rig = Rig(ahead=True)
    rig.answer(rig.send())
    ahead = rig.send()
    rig.answer(ahead)
    assert rig.state() == "ahead_buffered"
    rig.subs.seek(T0, 500)
    assert rig.state() == "idle"
    assert rig.send()[1] == {T0: 500}
    assert rig.values() == []  # both buffered fetches belong to the old epoch
    assert rig.collector.stale_fetches == 2
    assert rig.state() == "in_flight"  # the old data's release fired nothing


def test_a_pause_while_a_fetch_ahead_is_in_flight_drops_its_answer():
    rig = Rig(ahead=True)
    rig.answer(rig.send())
    ahead = rig.send()
    rig.subs.set_paused([T0], True)
    rig.answer(ahead)  # under the old epoch: fires nothing
    assert rig.state() == "idle" and rig.send() is None  # paused: nothing is fetched
    rig.subs.set_paused([T0], False)
    assert rig.values() == [] and rig.send()[1] == {T0: 0}


def test_a_fetch_ahead_that_brings_nothing_or_fails_leaves_the_buffered_fetch():
    rig = Rig(ahead=True)
    rig.answer(rig.send())
    rig.answer(rig.send(), empty={T0})  # nothing new (or an error for the partition)
    assert rig.state() == "buffered"
    rig.answer(rig.send(), error=True)  # the request failed
    assert rig.state() == "buffered"
    assert rig.values() == list(range(10))
    assert rig.state() == "idle"


def test_records_lent_without_moving_the_position_are_handed_out_again_before_the_fetch_ahead():
    """poll(update_offsets=False) lends records without moving the position: the next poll hands them out
    again from the position, and the fetch ahead follows on where they end, nothing dropped."""
    rig = Rig(ahead=True)
    rig.answer(rig.send())
    rig.answer(rig.send())
    lent = rig.collector.collect(100, advance=False)
    assert [int(r.value) for r in lent[T0]] == list(range(10))  # the first fetch, lent
    assert rig.values(10) == list(range(10))  # handed out again from the position, now moving it
    assert rig.values(10) == list(range(10, 20))
    assert rig.collector.stale_fetches == 0


@pytest.mark.parametrize("ahead", [False, True])
def test_an_unanswered_partition_is_fetched_again(ahead):
    rig = Rig(ahead=ahead, partitions=(T0, T1))
    rig.answer(rig.send(), empty={T1})
    assert rig.state(T1) == "idle" and rig.state(T0) == "buffered"
    assert rig.send()[1] == ({T1: 0, T0: 10} if ahead else {T1: 0})


class _SoughtWhileSending(SubscriptionState):
    """The application seeks ``tp`` just after the fetch sender read what to fetch (``fetchable``) and before
    it marks the Fetch sent: the worst moment for the seek."""

    def __init__(self, tp, offset: int) -> None:
        super().__init__()
        self.seek_at = (tp, offset)

    def caught_up_and_buffered(self):
        if self.seek_at is not None:
            tp, offset = self.seek_at
            self.seek_at = None
            self.seek(tp, offset)
        return super().caught_up_and_buffered()


def test_a_seek_while_a_fetch_is_being_sent_leaves_the_partition_fetchable():
    """The Fetch went out from the old position under the old epoch: its answer is dropped, and the partition
    is fetched from the sought offset (it used to stay marked in flight under the new epoch for good)."""
    rig = Rig(ahead=False)
    rig.subs = subs = _SoughtWhileSending(T0, 500)
    subs.assign([T0])
    subs.seek(T0, 0)
    rig.manager = FetchManager(rig.config, subs, Metadata(), rig.buffer, HeldErrors(), Metrics())
    rig.collector = FetchCollector(rig.config, subs, rig.buffer, lambda: None, Metrics(), FakeClock(1.0))
    first = rig.send()
    assert first[1] == {T0: 0}  # read before the seek
    assert rig.state() == "idle"  # the seek came first: not marked in flight under the new epoch
    rig.answer(first)
    assert rig.values() == [] and rig.collector.stale_fetches == 1  # the old epoch's data dropped
    assert rig.send()[1] == {T0: 500}


def test_a_position_past_the_log_end_asks_metadata_whether_the_topic_was_created_again():
    """Tansu answers a fetch past the log end with nothing and no error (never OFFSET_OUT_OF_RANGE): a topic
    deleted and created again under its name looked like a log with nothing new, for ever. Such an answer asks
    Metadata for the topic (its id tells a new topic; the positions are then reset by policy), once a second."""
    rig = Rig(ahead=False, log_end=10)
    asked = []
    rig.manager._metadata = SimpleNamespace(
        leader=lambda tp: 1,
        leader_epoch=lambda tp: -1,
        refreshed_at=0.0,
        request_update=lambda topics=None: asked.append(set(topics or ())),
    )
    rig.subs.seek(T0, 30)  # the old topic's position; the new log ends at 10
    rig.answer(rig.send(), empty={T0})
    assert asked == [{"t"}]
    rig.manager._metadata.refreshed_at = 900.0  # refreshed 100 ms before the next answer
    rig.answer(rig.send(), empty={T0})
    assert asked == [{"t"}]  # not again within the second
    rig.subs.seek(T0, 10)  # at the log end: nothing new, nothing to ask
    rig.manager._metadata.refreshed_at = 0.0
    rig.answer(rig.send(), empty={T0})
    assert asked == [{"t"}]
