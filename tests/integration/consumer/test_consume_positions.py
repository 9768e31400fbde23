"""Positions: poll advances them, seek / seek_to_beginning / seek_to_end move them, pause and
resume hold them; beginning/end offsets, offsets_for_times, auto_offset_reset, topic metadata.

Where exact end offsets matter, records are produced one batch each on Tansu (``send(..., each=True)``):
Tansu 0.6 answers ListOffsets latest (and the high watermark) with the last batch's base offset
+ 1, which is short of the log end for a multi-record batch. On Apache Kafka they share batches and
the same exact offsets are asserted."""

from __future__ import annotations

import time

import pytest

from fsm_consumer.errors import NoOffsetForPartitionError
from fsm_consumer.fetch import TopicPartition

pytestmark = pytest.mark.integration


def _values(records):
    return [r.value for r in records]


def _fill(send, topic, count, partition=0, *, each=True, start=0, ts=None):
    records = [{"partition": partition, "value": b"v%d" % (start + i)} for i in range(count)]
    if ts is not None:
        for rec, t in zip(records, ts, strict=False):
            rec["timestamp"] = t
    return send(topic, records, each=each)


def test_position_follows_poll_and_seek(make_topic, send, make_consumer, collect):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    _fill(send, topic, 20, each=False)
    consumer = make_consumer()
    consumer.assign([tp])
    assert consumer.position(tp) == 0  # earliest, resolved by a ListOffsets
    first = collect(consumer, 5, max_records=5)
    assert [r.offset for r in first] == [0, 1, 2, 3, 4]
    assert consumer.position(tp) == first[-1].offset + 1
    more = collect(consumer, 3, max_records=3)
    assert [r.offset for r in more] == [5, 6, 7]
    assert consumer.position(tp) == 8

    consumer.seek(tp, 15)
    assert consumer.position(tp) == 15
    after_seek = collect(consumer, 5, settle_ms=200)
    assert [r.offset for r in after_seek] == [15, 16, 17, 18, 19]
    assert _values(after_seek) == [b"v15", b"v16", b"v17", b"v18", b"v19"]
    assert consumer.position(tp) == 20

    consumer.seek(tp, 3)  # backwards, behind data already handed out
    assert [r.offset for r in collect(consumer, 4, max_records=4)] == [3, 4, 5, 6]
    consumer.seek_to_beginning(tp)
    assert consumer.position(tp) == 0
    assert [r.offset for r in collect(consumer, 2, max_records=2)] == [0, 1]


def test_seek_to_end_and_beginning_with_exact_offsets(make_topic, send, make_consumer, collect, exact_batches):
    topic = make_topic(partitions=2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    _fill(send, topic, 7, partition=0, each=not exact_batches)
    _fill(send, topic, 4, partition=1, each=not exact_batches)
    consumer = make_consumer()
    consumer.assign(tps)
    assert consumer.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
    assert consumer.end_offsets(tps) == {tps[0]: 7, tps[1]: 4}

    consumer.seek_to_end()  # no argument: every assigned partition
    assert consumer.position(tps[0]) == 7
    assert consumer.position(tps[1]) == 4
    assert collect(consumer, 1, timeout=0.5) == []
    _fill(send, topic, 2, partition=1, start=100, each=not exact_batches)
    got = collect(consumer, 2, settle_ms=200)
    assert [(r.partition, r.offset, r.value) for r in got] == [(1, 4, b"v100"), (1, 5, b"v101")]
    assert consumer.end_offsets([tps[1]]) == {tps[1]: 6}

    consumer.seek_to_beginning(tps[0])
    assert consumer.position(tps[0]) == 0
    assert consumer.position(tps[1]) == 6
    got = collect(consumer, 7, settle_ms=200)
    assert [(r.partition, r.offset) for r in got] == [(0, i) for i in range(7)]


def test_pause_and_resume(make_topic, send, make_consumer, collect):
    topic = make_topic(partitions=2)
    a, b = TopicPartition(topic, 0), TopicPartition(topic, 1)
    _fill(send, topic, 30, partition=0, each=False)
    _fill(send, topic, 30, partition=1, each=False)
    consumer = make_consumer(max_poll_records=4)
    consumer.assign([a, b])
    # wait until both partitions' data is buffered, then take a few records only
    deadline = time.monotonic() + 10
    while (
        consumer.metrics_flat()["fetch-buffer-bytes-peak"] == 0
        or len(consumer._buffer) + (consumer._collector._current is not None) < 2
    ):
        assert time.monotonic() < deadline, "the fetches never reached the buffer"
        time.sleep(0.01)
    first = collect(consumer, 1, max_records=1)
    assert len(first) == 1
    handed = {a: [], b: []}
    for r in first:
        handed[TopicPartition(r.topic, r.partition)].append(r.offset)
    paused_tp, flowing_tp = (a, b) if first[0].partition == 0 else (b, a)
    paused_at = consumer.position(paused_tp)
    assert paused_at == 1

    consumer.pause(paused_tp)
    assert consumer.paused() == {paused_tp}
    # data of the paused partition already buffered is not returned; the other partition flows
    got = collect(consumer, 30, settle_ms=300)
    assert {r.partition for r in got} == {flowing_tp.partition}
    assert [r.offset for r in got] == list(range(30))
    assert consumer.position(paused_tp) == paused_at
    _fill(send, topic, 5, partition=paused_tp.partition, start=30, each=False)
    assert collect(consumer, 1, timeout=0.5) == []

    consumer.resume(paused_tp)
    assert consumer.paused() == set()
    resumed = collect(consumer, 34, settle_ms=300)
    # continues where it stopped: no gap, no duplicate
    assert [r.offset for r in resumed] == list(range(paused_at, 35))
    assert {r.partition for r in resumed} == {paused_tp.partition}
    assert _values(resumed)[-1] == b"v34"


def test_offsets_for_times(make_topic, send, make_consumer, collect):
    """Tansu 0.6 looks timestamps up by the time it appended each batch, not by the records' own
    (CreateTime) timestamps, and answers with that time (confluent-kafka sees the same). So the
    records here carry the producer's clock (no explicit timestamp), one batch each, 40 ms apart:
    record k's timestamp then lies after record k-1 was appended and at or before k was."""
    topic = make_topic(partitions=2)
    tp, other = TopicPartition(topic, 0), TopicPartition(topic, 1)
    for i in range(5):
        _fill(send, topic, 1, start=i)
        time.sleep(0.04)
    consumer = make_consumer()
    consumer.assign([tp])
    stamps = [r.timestamp for r in collect(consumer, 5)]
    assert len(stamps) == 5 and stamps == sorted(stamps)

    found = consumer.offsets_for_times({tp: stamps[0] - 60_000})  # before the first record
    assert found[tp].offset == 0 and found[tp].timestamp >= stamps[0]
    found = consumer.offsets_for_times({tp: stamps[2]})  # exactly a record's timestamp
    assert found[tp].offset == 2 and found[tp].timestamp >= stamps[2]
    found = consumer.offsets_for_times({tp: stamps[3] - 15})  # between two records: the later one
    assert found[tp].offset == 3 and stamps[3] - 15 <= found[tp].timestamp < stamps[4]
    # past the last record, and a partition with no record at all: None
    found = consumer.offsets_for_times({tp: stamps[-1] + 60_000, other: 0})
    assert found == {tp: None, other: None}
    with pytest.raises(ValueError):
        consumer.offsets_for_times({tp: -5})


@pytest.mark.brokers("kafka")
def test_offsets_for_times_by_the_records_own_timestamps(make_topic, send, make_consumer):
    """Apache Kafka looks up the records' own (CreateTime) timestamps, also inside one batch, which
    Tansu 0.6 cannot (see above)."""
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    base = int(time.time() * 1000) - 3_600_000
    _fill(send, topic, 5, each=False, ts=[base + 1000 * i for i in range(5)])  # one batch
    consumer = make_consumer()
    found = consumer.offsets_for_times({tp: base - 1})
    assert (found[tp].offset, found[tp].timestamp) == (0, base)
    found = consumer.offsets_for_times({tp: base + 2000})  # exactly record 2's
    assert (found[tp].offset, found[tp].timestamp) == (2, base + 2000)
    found = consumer.offsets_for_times({tp: base + 2500})  # between records 2 and 3: the later one
    assert (found[tp].offset, found[tp].timestamp) == (3, base + 3000)
    assert consumer.offsets_for_times({tp: base + 4001}) == {tp: None}


@pytest.mark.parametrize("policy", ["earliest", "latest"])
def test_auto_offset_reset(policy, make_topic, send, make_consumer, collect):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    _fill(send, topic, 3)
    consumer = make_consumer(auto_offset_reset=policy)
    consumer.assign([tp])
    assert consumer.position(tp) == (0 if policy == "earliest" else 3)
    _fill(send, topic, 2, start=3)
    got = collect(consumer, 5 if policy == "earliest" else 2, settle_ms=200)
    assert _values(got) == ([b"v0", b"v1", b"v2", b"v3", b"v4"] if policy == "earliest" else [b"v3", b"v4"])


def test_auto_offset_reset_none(make_topic, send, make_consumer, collect):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    _fill(send, topic, 3)
    consumer = make_consumer(auto_offset_reset="none")
    consumer.assign([tp])
    with pytest.raises(NoOffsetForPartitionError) as caught:
        consumer.poll(timeout_ms=2000)
    assert caught.value.partitions == {tp}
    with pytest.raises(NoOffsetForPartitionError):  # still no offset: raised again
        consumer.position(tp, timeout_ms=2000)
    with pytest.raises(NoOffsetForPartitionError):
        consumer.poll(timeout_ms=2000)
    consumer.seek(tp, 1)  # an explicit position ends it
    assert _values(collect(consumer, 2, settle_ms=100)) == [b"v1", b"v2"]


def test_topics_and_partitions_for_topic(make_topic, make_consumer):
    one, three = make_topic(partitions=1), make_topic(partitions=3)
    consumer = make_consumer(allow_auto_create_topics=False)
    assert consumer.partitions_for_topic(three) == {0, 1, 2}
    assert consumer.partitions_for_topic(one) == {0}
    assert consumer.partitions_for_topic("no-such-topic-anywhere") == set()
    topics = consumer.topics()
    assert {one, three} <= topics
    assert "no-such-topic-anywhere" not in topics
