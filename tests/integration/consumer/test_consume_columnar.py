"""Consumer.poll_batch: Arrow columns from the embedded broker, positions as with poll(), and the
two mixed (every record exactly once, in order per partition)."""

from __future__ import annotations

import time

import pytest

from fsm_consumer.fetch import TopicPartition

pa = pytest.importorskip("pyarrow")

pytestmark = pytest.mark.integration


def _batches(consumer, count, timeout=10.0, max_records=None):
    """poll_batch until ``count`` rows came (or the deadline)."""
    out, rows = [], 0
    deadline = time.monotonic() + timeout
    while rows < count and time.monotonic() < deadline:
        b = consumer.poll_batch(timeout_ms=100, max_records=max_records)
        assert max_records is None or b.num_rows <= max_records
        if b.num_rows:
            out.append(b)
            rows += b.num_rows
    return out


def _rows(batches):
    return [r for b in batches for r in b.to_pylist()]


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_poll_batch_columns_and_positions(make_topic, produce, make_consumer, compression):
    topic = make_topic(partitions=2)
    produce(
        topic,
        30,
        partition=0,
        key=lambda i: None if i % 3 else b"k%d" % i,
        value=lambda i: None if i == 7 else b"v%d" % i,
        headers=[("h", b"x"), ("n", b"")],
        compression=compression,
    )
    produce(topic, 10, partition=1, compression=compression)
    consumer = make_consumer()
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer.assign(tps)
    batches = _batches(consumer, 40, max_records=7)
    rows = _rows(batches)
    assert batches[0].schema.field("topic").type == pa.dictionary(pa.int32(), pa.string())
    assert [b.schema for b in batches] == [batches[0].schema] * len(batches)
    p0 = [r for r in rows if r["partition"] == 0]
    p1 = [r for r in rows if r["partition"] == 1]
    assert {r["topic"] for r in rows} == {topic}
    assert [r["offset"] for r in p0] == list(range(30)) and [r["offset"] for r in p1] == list(range(10))
    assert [r["key"] for r in p0] == [None if i % 3 else b"k%d" % i for i in range(30)]
    assert [r["value"] for r in p0] == [None if i == 7 else b"v%d" % i for i in range(30)]
    assert p0[0]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": b""}]
    assert p1[0]["headers"] == [] and p1[3]["value"] == b"value-3"
    assert all(r["timestamp"] is not None for r in rows)
    assert consumer.position(tps[0]) == 30 and consumer.position(tps[1]) == 10
    assert consumer.poll_batch(timeout_ms=200).num_rows == 0


def test_positions_advance_exactly_like_poll(make_topic, produce, make_consumer):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    produce(topic, 25, partition=0)
    a, b = make_consumer(), make_consumer()
    a.assign([tp])
    b.assign([tp])
    for n in (1, 4, 9, 11):
        batch = _batches(a, n, max_records=n)
        records = []
        deadline = time.monotonic() + 10
        while len(records) < n and time.monotonic() < deadline:
            records += b.poll(timeout_ms=100, max_records=n - len(records)).get(tp, [])
        assert [r["offset"] for r in _rows(batch)] == [r.offset for r in records]
        assert a.position(tp) == b.position(tp) == records[-1].offset + 1
    a.seek(tp, 3)
    assert [r["offset"] for r in _rows(_batches(a, 2, max_records=2))] == [3, 4]
    assert a.position(tp) == 5


def test_mixing_poll_and_poll_batch_returns_every_record_once(make_topic, produce, make_consumer):
    topic = make_topic(partitions=3)
    for p in range(3):
        produce(topic, 200, partition=p, compression="lz4" if p == 1 else None)
    consumer = make_consumer()
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + 20
    turn = 0
    while len(seen) < 600 and time.monotonic() < deadline:
        turn += 1
        if turn % 2:
            b = consumer.poll_batch(timeout_ms=100, max_records=37)
            seen += list(zip(b.column("partition").to_pylist(), b.column("offset").to_pylist(), strict=False))
        else:
            for tp, records in consumer.poll(timeout_ms=100, max_records=23).items():
                seen += [(tp.partition, r.offset) for r in records]
    assert sorted(seen) == [(p, o) for p in range(3) for o in range(200)]  # each once
    for p in range(3):
        assert [o for q, o in seen if q == p] == list(range(200))  # in order per partition
    assert consumer.poll_batch(timeout_ms=200).num_rows == 0 and consumer.poll(timeout_ms=100) == {}


def test_paused_and_unassigned_data_is_dropped(make_topic, produce, make_consumer):
    topic = make_topic(partitions=2)
    produce(topic, 50, partition=0)
    produce(topic, 50, partition=1)
    consumer = make_consumer()
    t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer.assign([t0, t1])
    first = _batches(consumer, 1, max_records=1)
    done = first[0].column("partition")[0].as_py()
    other = TopicPartition(topic, 1 - done)
    consumer.pause(TopicPartition(topic, done))
    rows = _rows(_batches(consumer, 50))
    assert {r["partition"] for r in rows} == {other.partition}
    consumer.assign([other])
    consumer.seek(other, 0)
    again = _rows(_batches(consumer, 50))
    assert [r["offset"] for r in again] == list(range(50)) and {r["partition"] for r in again} == {other.partition}


def test_poll_batch_refuses_deserializers(make_consumer):
    consumer = make_consumer(value_deserializer=bytes.decode)
    with pytest.raises(ValueError, match="deserializer"):
        consumer.poll_batch()


def test_without_pyarrow_the_error_names_the_extra(make_consumer, monkeypatch):
    consumer = make_consumer()
    monkeypatch.setitem(__import__("sys").modules, "pyarrow", None)  # import pyarrow now fails
    with pytest.raises(ImportError, match=r"pip install fsm_consumer\[spark\]"):
        consumer.poll_batch()
