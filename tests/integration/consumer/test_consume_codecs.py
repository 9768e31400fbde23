"""Record batches in every codec come back whole: each record once, in order per partition, with
its key, value, timestamp and headers (duplicate keys and None values kept), keys None, 1 MiB values."""

from __future__ import annotations

import os

import pytest

from fsm_consumer.fetch import TopicPartition

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


def _record(i: int, partitions: int) -> dict:
    headers = [("h", f"first-{i}".encode()), ("h", f"second-{i}".encode()), ("empty", None)] if i % 2 else []
    return {
        "partition": i % partitions,
        "key": None if i % 5 == 0 else f"key-{i}".encode(),
        "value": f"value-{i}-".encode() * (1 + i % 7),
        "headers": headers,
        "timestamp": BASE_TS + i * 10,
    }


@pytest.mark.parametrize("codec", CODECS)
def test_every_record_once_in_order_with_its_fields(codec, make_topic, send, make_consumer, collect):
    partitions, count = 3, 600
    topic = make_topic(partitions=partitions)
    wanted = [_record(i, partitions) for i in range(count)]
    delivered = send(topic, wanted, config={"compression.type": codec, "linger.ms": 20})
    by_position = {pos: rec for pos, rec in zip(delivered, wanted, strict=False)}
    assert len(by_position) == count

    consumer = make_consumer(max_poll_records=97)  # odd: batches are split across polls
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    got = collect(consumer, count, settle_ms=300)

    positions = [(r.partition, r.offset) for r in got]
    assert len(positions) == len(set(positions)) == count  # once each, nothing extra
    assert set(positions) == set(by_position)
    for p in range(partitions):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(len(offsets)))  # in order, no gap
    for r in got:
        want = by_position[(r.partition, r.offset)]
        assert r.topic == topic
        assert r.key == want["key"]
        assert r.value == want["value"]
        assert r.timestamp == want["timestamp"]
        assert r.timestamp_type == 0  # CreateTime
        assert list(r.headers) == want["headers"]  # order and duplicates kept
        assert r.serialized_key_size == (-1 if want["key"] is None else len(want["key"]))
    for p in range(partitions):
        assert consumer.position(TopicPartition(topic, p)) == count // partitions


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_one_mib_values(codec, make_topic, send, make_consumer, collect):
    size = 1024 * 1024
    topic = make_topic(partitions=1, config={"max.message.bytes": str(8 * size)})  # Kafka's default: 1 MB
    # random bytes do not compress: the batch stays > 1 MiB in either codec
    values = [os.urandom(size) for _ in range(4)]
    send(
        topic,
        [{"value": v, "key": b"big-%d" % i} for i, v in enumerate(values)],
        config={"compression.type": codec, "message.max.bytes": 8 * size, "batch.size": 8 * size},
    )
    consumer = make_consumer()
    consumer.assign([TopicPartition(topic, 0)])
    got = collect(consumer, len(values), settle_ms=200)
    assert [r.offset for r in got] == [0, 1, 2, 3]
    assert [r.value for r in got] == values
    assert [r.key for r in got] == [b"big-0", b"big-1", b"big-2", b"big-3"]
    assert all(r.serialized_value_size == size for r in got)
