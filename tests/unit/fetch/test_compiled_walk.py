"""The compiled walk (fetch/_cwalk.c) against the Python walk and scan: the same columns, next offset, bytes,
leader epoch and error for a whole fetch, on logs of plain v2 batches (which it takes: proven below, not
assumed) and of every other kind (which it hands to the walk), well-formed, damaged, cut anywhere, at any
fetch offset, under both isolation levels; and batches_end against fetched_end's Python walk of the batch
headers. Skipped, saying why, where the package was installed without a C compiler."""

from __future__ import annotations

import itertools
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the strategies of the corruption tests

from test_compiled_decoder import both_columns, same, same_columns  # noqa: E402
from test_record_corruption import FUZZ, headers_st, logs, mutate, mutation_st  # noqa: E402

from fsm_consumer.fetch import TopicPartition, _assemble, _columns, _decode, decode_partition  # noqa: E402
from fsm_consumer.fetch.testing import ABORT, COMMIT, Rec, batch, control_batch  # noqa: E402
from fsm_consumer.managers import _log_end  # noqa: E402

pytestmark = pytest.mark.skipif(
    _columns._walk_columns is None, reason="fsm_consumer was installed without a C compiler: no compiled walk"
)

plain_record_st = st.builds(
    Rec,
    value=st.one_of(st.none(), st.binary(max_size=40)),
    key=st.one_of(st.none(), st.binary(max_size=8)),
    headers=st.one_of(st.just(()), st.just(()), headers_st),
    timestamp=st.integers(0, 2**41),
    offset_delta=st.none(),
)
# plain v2 batches (gaps between them, as compaction leaves), LogAppendTime ones and transaction markers
batch_kind_st = st.tuples(
    st.sampled_from(["data", "data", "data", "log_append", "marker"]),
    st.lists(plain_record_st, min_size=1, max_size=6),
    st.integers(0, 3),  # the gap before the batch
)


@st.composite
def plain_logs(draw):
    """(data, the offsets of the records with headers)."""
    data, offset, headed = b"", draw(st.integers(0, 5)), set()
    for kind, recs, gap in draw(st.lists(batch_kind_st, min_size=1, max_size=5)):
        offset += gap
        if kind == "marker":
            data += control_batch(offset, 7, marker=draw(st.sampled_from([ABORT, COMMIT])), leader_epoch=3)
            offset += 1
            continue
        log_append = 1_800_000_000_000 + offset if kind == "log_append" else None
        data += batch(recs, base_offset=offset, leader_epoch=offset % 4, log_append_time=log_append)
        headed |= {offset + i for i, r in enumerate(recs) if r.headers}
        offset += len(recs)
    return data, headed


def both_record_walks(data, **kw):
    """decode_partition with the Python walk (each batch by the compiled decoder), then with the compiled walk."""
    kw.setdefault("fetch_offset", 0)
    saved = _decode._walk_records
    try:
        _decode._walk_records = None
        python = decode_partition("t", 3, data, **kw)
    finally:
        _decode._walk_records = saved
    return python, decode_partition("t", 3, data, **kw)


def same_both_ways(data, **kw) -> None:
    """The compiled walk gives what the Python walk gives: poll()'s records and poll_batch()'s columns."""
    same(*both_record_walks(data, **kw))
    same_columns(*both_columns(data, **kw))  # the Python side: the walk, scan and Arrow's gather


def walked_each(data, fetch_offset=0, committed=False, check_crcs=True) -> tuple[bool, bool]:
    """Whether the compiled walks take the fetch (rather than handing it to the Python walk): records, columns."""
    columns = _columns._walked_columns(data, fetch_offset, committed, check_crcs) is not None
    out: list = []
    walk = _decode._walk_records
    got = walk(data, fetch_offset, committed, check_crcs, _decode.crc32c, "t", 3, out, _decode.ConsumerRecord)
    return got is not NotImplemented, columns


def walked(data, fetch_offset=0, committed=False, check_crcs=True) -> bool:
    """Whether both compiled walks take the fetch; they agree (no headers below the fetch offset here)."""
    records, columns = walked_each(data, fetch_offset, committed, check_crcs)
    assert records == columns
    return columns


def test_it_is_what_decode_partition_and_decode_partition_columns_use(monkeypatch):
    data = batch([Rec(b"v%d" % i) for i in range(3)], base_offset=0)
    monkeypatch.setattr(_decode, "walk", lambda *a, **k: pytest.fail("the Python walk ran"))
    monkeypatch.setattr(_columns, "walk", lambda *a, **k: pytest.fail("the Python walk ran"))
    decoded = decode_partition("t", 0, data, fetch_offset=1)
    assert [r.value for r in decoded.records] == [b"v1", b"v2"] and decoded.next_offset == 3
    columns = _columns.decode_partition_columns("t", 0, data, fetch_offset=0)
    assert columns.columns.num_rows == 3 and columns.next_offset == 3 and columns.error is None


def test_deserializers_take_the_python_walk(monkeypatch):
    data = batch([Rec(b"v")], base_offset=0)
    monkeypatch.setattr(_decode, "_walk_records", lambda *a: pytest.fail("the compiled walk ran"))
    assert decode_partition("t", 0, data, fetch_offset=0, value_deserializer=bytes.upper).records[0].value == b"V"


@FUZZ
@given(plain_logs(), st.integers(0, 40), st.booleans())
def test_plain_logs_are_walked_in_one_call_with_the_same_records_and_columns(log, fetch_offset, committed):
    data, headed = log
    isolation = "read_committed" if committed else "read_uncommitted"
    same_both_ways(data, fetch_offset=fetch_offset, isolation_level=isolation)
    markers = b"\x00\x00\x00\x00\x00\x00\x00\x07" in data  # a control batch's producer id
    if not (committed and markers):  # read_committed: the walk reads each marker itself
        records, columns = walked_each(data, fetch_offset, committed)
        # the columns' walk leaves headers on a record below the fetch offset to the Python walk to check
        assert records and columns == all(o >= fetch_offset for o in headed)


@FUZZ
@given(plain_logs(), mutation_st, st.integers(0, 30), st.booleans())
def test_damaged_plain_logs_give_the_same_records_columns_and_error(log, mutation, fetch_offset, check_crcs):
    same_both_ways(mutate(log[0], mutation), fetch_offset=fetch_offset, check_crcs=check_crcs)


@FUZZ
@given(logs(), st.integers(0, 10**6), st.integers(0, 30), st.booleans())
def test_logs_of_every_kind_whole_or_cut_give_the_same_records_and_columns(log, cut, fetch_offset, committed):
    # legacy and compressed batches, headers, aborted transactions: the compiled walk hands these over
    isolation = "read_committed" if committed else "read_uncommitted"
    for data in (log[0], log[0][: cut % (len(log[0]) + 1)]):
        same_both_ways(data, fetch_offset=fetch_offset, isolation_level=isolation)


@FUZZ
@given(plain_logs(), st.integers(0, 10**6), st.integers(0, 30))
def test_plain_logs_cut_anywhere_give_the_same_records_and_columns(log, cut, fetch_offset):
    data = log[0]
    same_both_ways(data[: cut % (len(data) + 1)], fetch_offset=fetch_offset)


def test_a_record_out_of_its_batchs_range_with_crcs_unchecked_goes_to_the_python_walk():
    data = batch([Rec(b"a", offset_delta=-1), Rec(b"b", offset_delta=1)], base_offset=10)
    assert not walked(data, 10, check_crcs=False)
    same_both_ways(data, fetch_offset=10, check_crcs=False)
    assert "out of order or outside" in str(decode_partition("t", 3, data, fetch_offset=10, check_crcs=False).error)


def test_many_records_scanned_without_the_interpreter_lock_give_the_same_columns():
    # 64 records or more: the record pass lets go of the lock
    data = b"".join(
        batch([Rec(None if i % 5 == 0 else b"v%d" % i, key=b"k" * (i % 3)) for i in range(40)], base_offset=40 * b)
        for b in range(4)
    )
    python, compiled = both_columns(data, fetch_offset=17)
    same_columns(python, compiled)
    assert compiled.columns.num_rows == 160 - 17 and walked(data, 17)


def test_a_log_append_time_batch_begun_before_the_fetch_offset_keeps_its_whole_range():
    data = batch([Rec(b"a"), Rec(b"b"), Rec(b"c")], base_offset=10, log_append_time=1_900_000_000_000)
    python, compiled = both_columns(data, fetch_offset=11)
    same_columns(python, compiled)
    assert compiled.columns.log_append == [(0, 2)] and compiled.columns.num_rows == 2  # rows, of those kept


def test_bad_crcs_header_keys_not_utf8_and_compressed_batches_go_to_the_python_walk():
    plain = batch([Rec(b"x")], base_offset=0)
    assert walked(plain)
    headed = plain + batch([Rec(b"h", headers=[("a", b"1"), ("kk", None)])], base_offset=1)
    assert walked(headed)
    assert not walked(headed.replace(b"kk", b"k\xff"), check_crcs=False)
    same_both_ways(headed.replace(b"kk", b"k\xff"), check_crcs=False)
    assert walked_each(headed, fetch_offset=2) == (True, False)  # the columns': headers below the fetch offset
    assert not walked(plain + batch([Rec(b"z")], base_offset=1, codec="gzip"))
    bad = bytearray(plain)
    bad[-2] ^= 0xFF  # in the value: the CRC no longer matches
    assert not walked(bytes(bad)) and walked(bytes(bad), check_crcs=False)
    assert not walked(plain[:-1])  # not one whole batch: RecordTooLargeError, worded by the walk


# keys and values past 12 bytes too (a view holds up to 12 itself), empty ones, null values, keys not ASCII
long_headers_st = st.lists(
    st.tuples(
        st.sampled_from(["traceparent", "", "é", "a-key-of-twenty-bytes"]),
        st.one_of(st.none(), st.binary(max_size=30)),
    ),
    max_size=3,
)
headed_records_st = st.lists(
    st.builds(
        Rec,
        value=st.binary(max_size=20),
        headers=st.one_of(st.just(()), long_headers_st),
        timestamp=st.integers(0, 2**41),
        offset_delta=st.none(),
    ),
    min_size=1,
    max_size=12,
)


@FUZZ
@given(
    st.lists(headed_records_st, min_size=1, max_size=4),
    st.lists(st.integers(0, 60), min_size=2, max_size=8),
    st.integers(0, 6),
)
def test_headers_read_as_spans_give_the_python_pairs_column_in_any_slices_and_mixes(batches, cuts, fetch_offset):
    """poll_batch() hands out slices of several fetches: any slices of the spans the compiled walk gives,
    beside slices of the Python pairs, assemble to the column the Python pairs alone give."""
    data, offset = b"", 0
    for recs in batches:
        data += batch(recs, base_offset=offset)
        offset += len(recs)
    python, compiled = both_columns(data, fetch_offset=fetch_offset)
    same_columns(python, compiled)
    headed = [bool(r.headers) for recs in batches for r in recs]
    if any(headed[fetch_offset:]) and not any(headed[:fetch_offset]):  # else the Python walk checks those below
        assert isinstance(compiled.columns.headers, _assemble.HeaderViews)
    n = python.columns.num_rows
    bounds = sorted({0, n, *(c % (n + 1) for c in cuts)})
    spans = list(itertools.pairwise(bounds))
    for i, form in enumerate((python, compiled)):  # the slices alternate between the two forms, both ways
        other = compiled if form is python else python
        mixed = [
            (TopicPartition("t", j), (form if (j + i) % 2 else other).columns.slice(lo, hi - lo))
            for j, (lo, hi) in enumerate(spans)
        ]
        alone = [(TopicPartition("t", j), python.columns.slice(lo, hi - lo)) for j, (lo, hi) in enumerate(spans)]
        assert _assemble.assemble(mixed).equals(_assemble.assemble(alone))


def test_a_tracing_header_on_every_record_is_read_by_the_compiled_walk_as_spans():
    trace = ("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    recs = [Rec(b"v%d" % i, headers=[trace] if i % 3 else [trace, ("", None)]) for i in range(16)]
    data = b"".join(batch(recs, base_offset=16 * b) for b in range(8))
    python, compiled = both_columns(data)
    same_columns(python, compiled)
    assert isinstance(compiled.columns.headers, _assemble.HeaderViews) and walked(data)
    column = _assemble.assemble([(TopicPartition("t", 3), compiled.columns.slice(10, 4))]).column("headers")
    assert column.to_pylist() == [
        [{"key": "traceparent", "value": trace[1]}, {"key": "", "value": None}]
        if (10 + i) % 3 == 0
        else [{"key": "traceparent", "value": trace[1]}]
        for i in range(4)
    ]


def test_a_batch_counting_more_records_than_its_bytes_hold_is_refused_before_any_column_is_sized():
    raw = bytearray(batch([Rec(b"x")], base_offset=0))
    struct.pack_into(">i", raw, 57, 2**31 - 1)
    assert not walked(bytes(raw), check_crcs=False)
    same_columns(*both_columns(bytes(raw), check_crcs=False))


def ends_both(data, fetch_offset=0):
    saved = _log_end._batches_end
    try:
        _log_end._batches_end = None
        python = _log_end.fetched_end(data, fetch_offset)
    finally:
        _log_end._batches_end = saved
    return python, _log_end.fetched_end(data, fetch_offset)


@FUZZ
@given(logs(), mutation_st, st.integers(0, 10**6), st.integers(0, 30))
def test_where_a_fetch_ends_is_what_the_python_walk_of_headers_says(log, mutation, cut, fetch_offset):
    for data in (log[0], mutate(log[0], mutation), log[0][: cut % (len(log[0]) + 1)]):
        python, compiled = ends_both(data, fetch_offset)
        assert compiled == python


def test_a_base_offset_beyond_two_to_the_62_is_left_to_python_integers():
    data = batch([Rec(b"x")], base_offset=2**62 + 5)
    assert _log_end._batches_end(data) is NotImplemented
    assert _log_end.fetched_end(data, 0) == 2**62 + 6
