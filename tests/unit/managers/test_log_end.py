"""The log end from the last batch's header (managers/_log_end.py): Tansu reports a multi-record batch's
end as its base offset + 1; the header says where it really ends."""

from __future__ import annotations

from fsm_consumer.fetch import TopicPartition
from fsm_consumer.fetch.testing import batch, legacy_batch
from fsm_consumer.managers._log_end import batch_end, probe_request


def test_a_v2_batch_ends_after_its_last_offset_delta():
    data = batch([b"a", b"b", b"c", b"d"], base_offset=10)
    assert batch_end(data, 11) == 14  # Tansu said 11 (base + 1)
    assert batch_end(data + batch([b"e", b"f"], base_offset=14), 11) == 16  # the last of several


def test_never_below_the_reported_end_and_nothing_from_nothing():
    assert batch_end(batch([b"a"], base_offset=3), 9) == 9  # Kafka's answer is already right
    assert batch_end(b"", 5) == 5 and batch_end(None, 5) == 5
    assert batch_end(batch([b"a", b"b"], base_offset=0)[:20], 1) == 1  # too short for a header: unchanged


def test_a_partial_trailing_batch_is_read_from_its_header():
    data = batch([b"x" * 100] * 5, base_offset=0)
    assert batch_end(data[:40], 1) == 5


def test_legacy_message_sets():
    assert batch_end(legacy_batch([b"a", b"b", b"c"], magic=1, base_offset=7), 8) == 10
    assert batch_end(legacy_batch([b"a", b"b"], magic=1, base_offset=2, codec="gzip"), 1) == 4  # wrapper: last offset


def test_the_probe_asks_for_one_batch_at_the_offset():
    request = probe_request(TopicPartition("t", 3), 41, 1)
    part = request.topics[0].partitions[0]
    assert (request.topics[0].topic, part.partition, part.fetch_offset) == ("t", 3, 41)
    assert request.min_bytes == 1 and request.isolation_level == 1 and part.partition_max_bytes == 1
