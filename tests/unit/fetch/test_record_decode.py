"""decode_partition on well-formed data: codecs, record fields, offsets, legacy formats, deserializers."""

from __future__ import annotations

import pickle
import struct

import cramjam
import pytest
from crc32c import crc32c
from kafka.consumer.fetcher import ConsumerRecord as KafkaConsumerRecord
from kafka.consumer.fetcher import Fetcher
from kafka.record.memory_records import MemoryRecords
from kafka.serializer import Deserializer
from kafka.structs import OffsetAndMetadata as KafkaOffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTopicPartition

from fsm_consumer.fetch import (
    ConsumerRecord,
    CorruptRecordError,
    DecodedPartition,
    DeserializationError,
    OffsetAndMetadata,
    RecordTooLargeError,
    TopicPartition,
    decode_partition,
)
from fsm_consumer.fetch._compression import decompress
from fsm_consumer.fetch._decode_v2 import HEADER
from fsm_consumer.fetch.testing import CODECS, COMMIT, Rec, batch, control_batch, legacy_batch

ALL_CODECS = list(CODECS)
TS = 1_700_000_000_000


def decode(data, fetch_offset=0, **kw) -> DecodedPartition:
    return decode_partition("topic", 3, data, fetch_offset=fetch_offset, **kw)


def sample_records(n=6):
    return [
        Rec(
            b"value-%d" % i if i % 3 else None if i == 3 else b"",
            key=None if i % 2 else b"key-%d" % i,
            headers=[("trace", b"t%d" % i), ("empty", b""), ("null", None)][: i % 4],
            timestamp=TS + i * 7,
        )
        for i in range(n)
    ]


def test_public_types_match_kafka_python_field_order():
    assert ConsumerRecord._fields == KafkaConsumerRecord._fields
    assert TopicPartition._fields == KafkaTopicPartition._fields
    assert OffsetAndMetadata._fields == KafkaOffsetAndMetadata._fields
    assert OffsetAndMetadata(5, "m") == (5, "m", -1)
    assert TopicPartition("t", 1) == KafkaTopicPartition("t", 1)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_every_codec_round_trips_keys_values_headers(codec):
    recs = sample_records()
    data = batch(recs, base_offset=40, codec=codec, leader_epoch=9)
    out = decode(data, fetch_offset=40)
    assert out.error is None
    assert out.next_offset == 46 and out.bytes == len(data) and out.leader_epoch == 9
    assert [r.offset for r in out.records] == list(range(40, 46))
    for rec, got in zip(recs, out.records, strict=False):
        assert type(got) is ConsumerRecord
        assert (got.topic, got.partition, got.leader_epoch) == ("topic", 3, 9)
        assert (got.key, got.value) == (rec.key, rec.value)
        assert got.headers == tuple(rec.headers)
        assert (got.timestamp, got.timestamp_type, got.checksum) == (rec.timestamp, 0, None)
        assert got.serialized_key_size == (-1 if rec.key is None else len(rec.key))
        assert got.serialized_value_size == (-1 if rec.value is None else len(rec.value))
        expected_header_size = sum(len(k) + len(v or b"") for k, v in rec.headers) if rec.headers else -1
        assert got.serialized_header_size == expected_header_size


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_same_records_as_kafka_pythons_fetcher(codec):
    # kafka-python can decode these two codecs here: its records are the reference.
    recs = [
        Rec(
            b"v" * (i * 37 % 300),
            key=b"k%d" % i if i % 2 else None,
            headers=[("h", b"x")] if i % 5 == 0 else [],
            timestamp=TS + i * 1000,
        )
        for i in range(300)
    ]
    data = batch(recs[:150], base_offset=100, codec=codec) + batch(recs[150:], base_offset=250, codec=codec)
    theirs = Fetcher.PartitionRecords(120, KafkaTopicPartition("topic", 3), MemoryRecords(data)).take()
    ours = decode(data, fetch_offset=120).records
    assert len(ours) == len(theirs) == 280
    for mine, ref in zip(ours, theirs, strict=False):
        assert mine._replace(headers=list(mine.headers)) == tuple(ref)


def test_bytes_bytearray_and_memoryview_inputs_agree():
    data = batch(sample_records(), base_offset=0) + batch(sample_records(), base_offset=6, codec="lz4")
    expected = decode(data)
    assert len(expected.records) == 12
    for form in (bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        assert decode(form) == expected


def test_fetch_offset_inside_a_compressed_batch_skips_earlier_records():
    data = batch([b"a", b"b", b"c", b"d"], base_offset=10, codec="zstd") + batch([b"e"], base_offset=14)
    out = decode(data, fetch_offset=12)
    assert [(r.offset, r.value) for r in out.records] == [(12, b"c"), (13, b"d"), (14, b"e")]
    assert out.next_offset == 15


def test_compaction_gaps_and_last_offset_delta_set_next_offset():
    # Offsets 0, 5, 9 survive compaction; the batch keeps last offset delta 9.
    data = batch([Rec(b"a", offset_delta=0), Rec(b"b", offset_delta=5), Rec(b"c", offset_delta=9)], base_offset=100)
    out = decode(data, fetch_offset=101)
    assert [r.offset for r in out.records] == [105, 109]
    assert out.next_offset == 110


def test_empty_batch_left_by_compaction_still_advances():
    # A batch whose records were all compacted away keeps its header (count 0)
    # so producer state survives; the consumer must step over it.
    full = bytearray(batch([b"x"], base_offset=50))
    fields = list(HEADER.unpack_from(full))
    fields[1], fields[6], fields[12] = 61 - 12, 4, 0  # length, last offset delta, count
    empty = bytearray(61)
    HEADER.pack_into(empty, 0, *fields)
    struct.pack_into(">I", empty, 17, crc32c(bytes(empty[21:])))
    out = decode(bytes(empty) + batch([b"y"], base_offset=55), fetch_offset=50)
    assert out.error is None
    assert [(r.offset, r.value) for r in out.records] == [(55, b"y")]
    assert out.next_offset == 56


def test_log_append_time_stamps_every_record_with_the_batch_max_timestamp():
    data = batch([Rec(b"a", timestamp=TS), Rec(b"b", timestamp=TS + 5)], log_append_time=TS + 999, codec="snappy")
    out = decode(data)
    assert [(r.timestamp, r.timestamp_type) for r in out.records] == [(TS + 999, 1)] * 2
    assert [r.value for r in out.records] == [b"a", b"b"]


def test_large_varints_and_values():
    big = bytes(range(256)) * 300  # 76,800 bytes: a 3-byte length varint
    recs = [Rec(big, key=b"k" * 70, timestamp=TS), Rec(b"s", timestamp=TS + 10**9, offset_delta=20_000)]
    out = decode(batch(recs, base_offset=2**40), fetch_offset=0)
    assert out.error is None
    assert [r.offset for r in out.records] == [2**40, 2**40 + 20_000]
    assert out.records[0].value == big and out.records[0].key == b"k" * 70
    assert out.records[1].timestamp == TS + 10**9


@pytest.mark.parametrize("framing", ["xerial", "raw"])
def test_snappy_java_xerial_framing_and_librdkafka_raw(framing):
    recs = [Rec(bytes([i % 251]) * 500) for i in range(200)]  # > 32 KB: several xerial blocks
    data = batch(recs, codec="snappy", snappy_framing=framing)
    out = decode(data)
    assert out.error is None and [r.value for r in out.records] == [r.value for r in recs]


def test_lz4_frames_with_several_blocks_and_with_linked_blocks():
    payload = bytes(range(256)) * 1000  # 256 KB: four 64 KB blocks
    independent = cramjam.lz4.Compressor(block_linked=False)
    independent.compress(payload)
    assert decompress(3, bytes(independent.finish())) == payload
    linked = cramjam.lz4.Compressor(block_linked=True)  # no Kafka client writes these; still readable
    linked.compress(payload)
    assert decompress(3, bytes(linked.finish())) == payload


def test_control_batches_are_never_records_but_are_stepped_over():
    data = batch([b"a"], base_offset=0, producer_id=7, producer_epoch=0, transactional=True) + control_batch(
        1, 7, marker=COMMIT
    )
    out = decode(data)
    assert [r.value for r in out.records] == [b"a"]
    assert out.next_offset == 2 and out.error is None


def test_trailing_partial_batch_is_left_for_the_next_fetch():
    first = batch([b"a", b"b"], base_offset=0)
    second = batch([b"c"], base_offset=2, codec="gzip")
    for cut in (1, 11, 12, 30, len(second) - 1):
        out = decode(first + second[:cut])
        assert out.error is None
        assert [r.value for r in out.records] == [b"a", b"b"]
        assert out.next_offset == 2 and out.bytes == len(first)


def test_no_complete_batch_at_all_is_record_too_large():
    data = batch([b"x" * 1000], base_offset=77)
    out = decode(data[:500], fetch_offset=77)
    assert isinstance(out.error, RecordTooLargeError)
    assert (out.error.topic, out.error.partition, out.error.offset) == ("topic", 3, 77)
    assert out.records == [] and out.next_offset == 77 and out.bytes == 0


def test_empty_or_missing_data_is_no_error():
    for data in (b"", None, memoryview(b"")):
        out = decode(data, fetch_offset=5)
        assert out == DecodedPartition([], 5, 0, None, -1)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_legacy_message_sets(magic, codec):
    values = [b"a", None, b"ccc", b""]
    data = legacy_batch(values, magic=magic, base_offset=30, codec=codec, keys=[b"k", None, None, b"kk"])
    out = decode(data, fetch_offset=31)
    assert out.error is None, out.error
    assert [(r.offset, r.key, r.value) for r in out.records] == [(31, None, None), (32, None, b"ccc"), (33, b"kk", b"")]
    assert out.next_offset == 34 and out.leader_epoch == -1
    for r in out.records:
        assert isinstance(r.checksum, int) and r.headers == () and r.leader_epoch == -1
        assert (r.timestamp, r.timestamp_type) == ((-1, -1) if magic == 0 else (TS, 0))


def test_legacy_then_v2_in_one_response():
    data = legacy_batch([b"old1", b"old2"], magic=1, base_offset=0, codec="gzip") + batch([b"new"], base_offset=2)
    out = decode(data)
    assert [(r.offset, r.value) for r in out.records] == [(0, b"old1"), (1, b"old2"), (2, b"new")]
    assert out.next_offset == 3


class Upper(Deserializer):
    def deserialize(self, topic, headers, data):
        assert topic == "topic" and isinstance(headers, tuple)
        return None if data is None else data.upper()


def test_deserializer_objects_and_plain_callables():
    data = batch([Rec(b"v1", key=b"k1"), Rec(None, key=None)])
    out = decode(data, key_deserializer=Upper(), value_deserializer=lambda b: b and b.decode())
    assert [(r.key, r.value) for r in out.records] == [(b"K1", "v1"), (None, None)]
    # Sizes stay those of the serialized bytes.
    assert [(r.serialized_key_size, r.serialized_value_size) for r in out.records] == [(2, 2), (-1, -1)]


def test_deserializer_failure_keeps_earlier_records_and_stops_at_the_failing_offset():
    def value(data):
        if data == b"bad":
            raise UnicodeError("nope")
        return data.decode()

    data = (
        batch([b"a", b"b"], base_offset=0) + batch([b"c", b"bad", b"d"], base_offset=2) + batch([b"e"], base_offset=5)
    )
    out = decode(data, value_deserializer=value)
    assert [r.value for r in out.records] == ["a", "b", "c"]
    assert out.next_offset == 3
    err = out.error
    assert isinstance(err, DeserializationError)
    assert (err.topic, err.partition, err.offset, err.origin) == ("topic", 3, 3, "value")
    assert isinstance(err.__cause__, UnicodeError)

    out = decode(data, key_deserializer=lambda k: 1 / 0)
    assert out.records == [] and out.next_offset == 0 and out.error.origin == "key"


def test_errors_pickle_with_their_fields():
    err = DeserializationError("t", 1, 5, "boom", origin="key")
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), back.topic, back.partition, back.offset, back.origin, str(back)) == (
        DeserializationError,
        "t",
        1,
        5,
        "key",
        "t-1 at offset 5: boom",
    )
    corrupt = pickle.loads(pickle.dumps(CorruptRecordError("t", 0, 9, "CRC mismatch")))
    assert isinstance(corrupt, CorruptRecordError) and corrupt.offset == 9 and corrupt.message == "CRC mismatch"


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="isolation_level"):
        decode(b"", isolation_level="read_whatever")
    with pytest.raises(TypeError, match="deserializer"):
        decode(b"", value_deserializer=42)


def test_collector_decodes_with_the_collector_paused_and_restores_it():
    """The collector postpones garbage collection during one decode and always turns it back on,
    also when a deserializer raises; an application's own gc.disable() is respected."""
    import gc

    from fsm_consumer._config import ConsumerConfig
    from fsm_consumer.fetch import TopicPartition
    from fsm_consumer.fetch._buffer import CompletedFetch
    from fsm_consumer.fetch._collector import FetchCollector
    from fsm_consumer.fetch.testing import Rec, batch

    seen = []

    def value_des(data):
        seen.append(gc.isenabled())
        if data == b"bad":
            raise ValueError("cannot read")
        return data

    collector = FetchCollector(ConsumerConfig.from_kwargs(value_deserializer=value_des), None, None, lambda: None, None)
    fetch = CompletedFetch(TopicPartition("t", 0), 0, 0, batch([Rec(value=b"ok"), Rec(value=b"bad")]), 2, 2, 0, None, 0)
    assert gc.isenabled()
    decoded = collector._decode(fetch, 0, columnar=False)
    assert seen == [False, False] and gc.isenabled()
    assert [r.value for r in decoded.records] == [b"ok"] and decoded.error is not None
    gc.disable()
    try:
        collector._decode(fetch, 0, columnar=False)
        assert not gc.isenabled()  # left as the application set it
    finally:
        gc.enable()
