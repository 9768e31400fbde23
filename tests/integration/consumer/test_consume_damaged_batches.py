"""Issue 25's corrupt batches, beside test_consume_corrupt.py's CRC case, on both brokers: real data from the
broker damaged in one partition's Fetch records by FaultyTransport.

* codec: a compressed batch whose payload is damaged and whose CRC is made right again (so only the
  decompression can tell): CorruptRecordError for that partition only, nothing of it handed out, and once
  the data is sound it resumes at that batch;
* truncated tail: every answer's records cut in the middle of the last batch (as a size limit does): the
  complete batches are handed out, the cut one fetched again: every record once, in order, no error;
* below the offset asked for: a batch begins before the fetch offset (a seek into the middle of a batch):
  the records below the position are never handed out."""

from __future__ import annotations

import struct
import time

import pytest
from crc32c import crc32c

from fsm_consumer.consumer import Consumer
from fsm_consumer.fetch import CorruptRecordError, TopicPartition
from fsm_consumer.transport import FaultyTransport, KafkaTransport

pytestmark = pytest.mark.integration

PARTITIONS, PER_PARTITION, BAD = 3, 60, 1
_CRC_AT, _CRC_FROM, _HEADER = 17, 21, 61  # record batch v2: crc field, the bytes it covers, header size


def _batches(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each complete v2 batch in records bytes."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + 12 + length
        if end > len(data):
            break
        out.append((pos, end))
        pos = end
    return out


def _damage_payload(data: bytes) -> bytes:
    """Flip a byte in the middle of the first batch's records if it is compressed, then rewrite its CRC."""
    spans = _batches(data)
    if not spans:
        return data
    start, end = spans[0]
    (attributes,) = struct.unpack_from(">h", data, start + _CRC_FROM)
    if not attributes & 0x07:  # uncompressed: another partition's
        return data
    out = bytearray(data)
    at = start + _HEADER + (end - start - _HEADER) // 2
    out[at] ^= 0x5A
    struct.pack_into(">I", out, start + _CRC_AT, crc32c(bytes(out[start + _CRC_FROM : end])))
    return bytes(out)


def _cut_last_batch(data: bytes) -> bytes:
    spans = _batches(data)
    if len(spans) < 2:
        return data  # one batch: a cut would leave nothing complete to make progress with
    start, end = spans[-1]
    return data[: start + (end - start) // 2]


def _produce(send, topic, compressed: str | None = None) -> None:
    """Three batches per partition; partition BAD's compressed with ``compressed``."""
    for chunk in range(3):
        for p in range(PARTITIONS):
            codec = compressed if p == BAD else None
            send(
                topic,
                [{"partition": p, "value": b"p%d-%d" % (p, i)} for i in range(chunk * 20, chunk * 20 + 20)],
                config={"compression.type": codec} if codec else None,
            )


def _poll_all(consumer, got, errors, until, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until():
        try:
            for tp, records in consumer.poll(timeout_ms=100).items():
                got[tp.partition].extend(records)
        except CorruptRecordError as exc:
            errors.append(exc)


def _consumer(broker, transport_rule):
    config = dict(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest", fetch_max_wait_ms=50)
    transport = FaultyTransport(KafkaTransport(config))
    transport_rule(transport)
    return Consumer(transport=transport, **config), transport


def test_a_damaged_compressed_payload_fails_its_partition_only(broker, make_topic, send):
    topic = make_topic(partitions=PARTITIONS)
    _produce(send, topic, "gzip")  # only partition BAD compressed: only its batches are damaged
    consumer, transport = _consumer(
        broker, lambda t: t.corrupt("Fetch", _damage_payload, times=10_000, target="records")
    )
    with consumer:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        got = {p: [] for p in range(PARTITIONS)}
        errors: list[CorruptRecordError] = []
        healthy = [p for p in range(PARTITIONS) if p != BAD]
        _poll_all(consumer, got, errors, lambda: errors and all(len(got[p]) == PER_PARTITION for p in healthy))
        assert errors and {(e.topic, e.partition) for e in errors} == {(topic, BAD)}, errors
        assert all(e.offset == 0 for e in errors)  # the bad batch's base offset: nothing before it lost
        assert got[BAD] == []  # nothing of a batch that does not decompress
        assert "gzip" in str(errors[0]), errors[0]
        for p in healthy:
            assert [r.value for r in got[p]] == [b"p%d-%d" % (p, i) for i in range(PER_PARTITION)]
        transport.clear()
        _poll_all(consumer, got, [], lambda: len(got[BAD]) == PER_PARTITION)
        # sound again: from the bad batch on, no gap, no duplicate
        assert [r.value for r in got[BAD]] == [b"p%d-%d" % (BAD, i) for i in range(PER_PARTITION)]


def test_a_truncated_tail_is_fetched_again(broker, make_topic, send):
    topic = make_topic(partitions=PARTITIONS)
    _produce(send, topic, None)
    consumer, transport = _consumer(
        broker, lambda t: t.corrupt("Fetch", _cut_last_batch, times=10_000, target="records")
    )
    with consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        got = {p: [] for p in range(PARTITIONS)}
        errors: list[CorruptRecordError] = []
        _poll_all(consumer, got, errors, lambda: all(len(got[p]) == PER_PARTITION for p in range(PARTITIONS)))
        assert errors == []  # a cut tail is what a size limit does: not an error
        for p in range(PARTITIONS):
            assert [r.value for r in got[p]] == [b"p%d-%d" % (p, i) for i in range(PER_PARTITION)]
        assert transport.injected["corrupt"] >= 1


def test_records_below_the_offset_asked_for_are_not_handed_out(broker, make_topic, send):
    topic = make_topic(partitions=1)
    send(topic, [{"partition": 0, "value": b"v%d" % i} for i in range(40)])  # one batch (linger 5 ms)
    consumer, _ = _consumer(broker, lambda t: None)
    with consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 17)
        got = {0: []}
        _poll_all(consumer, got, [], lambda: len(got[0]) >= 23)
        assert [r.offset for r in got[0]] == list(range(17, 40))
