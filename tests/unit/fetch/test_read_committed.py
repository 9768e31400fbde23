"""read_committed: aborted transactions and transaction markers are filtered as Java's CompletedFetch does."""

from __future__ import annotations

from kafka.consumer.fetcher import Fetcher, IsolationLevel
from kafka.protocol.consumer import FetchResponse
from kafka.record.memory_records import MemoryRecords
from kafka.structs import TopicPartition as KafkaTopicPartition

from fsm_consumer.fetch import decode_partition
from fsm_consumer.fetch.testing import ABORT, COMMIT, batch, control_batch

AbortedTransaction = FetchResponse.FetchableTopicResponse.PartitionData.AbortedTransaction


def txn(offset: int, pid: int, *values: bytes, codec: str = "none") -> bytes:
    return batch(values, base_offset=offset, producer_id=pid, producer_epoch=0, transactional=True, codec=codec)


def plain(offset: int, *values: bytes) -> bytes:
    return batch(values, base_offset=offset)


def committed(data, aborted, fetch_offset=0):
    return decode_partition(
        "t", 0, data, fetch_offset=fetch_offset, isolation_level="read_committed", aborted_transactions=aborted
    )


def values(out):
    return [r.value for r in out.records]


# Offsets 0-1 pid 1 (aborted), 2 plain, 3-4 pid 2 (committed), 5 pid 1 abort marker,
# 6 pid 2 commit marker, 7 plain, 8 pid 1 again (a new, committed transaction), 9 its commit.
LOG = (
    txn(0, 1, b"a1", b"a2", codec="lz4")
    + plain(2, b"p1")
    + txn(3, 2, b"c1", b"c2")
    + control_batch(5, 1, marker=ABORT)
    + control_batch(6, 2, marker=COMMIT)
    + plain(7, b"p2")
    + txn(8, 1, b"n1")
    + control_batch(9, 1, marker=COMMIT)
)
LOG_ABORTED = [(1, 0)]


def test_aborted_records_are_skipped_committed_and_plain_ones_kept():
    out = committed(LOG, LOG_ABORTED)
    assert out.error is None
    assert values(out) == [b"p1", b"c1", b"c2", b"p2", b"n1"]
    assert out.next_offset == 10


def test_read_uncommitted_returns_aborted_records_but_never_markers():
    out = decode_partition("t", 0, LOG, fetch_offset=0, aborted_transactions=LOG_ABORTED)
    assert values(out) == [b"a1", b"a2", b"p1", b"c1", b"c2", b"p2", b"n1"]
    assert out.next_offset == 10


def test_only_aborted_data_still_advances_next_offset():
    data = txn(0, 1, b"x") + txn(1, 1, b"y") + control_batch(2, 1, marker=ABORT)
    out = committed(data, [(1, 0)])
    assert out.records == [] and out.error is None
    assert out.next_offset == 3 and out.bytes == len(data)


def test_kafka_python_aborted_transaction_objects_in_any_order():
    data = txn(0, 1, b"x") + txn(1, 2, b"y") + control_batch(2, 1) + control_batch(3, 2) + plain(4, b"z")
    aborted = [AbortedTransaction(producer_id=2, first_offset=1), AbortedTransaction(producer_id=1, first_offset=0)]
    assert values(committed(data, aborted)) == [b"z"]


def test_same_producer_aborted_twice():
    data = (
        txn(0, 1, b"x")
        + control_batch(1, 1)
        + txn(2, 1, b"ok")
        + control_batch(3, 1, marker=COMMIT)
        + txn(4, 1, b"y")
        + control_batch(5, 1)
    )
    out = committed(data, [(1, 0), (1, 4)])
    assert values(out) == [b"ok"]
    assert out.next_offset == 6


def test_transaction_started_before_the_fetch_offset_is_still_aborted():
    # The fetch starts mid-transaction: its first offset (0) is before the data.
    data = txn(3, 1, b"late") + control_batch(4, 1) + plain(5, b"after")
    assert values(committed(data, [(1, 0)], fetch_offset=3)) == [b"after"]


def test_aborted_producer_without_marker_in_this_fetch_stays_aborted():
    # The marker comes in a later fetch; everything of pid 1 here is aborted.
    data = txn(0, 1, b"x") + plain(1, b"p") + txn(2, 1, b"y")
    out = committed(data, [(1, 0)])
    assert values(out) == [b"p"] and out.next_offset == 3


def test_non_transactional_batch_of_an_aborted_producer_id_is_kept():
    # Java only skips batches that are transactional (idempotent-only ones are not part of a txn).
    idempotent = batch([b"idem"], base_offset=1, producer_id=1, producer_epoch=0, transactional=False)
    data = txn(0, 1, b"x") + idempotent + control_batch(2, 1)
    assert values(committed(data, [(1, 0)])) == [b"idem"]


def test_aborted_transaction_list_beginning_after_a_batch_does_not_drop_it():
    # pid 1's batch at 0 is committed; its next transaction (from offset 2) is aborted.
    data = txn(0, 1, b"keep") + control_batch(1, 1, marker=COMMIT) + txn(2, 1, b"drop") + control_batch(3, 1)
    assert values(committed(data, [(1, 2)])) == [b"keep"]


def test_agrees_with_kafka_pythons_fetcher():
    # kafka-python cannot read the lz4 batch here; rebuild the log uncompressed.
    log = (
        txn(0, 1, b"a1", b"a2")
        + plain(2, b"p1")
        + txn(3, 2, b"c1", b"c2")
        + control_batch(5, 1, marker=ABORT)
        + control_batch(6, 2, marker=COMMIT)
        + plain(7, b"p2")
        + txn(8, 1, b"n1")
        + control_batch(9, 1, marker=COMMIT)
    )
    aborted = [AbortedTransaction(producer_id=1, first_offset=0)]
    theirs = Fetcher.PartitionRecords(
        0,
        KafkaTopicPartition("t", 0),
        MemoryRecords(log),
        isolation_level=IsolationLevel.READ_COMMITTED,
        aborted_transactions=aborted,
    ).take()
    ours = committed(log, aborted).records
    assert [(r.offset, r.value) for r in ours] == [(r.offset, r.value) for r in theirs]
    assert [r.value for r in ours] == [b"p1", b"c1", b"c2", b"p2", b"n1"]
