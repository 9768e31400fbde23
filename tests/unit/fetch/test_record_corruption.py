"""Corrupt and truncated record data: decode_partition never raises, and reports what is wrong where."""

from __future__ import annotations

import os
import struct
import zlib

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_consumer.fetch import (
    ConsumerRecord,
    CorruptRecordError,
    RecordError,
    RecordTooLargeError,
    _columns,
    _vector,
    decode_partition,
)
from fsm_consumer.fetch.testing import ABORT, CODECS, Rec, batch, control_batch, legacy_batch

FUZZ = settings(
    max_examples=int(os.environ.get("FSM_FUZZ_EXAMPLES", "250")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

headers_st = st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=6))), max_size=2)
record_st = st.builds(
    Rec,
    value=st.one_of(st.none(), st.binary(max_size=40)),
    key=st.one_of(st.none(), st.binary(max_size=8)),
    headers=headers_st,
    timestamp=st.integers(0, 2**41),
    offset_delta=st.none(),
)
batch_st = st.tuples(
    st.sampled_from(["v2", "v2", "v2", "legacy", "marker"]),
    st.sampled_from(list(CODECS)),
    st.lists(record_st, min_size=1, max_size=5),
)


@st.composite
def logs(draw):
    """(data, records as written, batch boundaries): several batches of mixed kinds."""
    data = b""
    offset = 0
    written = []  # (offset, key, value, headers) of every data record
    ends = []  # (byte end, next offset) after each batch
    for kind, codec, recs in draw(st.lists(batch_st, min_size=1, max_size=4)):
        if kind == "marker":
            data += control_batch(offset, 9, marker=ABORT)
            offset += 1
        elif kind == "legacy" and codec in ("gzip", "snappy", "lz4"):  # one wrapper message
            data += legacy_batch(
                [r.value for r in recs], magic=1, base_offset=offset, codec=codec, keys=[r.key for r in recs]
            )
            written += [(offset + i, r.key, r.value, ()) for i, r in enumerate(recs)]
            offset += len(recs)
        elif kind == "legacy":  # plain messages: each is a "batch" of its own
            for r in recs:
                data += legacy_batch([r.value], magic=1, base_offset=offset, keys=[r.key])
                written.append((offset, r.key, r.value, ()))
                offset += 1
                ends.append((len(data), offset))
            continue
        else:
            data += batch(recs, base_offset=offset, codec=codec)
            written += [(offset + i, r.key, r.value, tuple(r.headers)) for i, r in enumerate(recs)]
            offset += len(recs)
        ends.append((len(data), offset))
    return data, written, ends


def check_shape(out, data, fetch_offset, *, trusted=True):
    """What holds whatever the input: a well-formed result.

    ``trusted``: CRCs were checked, so offset deltas are the producer's
    (unchecked garbage may repeat offsets within a batch, as in Java).
    """
    assert out.error is None or isinstance(out.error, RecordError)
    assert 0 <= out.bytes <= len(data)
    assert out.next_offset >= fetch_offset
    offsets = [r.offset for r in out.records]
    if trusted:
        assert offsets == sorted(set(offsets))
        if out.records:
            assert out.next_offset > offsets[-1]
    for r in out.records:
        assert type(r) is ConsumerRecord and r.offset >= fetch_offset
        assert r.key is None or type(r.key) is bytes
        assert r.value is None or type(r.value) is bytes
        assert all(type(k) is str and (v is None or type(v) is bytes) for k, v in r.headers)


def decode(data, **kw):
    kw.setdefault("fetch_offset", 0)
    return decode_partition("t", 0, data, **kw)


mutation_st = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4)),
    st.tuples(st.just("overwrite"), st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=12))),
    st.tuples(st.just("insert"), st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=12))),
    st.tuples(st.just("delete"), st.tuples(st.integers(0, 10**6), st.integers(1, 20))),
)


def mutate(data: bytes, mutation) -> bytes:
    kind, arg = mutation
    buf = bytearray(data)
    if kind == "flip":
        for pos, mask in arg:
            buf[pos % len(buf)] ^= mask
    elif kind == "overwrite":
        pos, new = arg
        pos %= len(buf)
        buf[pos : pos + len(new)] = new
    elif kind == "insert":
        pos, new = arg
        buf[pos % (len(buf) + 1) : pos % (len(buf) + 1)] = new
    else:
        pos, n = arg
        del buf[pos % len(buf) : pos % len(buf) + n]
    return bytes(buf)


@FUZZ
@given(logs(), mutation_st, st.booleans())
def test_mutated_data_never_raises_and_crc_checked_records_are_real(log, mutation, read_committed):
    data, written, _ = log
    bad = mutate(data, mutation)
    isolation = "read_committed" if read_committed else "read_uncommitted"
    out = decode(bad, check_crcs=True, isolation_level=isolation, aborted_transactions=[(9, 0)])
    check_shape(out, bad, 0)
    # With CRCs checked, a record's contents are what some producer wrote
    # (base offsets are outside the CRC, so only contents are compared).
    originals = {(k, v, h) for _, k, v, h in written}
    assert all((r.key, r.value, r.headers) in originals for r in out.records)
    # Without CRC checks garbage may decode, but never escapes as an exception.
    check_shape(decode(bad, check_crcs=False, isolation_level=isolation), bad, 0, trusted=False)


@FUZZ
@given(logs(), st.integers(0, 10**6))
def test_truncation_keeps_every_complete_batch(log, cut):
    data, written, ends = log
    cut %= len(data) + 1
    out = decode(data[:cut])
    complete = [(end, nxt) for end, nxt in ends if end <= cut]
    expected_next = complete[-1][1] if complete else 0
    assert out.next_offset == expected_next
    assert out.bytes == (complete[-1][0] if complete else 0)
    assert [(r.offset, r.key, r.value, r.headers) for r in out.records] == [w for w in written if w[0] < expected_next]
    if complete or cut == 0:
        assert out.error is None
    else:
        assert isinstance(out.error, RecordTooLargeError)


@FUZZ
@given(st.binary(max_size=300), st.booleans(), st.integers(0, 5))
def test_garbage_never_raises(data, check_crcs, fetch_offset):
    out = decode(data, check_crcs=check_crcs, fetch_offset=fetch_offset)
    check_shape(out, data, fetch_offset, trusted=check_crcs)


# Targeted corruptions: each names the batch and what is wrong.

GOOD = batch([b"first"], base_offset=0)


def _resign(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def corrupt_second(change, *, resign=True) -> bytes:
    raw = bytearray(batch([b"second", b"third"], base_offset=1))
    change(raw)
    return GOOD + (_resign(raw) if resign else bytes(raw))


def assert_corrupt_at_second(data, reason, **kw):
    out = decode(data, **kw)
    assert [r.value for r in out.records] == [b"first"]
    assert out.next_offset == 1 and out.bytes == len(GOOD)
    assert isinstance(out.error, CorruptRecordError)
    assert (out.error.topic, out.error.partition, out.error.offset) == ("t", 0, 1)
    assert reason in out.error.message, out.error.message


def test_bad_crc():
    def flip_value(raw):
        raw[-3] ^= 0xFF

    data = corrupt_second(flip_value, resign=False)
    assert_corrupt_at_second(data, "CRC mismatch")
    # Unchecked, the flipped byte reads as data, as in Java with check.crcs=false.
    assert len(decode(data, check_crcs=False).records) == 3


def test_length_below_minimum():
    assert_corrupt_at_second(
        corrupt_second(lambda raw: struct.pack_into(">i", raw, 8, 5), resign=False), "below the minimum"
    )


def test_length_shorter_than_v2_header():
    def shrink(raw):
        struct.pack_into(">i", raw, 8, 30)
        del raw[42:]

    assert_corrupt_at_second(corrupt_second(shrink, resign=False), "shorter than the v2 batch header")


def test_unknown_magic():
    assert_corrupt_at_second(corrupt_second(lambda raw: raw.__setitem__(16, 7), resign=False), "unknown magic 7")


def test_record_count_larger_than_the_records():
    assert_corrupt_at_second(corrupt_second(lambda raw: struct.pack_into(">i", raw, 57, 3)), "runs past the end")


def test_record_count_smaller_than_the_records():
    assert_corrupt_at_second(corrupt_second(lambda raw: struct.pack_into(">i", raw, 57, 1)), "bytes left after")


def test_negative_record_count():
    assert_corrupt_at_second(corrupt_second(lambda raw: struct.pack_into(">i", raw, 57, -4)), "negative record count")


def test_record_length_disagreeing_with_its_fields():
    # First record: length varint at 61; 'second' record is 12 bytes (zigzag 24).
    def lengthen(raw):
        assert raw[61] == 24
        raw[61] = 26

    assert_corrupt_at_second(corrupt_second(lengthen), "does not end where its length says")


def test_varint_longer_than_ten_bytes():
    def endless(raw):
        raw[61 : 61 + 11] = b"\xff" * 11

    assert_corrupt_at_second(corrupt_second(endless), "varint longer than 10 bytes")


def test_negative_key_length():
    def key_len(raw):
        assert raw[65] == 1  # null key (-1) after length, attributes, deltas
        raw[65] = 5  # -3

    assert_corrupt_at_second(corrupt_second(key_len), "negative key length -3")


def test_header_key_not_utf8():
    raw = bytearray(batch([Rec(b"v", headers=[("ab", b"x")])], base_offset=1))
    pos = raw.index(b"ab")
    raw[pos] = 0xFF
    out = decode(GOOD + _resign(raw))
    assert [r.value for r in out.records] == [b"first"]
    assert isinstance(out.error, CorruptRecordError) and "not UTF-8" in out.error.message


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_decompression_failure(codec):
    raw = bytearray(batch([b"second" * 20, b"third"], base_offset=1, codec=codec))
    raw[61:] = b"\x00" * (len(raw) - 61)  # valid CRC over a dead payload
    out = decode(GOOD + _resign(raw))
    assert [r.value for r in out.records] == [b"first"]
    assert isinstance(out.error, CorruptRecordError) and out.error.offset == 1
    assert codec in out.error.message or "bad frame magic" in out.error.message, out.error.message


def test_unknown_compression_type():
    assert_corrupt_at_second(
        corrupt_second(lambda raw: raw.__setitem__(22, raw[22] | 0x07)), "unknown compression type 7"
    )


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_legacy_bad_crc(codec):
    legacy = bytearray(legacy_batch([b"a", b"b"], magic=1, base_offset=1, codec=codec))
    legacy[-1] ^= 1  # in the last (plain) message or the compressed wrapper
    out = decode(GOOD + bytes(legacy))
    assert [r.value for r in out.records] == [b"first"] + ([b"a"] if codec == "none" else [])
    assert isinstance(out.error, CorruptRecordError) and "CRC mismatch" in out.error.message
    assert out.error.offset == 2  # the failing message, or the wrapper (it carries its last offset)


def test_legacy_wrapper_with_negative_inner_length_does_not_loop():
    # kafka-python's own reader would add the negative length and loop forever.
    inner = struct.pack(">qi", 0, -12) + b"\x00" * 20
    body = struct.pack(">bbq", 1, 1, 0) + struct.pack(">i", -1)
    payload = bytes(cramjam.gzip.compress(inner))
    body += struct.pack(">i", len(payload)) + payload
    wrapper = struct.pack(">qiI", 1, len(body) + 4, zlib.crc32(body)) + body
    out = decode(GOOD + wrapper)
    assert [r.value for r in out.records] == [b"first"]
    assert isinstance(out.error, CorruptRecordError) and "inner message length -12" in out.error.message


def test_records_of_a_corrupt_batch_are_all_withheld():
    # The decode of a batch is all or nothing: a record failing late does not leak the earlier ones.
    def break_last(raw):
        raw[-1] = 3  # header count of the last record: -2

    out = decode(corrupt_second(break_last))
    assert [r.value for r in out.records] == [b"first"]
    assert isinstance(out.error, CorruptRecordError)


def test_a_huge_record_count_over_lengths_that_do_not_advance_fails_at_once():
    # A CRC-valid batch claiming 2**31 - 1 records whose first length is -1 (0x01): the columnar scan trusted
    # the count and stood still for two billion steps (found by the compiled decoder's property test)
    def claim(raw):
        struct.pack_into(">i", raw, 57, 2**31 - 1)
        raw[61] = 0x01

    data = corrupt_second(claim)
    assert_corrupt_at_second(data, "records cannot fit in")  # judged before any record is read
    for check_crcs in (True, False):
        got = _columns.decode_partition_columns("t", 0, data, fetch_offset=0, check_crcs=check_crcs)
        assert got.columns.to_batch().column("value").to_pylist() == [b"first"]
        assert isinstance(got.error, CorruptRecordError) and got.error.offset == 1
        assert "2147483647 records cannot fit in" in got.error.message


class _Bounded(list):
    def append(self, start):
        assert len(self) < 8, "the scan stood still"
        super().append(start)


# -1, -2, -1 in two bytes, -2**27, then 0 to 5: lengths below the 6 bytes a record's fields take at least
@pytest.mark.parametrize(
    "length", [b"\x01", b"\x03", b"\x81\x00", b"\xff\xff\xff\x01", b"\x00", b"\x02", b"\x80\x00", b"\x0a"]
)
def test_the_columnar_scan_never_steps_back_stands_still_or_creeps(length):
    starts = _Bounded()
    with pytest.raises((ValueError, IndexError)):
        _vector.scan(length + bytes(60), 6, 0, starts)
    assert starts[0] == 0 and len(starts) <= 2  # the record, and at most the step that left the buffer
    with pytest.raises(ValueError, match="cannot fit"):
        _vector.scan(length + bytes(60), 2**31 - 1, 0, _Bounded())


def test_a_batch_claims_no_more_records_than_its_bytes_hold_seven_bytes_each():
    record = b"\x0c\x00\x00\x00\x01\x01\x00"  # length 6: attributes, deltas, null key and value, no headers
    starts = _Bounded()
    _vector.scan(record * 3, 3, 0, starts)
    assert list(starts) == [0, 7, 14]
    with pytest.raises(ValueError, match="4 records cannot fit in 27 bytes"):
        _vector.scan(record * 3 + bytes(6), 4, 0, _Bounded())
