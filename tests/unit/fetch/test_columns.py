"""decode_partition_columns: the same records, offsets and errors as decode_partition, as Arrow columns."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from fsm_consumer.fetch import CorruptRecordError, RecordTooLargeError, TopicPartition, decode_partition  # noqa: E402
from fsm_consumer.fetch._columns import (  # noqa: E402
    PARTITION_SCHEMA,
    SCHEMA,
    assemble,
    decode_partition_columns,
    from_records,
)
from fsm_consumer.fetch.testing import ABORT, CODECS, COMMIT, Rec, batch, control_batch, legacy_batch  # noqa: E402

TS = 1_700_000_000_000


def rows_of(records):
    """decode_partition's records as the rows poll_batch gives (timestamps as ms)."""
    return [
        {
            "offset": r.offset,
            "timestamp": None if r.timestamp == -1 else r.timestamp,
            "key": r.key,
            "value": r.value,
            "headers": [{"key": k, "value": v} for k, v in r.headers],
        }
        for r in records
    ]


def column_rows(columns):
    """A partition's columns as poll_batch() hands them out (compiled keys and values are views until then)."""
    out = assemble([(TopicPartition("t", 2), columns)])
    assert out.schema == SCHEMA
    rows = out.select(PARTITION_SCHEMA.names).cast(PARTITION_SCHEMA.set(1, pa.field("timestamp", pa.int64())))
    return rows.to_pylist()


def same(data, **kw):
    """Decode both ways and check they agree; returns the columnar result."""
    kw.setdefault("fetch_offset", 0)
    expected = decode_partition("t", 2, data, **kw)
    got = decode_partition_columns("t", 2, data, **kw)
    assert column_rows(got.columns) == rows_of(expected.records)
    assert (got.next_offset, got.bytes, got.leader_epoch) == (
        expected.next_offset,
        expected.bytes,
        expected.leader_epoch,
    )
    assert type(got.error) is type(expected.error)
    if expected.error is not None:
        assert (got.error.offset, got.error.message) == (expected.error.offset, expected.error.message)
    return got


def sample(n=9):
    return [
        Rec(
            b"value-%d" % i if i % 3 else None if i == 3 else b"",
            key=None if i % 2 else (b"" if i == 4 else b"key-%d" % i),
            headers=[("trace", b"t%d" % i), ("empty", b""), ("null", None)][: i % 4],
            timestamp=TS + i * 7,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("codec", list(CODECS))
def test_every_codec_headers_null_and_empty_keys_and_values(codec):
    data = batch(sample(), base_offset=5, codec=codec) + batch([b"x" * 300, b"y"], base_offset=14, codec=codec)
    out = same(data)
    assert out.columns.num_rows == 11
    rows = out.columns.to_batch()
    assert rows.column("key").null_count == 6  # 4 odd ones and the 2 keyless; key 4 is empty, not null
    assert rows.column("key")[4].as_py() == b""
    assert rows.column("value")[3].as_py() is None and rows.column("value")[0].as_py() == b""


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_fetch_offset_inside_a_batch_and_compaction_gaps(codec):
    recs = [Rec(b"a"), Rec(b"b", offset_delta=4), Rec(b"c", offset_delta=9)]
    data = batch(recs, base_offset=100, codec=codec) + batch([b"d", b"e"], base_offset=110, codec=codec)
    for fetch_offset in (0, 100, 101, 104, 105, 110, 111, 112):
        same(data, fetch_offset=fetch_offset)


def test_log_append_time_and_all_null_keys_only():
    data = batch([b"a", b"b"], log_append_time=TS + 99) + batch([b"c"], base_offset=2)
    out = same(data)
    assert column_rows(out.columns)[0]["timestamp"] == TS + 99


def test_large_varints_without_crc_check():
    recs = [
        Rec(b"v" * 70_000, key=b"k" * 200, timestamp=TS + 10**9, headers=[("h" * 80, b"z" * 300)]),
        Rec(None, offset_delta=300),
    ]
    same(batch(recs, base_offset=2**40), check_crcs=False)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_legacy_message_sets_and_v2_mixed(magic, codec):
    data = legacy_batch([b"a", None, b"c"], magic=magic, codec=codec, keys=[b"k", None, b""]) + batch(
        sample(3), base_offset=3, codec="zstd"
    )
    same(data)
    same(data, fetch_offset=1)


def test_control_batches_and_aborted_transactions_are_dropped():
    def txn(offset, pid, *values):
        return batch(values, base_offset=offset, producer_id=pid, producer_epoch=0, transactional=True)

    log = (
        txn(0, 1, b"a1", b"a2")
        + batch([b"p1"], base_offset=2)
        + txn(3, 2, b"c1", b"c2")
        + control_batch(5, 1, marker=ABORT)
        + control_batch(6, 2, marker=COMMIT)
        + txn(7, 1, b"n1")
        + control_batch(8, 1, marker=COMMIT)
    )
    committed = same(log, isolation_level="read_committed", aborted_transactions=[(1, 0)])
    assert committed.columns.to_batch().column("value").to_pylist() == [b"p1", b"c1", b"c2", b"n1"]
    assert committed.next_offset == 9
    uncommitted = same(log)
    assert uncommitted.columns.num_rows == 6  # aborted data too, never the markers
    only_markers = same(control_batch(0, 1) + control_batch(1, 1, marker=COMMIT))
    assert only_markers.columns.num_rows == 0 and only_markers.next_offset == 2


def test_partial_trailing_batch_too_large_and_empty():
    data = batch([b"a", b"b"]) + batch([b"c"], base_offset=2)
    same(data[:-5])
    assert isinstance(same(data[:20]).error, RecordTooLargeError)
    assert same(b"").columns.num_rows == 0 and same(None).next_offset == 0


def _resign(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda raw: raw.__setitem__(-3, raw[-3] ^ 0xFF), "CRC mismatch"),
        (lambda raw: struct.pack_into(">i", raw, 57, 3), "runs past the end"),
        (lambda raw: struct.pack_into(">i", raw, 57, 1), "bytes left after"),
        (lambda raw: raw.__setitem__(65, 5), "negative key length -3"),
        (lambda raw: raw.__setitem__(-1, 3), "header count"),
    ],
)
def test_corrupt_batch_keeps_the_good_batches_before_it_and_withholds_its_records(change, reason):
    good = batch([Rec(b"first", headers=[("h", b"1")])])
    raw = bytearray(batch([b"second", b"third"], base_offset=1))
    change(raw)
    data = good + (bytes(raw) if reason == "CRC mismatch" else _resign(raw)) + batch([b"fourth"], base_offset=3)
    out = same(data)
    assert out.columns.to_batch().column("value").to_pylist() == [b"first"]
    assert isinstance(out.error, CorruptRecordError) and out.error.offset == 1 and out.next_offset == 1


_rec = st.builds(
    Rec,
    value=st.one_of(st.none(), st.binary(max_size=30)),
    key=st.one_of(st.none(), st.binary(max_size=8)),
    headers=st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=4))), max_size=2),
    timestamp=st.integers(0, 2**41),
    offset_delta=st.none(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(
        st.tuples(st.sampled_from(list(CODECS)), st.lists(_rec, min_size=1, max_size=4)), min_size=1, max_size=4
    ),
    flips=st.lists(st.tuples(st.integers(0, 10**5), st.integers(1, 255)), max_size=2),
    check_crcs=st.booleans(),
    fetch_offset=st.integers(0, 12),
)
def test_agrees_with_decode_partition_on_any_data(batches, flips, check_crcs, fetch_offset):
    data, offset = b"", 0
    for codec, recs in batches:
        data += batch(recs, base_offset=offset, codec=codec)
        offset += len(recs)
    buf = bytearray(data)
    for at, x in flips:
        buf[at % len(buf)] ^= x
    same(bytes(buf), check_crcs=check_crcs, fetch_offset=fetch_offset)


def test_from_records_and_assemble():
    data = batch(sample(), base_offset=0, codec="lz4")
    records = decode_partition("t", 2, data, fetch_offset=0).records
    columns = from_records(records)
    assert column_rows(columns) == rows_of(records)
    a, b = decode_partition_columns("t", 2, data, fetch_offset=0).columns, from_records(records[:3])
    out = assemble(
        [(TopicPartition("t", 2), a.slice(4, 3)), (TopicPartition("u", 0), b), (TopicPartition("t", 1), a.slice(0, 0))]
    )
    assert out.schema == SCHEMA and out.num_rows == 6
    assert out.column("topic").to_pylist() == ["t"] * 3 + ["u"] * 3
    assert out.column("partition").to_pylist() == [2, 2, 2, 0, 0, 0]
    assert out.column("offset").to_pylist() == [4, 5, 6, 0, 1, 2]
    empty = assemble([])
    assert empty.schema == SCHEMA and empty.num_rows == 0


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_slices_of_several_fetches_assemble_to_their_rows(codec):
    """poll_batch() hands out slices of fetches: each slice's rows, headers and timestamp types, in order,
    whichever fetch and row they start at; a slice past the end is empty."""
    recs = sample(9)
    data = batch(recs[:5], base_offset=10, codec=codec) + batch(
        recs[5:], base_offset=15, log_append_time=TS, codec=codec
    )
    whole = decode_partition("t", 2, data, fetch_offset=10).records
    columns = decode_partition_columns("t", 2, data, fetch_offset=10).columns
    assert columns.num_rows == 9 and columns.offset_at(4) == 14 and columns.index_of(13) == 3
    assert columns.index_of(99) == 9 and columns.slice(7, 5).num_rows == 2 and columns.slice(12).num_rows == 0
    cuts = [(0, 2), (2, 5), (5, 6), (6, 9)]
    out = assemble([(TopicPartition("t", 2), columns.slice(a, b - a)) for a, b in cuts])
    expected = rows_of(whole)
    for row in expected[5:]:
        row["timestamp"] = TS  # LogAppendTime: the batch's max timestamp
    assert column_rows(columns) == expected
    rows = out.select(PARTITION_SCHEMA.names).cast(PARTITION_SCHEMA.set(1, pa.field("timestamp", pa.int64())))
    assert rows.to_pylist() == expected
    assert out.column("timestamp_type").to_pylist() == [0] * 5 + [1] * 4
    later = columns.slice(3)
    assert later.offset_at(0) == 13 and later.index_of(15) == 2
    assert later.to_batch().column("headers").to_pylist() == [e["headers"] for e in expected[3:]]


# The fast path (record starts in Python, fields with numpy) must serve valid v2 data by itself and
# leave everything else to the exact loop, which then finds and words the fault.


@pytest.fixture
def exact_calls(monkeypatch):
    from fsm_consumer.fetch import _columns

    calls = []
    real = _columns.decode_exact

    def spy(*args, **kwargs):
        calls.append(args[0:2])
        return real(*args, **kwargs)

    monkeypatch.setattr(_columns, "decode_exact", spy)
    return calls


def test_valid_v2_data_never_needs_the_exact_loop(exact_calls):
    for codec in CODECS:
        same(batch(sample(), base_offset=5, codec=codec) + batch([b"x" * 300, b"y"], base_offset=14, codec=codec))
    recs = [Rec(b"a"), Rec(b"b", offset_delta=4), Rec(b"c", offset_delta=9)]
    same(batch(recs, base_offset=100) + batch([b"d"], base_offset=110), fetch_offset=105, check_crcs=False)
    same(batch([b"a", b"b"], log_append_time=TS + 99) + batch([b"c"], base_offset=2))
    big = [
        Rec(b"v" * 70_000, key=b"k" * 9_000, timestamp=TS + 10**12, headers=[("h" * 80, b"z" * 300)]),
        Rec(None, offset_delta=300, timestamp=TS - 10**10),
        Rec(b"", key=b"", timestamp=-1),
    ]
    same(batch(big, base_offset=2**40), check_crcs=False)
    assert exact_calls == []


@pytest.mark.parametrize(
    "data, kw, exact",
    [
        (legacy_batch([b"a", None], magic=1) + batch([b"b"], base_offset=2), {}, 1),  # legacy batch
        (batch([b"a", b"b"], base_offset=2**62), {}, 1),  # int64 overflow is near
        (batch([Rec(b"a", timestamp=2**62 + 5)]), {}, 1),  # base timestamp too
        (batch([Rec(b"a"), Rec(b"b", offset_delta=0)]), {"check_crcs": False}, 1),  # offsets do not rise ...
        (batch([Rec(b"a"), Rec(b"b", offset_delta=0)]), {}, 0),  # ... checked only without CRCs
    ],
)
def test_what_the_fast_path_declines_the_exact_loop_decodes(exact_calls, data, kw, exact):
    same(data, **kw)
    assert len(exact_calls) == exact


def test_a_corrupt_record_found_by_the_fast_path_is_worded_by_the_exact_loop(exact_calls):
    raw = bytearray(batch([b"first"]) + batch([Rec(b"ab", key=b"k"), Rec(b"c")], base_offset=1))
    at = raw.index(b"k") - 1
    raw[at] = 5  # key length -3
    out = same(_resign_last(raw, second_at=len(batch([b"first"]))))
    assert len(exact_calls) == 1 and "negative key length -3" in out.error.message
    assert out.columns.to_batch().column("value").to_pylist() == [b"first"]


def _resign_last(raw: bytearray, second_at: int) -> bytes:
    struct.pack_into(">I", raw, second_at + 17, crc32c(bytes(raw[second_at + 21 :])))
    return bytes(raw)


_valid_rec = st.builds(
    Rec,
    value=st.one_of(st.none(), st.binary(max_size=40), st.sampled_from([b"v" * 20_000])),
    key=st.one_of(st.none(), st.binary(max_size=8)),
    headers=st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=4))), max_size=2),
    timestamp=st.integers(-1, 2**50),
    offset_delta=st.none(),
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)  # cleared per example
@given(
    batches=st.lists(
        st.tuples(
            st.sampled_from(["none", "lz4", "zstd"]), st.lists(_valid_rec, min_size=1, max_size=5), st.integers(0, 3)
        ),
        min_size=1,
        max_size=4,
    ),
    check_crcs=st.booleans(),
    fetch_offset=st.integers(0, 20),
)
def test_fast_path_agrees_on_valid_data_by_itself(exact_calls, batches, check_crcs, fetch_offset):
    data, offset = b"", 0
    for codec, recs, gap in batches:
        data += batch(recs, base_offset=offset, codec=codec)
        offset += len(recs) + gap
    exact_calls.clear()
    same(data, check_crcs=check_crcs, fetch_offset=fetch_offset)
    assert exact_calls == []


@given(st.lists(st.integers(-(2**62) + 1, 2**62 - 1), min_size=1, max_size=50))
def test_vectorized_varints_read_what_the_varint_loop_reads(values):
    import numpy as np
    from kafka.record.util import encode_varint

    from fsm_consumer.fetch._decode_v2 import varint
    from fsm_consumer.fetch._vector import _varints

    buf = bytearray()
    starts = []
    for v in values:
        starts.append(len(buf))
        encode_varint(v, buf.append)
    got, sizes = _varints(np.frombuffer(bytes(buf), dtype=np.uint8), np.array(starts, dtype=np.int64))
    expected = [varint(bytes(buf), s) for s in starts]
    assert got.tolist() == [v for v, _ in expected] == values
    assert (np.array(starts) + sizes).tolist() == [p for _, p in expected]


def test_decoding_to_columns_never_imports_pandas():
    """pyarrow imports pandas on its first pa.array()/to_numpy() (~50 MB, ~0.5 s in every Spark task's
    worker); the fetch path builds its arrays from buffers instead."""
    import subprocess
    import sys

    script = """
import sys
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.fetch._columns import EMPTY_PARTITION, assemble, decode_partition_columns
from fsm_consumer.fetch.testing import Rec, batch
from fsm_consumer.spark._schema import to_spark
recs = [Rec(b"v%d" % i if i % 3 else None, key=None if i % 2 else b"k%d" % i,
            headers=[("h", b"x"), ("n", None)][: i % 3], timestamp=-1 if i == 4 else 1_700_000_000_000 + i)
        for i in range(9)]
got = decode_partition_columns("t", 0, batch(recs, base_offset=5), fetch_offset=7)
out = assemble([(TopicPartition("t", 0), got.columns), (TopicPartition("u", 1), got.columns.slice(1, 3))])
rows = to_spark(out, True)
assert rows.num_rows == 7 + 3 and EMPTY_PARTITION.num_rows == 0
assert rows.column("timestampType").to_pylist()[:3] == [0, 0, -1]  # offset 9 has no timestamp
print("pandas" in sys.modules)
"""
    pytest.importorskip("pyspark")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
