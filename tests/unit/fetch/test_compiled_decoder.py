"""The compiled decoder (fetch/_cdecode.c) against the pure-Python paths: the same records (decode_records
against the loop) and the same columns (scan_fields against the Python scan and numpy parse), with the same
errors, on well-formed logs of every kind and on damaged ones (CRCs unchecked, so the damage reaches the
decoders), at any fetch offset. Skipped, saying why, where the package was installed without a compiler."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the strategies of the corruption tests

import pyarrow as pa  # noqa: E402
from test_record_corruption import FUZZ, logs, mutate, mutation_st  # noqa: E402

from fsm_consumer.fetch import TopicPartition, _assemble, _columns, _decode, _decode_v2, decode_partition  # noqa: E402
from fsm_consumer.fetch.testing import Rec, batch  # noqa: E402

pytestmark = pytest.mark.skipif(
    _decode_v2._compiled is None, reason="fsm_consumer was installed without a C compiler: no compiled decoder"
)


def both(data, **kw):
    """decode_partition with the loop alone, then with the compiled decoder."""
    kw.setdefault("fetch_offset", 0)
    try:
        _decode.decode_records = _decode_v2.decode_records
        loop = decode_partition("t", 3, data, **kw)
    finally:
        _decode.decode_records = _decode_v2.decode_records_compiled
    return loop, decode_partition("t", 3, data, **kw)


def same(loop, compiled) -> None:
    assert compiled.records == loop.records
    assert [type(r) for r in compiled.records] == [type(r) for r in loop.records]
    assert (compiled.next_offset, compiled.bytes, compiled.leader_epoch) == (
        loop.next_offset,
        loop.bytes,
        loop.leader_epoch,
    )
    assert type(compiled.error) is type(loop.error) and str(compiled.error) == str(loop.error)


def test_it_is_what_decode_partition_uses():
    assert _decode.decode_records is _decode_v2.decode_records_compiled


@FUZZ
@given(logs(), st.integers(0, 30))
def test_well_formed_logs_decode_the_same(log, fetch_offset):
    data, _, _ = log
    same(*both(data, fetch_offset=fetch_offset))


@FUZZ
@given(logs(), mutation_st, st.integers(0, 12))
def test_damaged_logs_decode_the_same_with_the_same_error(log, mutation, fetch_offset):
    data = mutate(log[0], mutation)
    same(*both(data, fetch_offset=fetch_offset, check_crcs=False))


def test_keys_nulls_empties_log_append_time_and_headers_beside_plain_records():
    data = (
        batch([Rec(b"v%d" % i, key=b"k%d" % i) for i in range(40)], base_offset=0)
        + batch([Rec(None), Rec(b"", key=b""), Rec(b"x" * 300, key=b"y" * 200)], base_offset=40)
        + batch([Rec(b"t")], base_offset=43, log_append_time=1_800_000_000_000)
        + batch([Rec(b"h", headers=[("a", b"1"), ("é", None)]), Rec(b"p")], base_offset=44)
    )
    loop, compiled = both(data, fetch_offset=5)
    same(loop, compiled)
    assert [r.offset for r in compiled.records] == list(range(5, 46))
    assert compiled.records[-2].headers == (("a", b"1"), ("é", None)) and compiled.records[-3].timestamp_type == 1
    assert compiled.records[-2].serialized_header_size == 4 and compiled.records[-1].serialized_header_size == -1


def test_a_header_key_that_is_not_utf8_is_the_loops_to_word_even_below_the_fetch_offset():
    good = batch([Rec(b"h", headers=[("kk", b"1")]), Rec(b"p")], base_offset=0)
    bad = good.replace(b"kk", b"k\xff")  # the CRC is over the record bytes: unchecked, the damage reaches the decoder
    for fetch_offset in (0, 1):  # at 1 the bad record is below the fetch offset: still an error, as the loop says
        loop, compiled = both(bad, fetch_offset=fetch_offset, check_crcs=False)
        same(loop, compiled)
        assert "UTF-8" in str(compiled.error)


def both_columns(data, **kw):
    """decode_partition_columns with the Python walk, scan and Arrow's gather, then compiled (the walk of the
    whole fetch where it takes it, fetch/_cwalk.c, else the scan of each batch)."""
    kw.setdefault("fetch_offset", 0)
    saved = _columns._walk_columns, _columns._scan_fields, _columns._views
    try:
        _columns._walk_columns = _columns._scan_fields = _columns._views = None
        python = _columns.decode_partition_columns("t", 3, data, **kw)
    finally:
        _columns._walk_columns, _columns._scan_fields, _columns._views = saved
    return python, _columns.decode_partition_columns("t", 3, data, **kw)


def same_columns(python, compiled) -> None:
    # as poll_batch() hands them out (the compiled path's keys and values are views until then)
    tp = TopicPartition("t", 3)
    assert _columns.assemble([(tp, compiled.columns)]).equals(_columns.assemble([(tp, python.columns)]))
    assert isinstance(python.columns.values, pa.Array) and python.columns.values.type == pa.binary()
    assert compiled.columns.num_rows == 0 or isinstance(compiled.columns.values, _columns.Views)
    assert compiled.columns.log_append == python.columns.log_append  # LogAppendTime ranges
    assert (compiled.next_offset, compiled.bytes, compiled.leader_epoch) == (
        python.next_offset,
        python.bytes,
        python.leader_epoch,
    )
    assert type(compiled.error) is type(python.error) and str(compiled.error) == str(python.error)


@FUZZ
@given(logs(), st.integers(0, 30))
def test_well_formed_logs_give_the_same_columns(log, fetch_offset):
    data, _, _ = log
    same_columns(*both_columns(data, fetch_offset=fetch_offset))


@FUZZ
@given(logs(), mutation_st, st.integers(0, 12))
def test_damaged_logs_give_the_same_columns_and_error(log, mutation, fetch_offset):
    data = mutate(log[0], mutation)
    same_columns(*both_columns(data, fetch_offset=fetch_offset, check_crcs=False))


def test_long_batches_scanned_without_the_interpreter_lock_give_the_same_columns():
    # 64 records or more (RELEASE_MIN_RECORDS): scan_fields and views let go of the lock for their loops
    recs = [
        Rec(None if i % 7 == 0 else b"v%d" % i * (i % 5), key=None if i % 3 == 0 else b"k%d" % i) for i in range(200)
    ]
    data = batch(recs, base_offset=0) + batch([Rec(b"x" * 300, key=b"")] * 70, base_offset=200)
    python, compiled = both_columns(data, fetch_offset=3)
    same_columns(python, compiled)
    assert compiled.columns.num_rows == 267 and compiled.columns.values.nulls == len(range(7, 200, 7))
    # the last of 80 records has headers: the compiled scan declines after 79, inside its loop
    declined = batch([Rec(b"p%d" % i) for i in range(79)] + [Rec(b"h", headers=[("a", b"1")])], base_offset=270)
    python, compiled = both_columns(data + declined, fetch_offset=0)
    same_columns(python, compiled)
    assert compiled.columns.num_rows == 350


def test_a_batch_the_compiled_scan_declines_hands_the_rest_of_the_fetch_to_the_python_scan(monkeypatch):
    data = (
        batch([Rec(b"v%d" % i, key=b"k%d" % i) for i in range(40)], base_offset=0)
        + batch([Rec(None), Rec(b"", key=b"")], base_offset=40)
        + batch([Rec(b"h", headers=[("a", b"1")]), Rec(b"p")], base_offset=42)  # declined: headers
        + batch([Rec(b"t", key=None)], base_offset=44, log_append_time=1_800_000_000_000)
    )
    calls = []
    scan = _columns._vector.scan
    monkeypatch.setattr(_columns, "_walk_columns", None)  # each batch scanned, as when the walk hands a fetch over
    monkeypatch.setattr(_columns._vector, "scan", lambda *a: calls.append(a[1]) or scan(*a))
    python, compiled = both_columns(data, fetch_offset=5)
    same_columns(python, compiled)
    rows = compiled.columns.to_batch().to_pylist()
    assert [r["offset"] for r in rows] == list(range(5, 45))
    assert rows[35]["key"] is None and rows[36]["key"] == b"" and rows[37]["headers"] == [{"key": "a", "value": b"1"}]
    assert calls[4:] == [2, 1]  # with the compiled scan: the batch with headers and the one after it


def test_the_compiled_scan_alone_reads_a_fetch_without_headers(monkeypatch):
    data = batch([Rec(b"v%d" % i, key=None if i % 2 else b"k") for i in range(20)], base_offset=100)
    monkeypatch.setattr(_columns, "_walk_columns", None)  # each batch scanned, as when the walk hands a fetch over
    monkeypatch.setattr(_columns._vector, "parse", lambda *a: pytest.fail("the numpy parse ran"))
    monkeypatch.setattr(_columns._vector, "scan", lambda *a: pytest.fail("the Python scan ran"))
    got = _columns.decode_partition_columns("t", 3, data, fetch_offset=100)
    assert got.columns.to_batch().column("offset").to_pylist() == list(range(100, 120))
    assert got.columns.to_batch().column("key").to_pylist() == [None if i % 2 else b"k" for i in range(20)]


def test_a_record_below_its_batchs_base_is_an_error_as_the_loop_says_not_dropped():
    # found by test_columns' property test: the compiled decoder dropped any record below the fetch offset,
    # the loop only those of a batch beginning before it; an offset below its batch's base is corrupt data
    data = batch([Rec(b"a", offset_delta=-1), Rec(b"b", offset_delta=1)], base_offset=10)
    loop, compiled = both(data, fetch_offset=10, check_crcs=False)
    same(loop, compiled)
    assert compiled.error is not None and "out of order or outside" in str(compiled.error)


_items = st.lists(st.one_of(st.none(), st.binary(max_size=30)), max_size=12)


@FUZZ
@given(st.lists(st.tuples(_items, st.booleans(), st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=5))
def test_binary_and_view_pieces_join_into_one_binary_array(pieces):
    """assemble's join of key or value columns (binary_view from the compiled path, binary from the
    others, slices of either) gives every element in order, nulls included, as one binary array."""
    spec, expected = [], []
    for items, view, a, b in pieces:
        a, b = sorted((min(a, len(items)), min(b, len(items))))
        if view:  # as _cdecode.views gives them: the buffers of a binary_view array
            array = pa.array(items, pa.binary_view())
            validity, views, *parts = array.buffers()
            bits = None if validity is None else validity.to_pybytes()
            column = _assemble.Views(bits, views, array.null_count, parts)
        else:
            column = pa.array(items, pa.binary())
        spec.append((column, a, b))
        expected += items[a:b]
    joined = _assemble._binary(spec)
    assert joined.type == pa.binary()
    joined.validate(full=True)
    assert joined.to_pylist() == expected
    assert joined.null_count == expected.count(None)


def test_a_view_naming_no_buffer_is_refused_not_read():
    views = bytearray(16)
    views[0:4] = (20).to_bytes(4, "little")  # 20 bytes out of line, in buffer 5 of none
    views[8:12] = (5).to_bytes(4, "little")
    with pytest.raises(ValueError, match="outside its buffer"):
        _assemble._to_binary([(0, None, 0, 1, bytes(views), ())])
    with pytest.raises(ValueError, match="shorter than its offset and length"):
        _assemble._to_binary([(0, None, 1, 1, bytes(views), ())])
