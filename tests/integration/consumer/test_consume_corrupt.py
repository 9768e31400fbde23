"""A record batch that fails its CRC (one byte flipped by FaultyTransport in one partition's
Fetch data) raises CorruptRecordError for that partition only; the others deliver everything,
and once the data is sound again the partition resumes at the bad batch: nothing skipped."""

from __future__ import annotations

import time

import pytest

from fsm_consumer.consumer import Consumer
from fsm_consumer.fetch import CorruptRecordError, TopicPartition
from fsm_consumer.transport import FaultyTransport, KafkaTransport

pytestmark = pytest.mark.integration

PARTITIONS, PER_PARTITION = 3, 40
BAD = 1


def _flip_in(marker: bytes):
    """Flip one byte of the first record value containing ``marker`` (uncompressed data, so the
    values are visible); other partitions' bytes pass unchanged."""

    def mutate(data: bytes) -> bytes:
        at = data.find(marker)
        if at < 0:
            return data
        out = bytearray(data)
        out[at] ^= 0xFF
        return bytes(out)

    return mutate


@pytest.mark.parametrize("times", [1, 10_000], ids=["once", "until-cleared"])
def test_corrupt_batch_fails_its_partition_only(times, broker, make_topic, send):
    topic = make_topic(partitions=PARTITIONS)
    send(
        topic,
        [
            {"partition": p, "value": b"part-%d-rec-%d" % (p, i)}
            for i in range(PER_PARTITION)
            for p in range(PARTITIONS)
        ],
    )
    config = dict(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest", fetch_max_wait_ms=50)
    transport = FaultyTransport(KafkaTransport(config))
    transport.corrupt("Fetch", _flip_in(b"part-%d-" % BAD), times=times, target="records")
    with Consumer(transport=transport, **config) as consumer:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        got = {p: [] for p in range(PARTITIONS)}
        errors: list[CorruptRecordError] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            healthy_done = all(len(got[p]) == PER_PARTITION for p in range(PARTITIONS) if p != BAD)
            if healthy_done and errors and (times == 1 and len(got[BAD]) == PER_PARTITION or times > 1):
                break
            try:
                for tp, records in consumer.poll(timeout_ms=100).items():
                    got[tp.partition].extend(records)
            except CorruptRecordError as exc:
                errors.append(exc)
        assert errors, "the corrupted batch was not reported"
        assert {(e.topic, e.partition) for e in errors} == {(topic, BAD)}
        assert all(e.offset == 0 for e in errors)  # the bad batch's base offset: nothing before it was lost
        for p in range(PARTITIONS):
            if p != BAD:
                assert [r.value for r in got[p]] == [b"part-%d-rec-%d" % (p, i) for i in range(PER_PARTITION)]
        if times == 1:
            assert len(errors) == 1
        else:
            assert got[BAD] == []  # every fetch of it is corrupt: raised each time, nothing handed out
            assert consumer.position(tps[BAD]) == 0
            transport.clear()
            deadline = time.monotonic() + 10
            while len(got[BAD]) < PER_PARTITION and time.monotonic() < deadline:
                try:
                    for tp, records in consumer.poll(timeout_ms=100).items():
                        got[tp.partition].extend(records)
                except CorruptRecordError:
                    pass  # a corrupted fetch already in the buffer when the fault was cleared
        # sound data again: the partition resumes at the bad batch, no gap, no duplicate
        assert [r.offset for r in got[BAD]] == list(range(PER_PARTITION))
        assert consumer.position(tps[BAD]) == PER_PARTITION
        assert transport.injected["corrupt"] >= 1
