"""PartitionProgress: committable offset and done-offset metadata of out-of-order completion."""

from __future__ import annotations

import base64
import os
import random
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_consumer.parallel import _progress
from fsm_consumer.parallel._progress import METADATA_LIMIT, PartitionProgress, decode, encode

SETTINGS = settings(
    max_examples=int(os.environ.get("FSM_FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

offsets_sets = st.sets(st.integers(min_value=0, max_value=2_000), max_size=80)


def varints(*values: int) -> bytes:
    out = bytearray()
    for value in values:
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def log_with_gaps(draw_gaps: list[int], start: int) -> list[int]:
    """Offsets of a partition log from start, with gaps (compaction, markers) of the given sizes."""
    offsets, offset = [], start
    for gap in draw_gaps:
        offset += gap
        offsets.append(offset)
        offset += 1
    return offsets


# --- encoding ---------------------------------------------------------------------------------


def test_wire_format_is_pinned() -> None:
    # base 100; not-done 100-101, done 102-103, not-done 104, done 105
    assert encode(100, [105, 102, 103]) == "fsm1:" + b64(varints(100, 2, 2, 1, 1)) == "fsm1:ZAICAQE"
    assert decode("fsm1:ZAICAQE") == (100, [102, 103, 105])
    # base itself done: an empty first not-done run
    assert encode(7, [7, 8]) == "fsm1:" + b64(varints(7, 0, 2))
    assert encode(300, []) == "fsm1:" + b64(varints(300)) and decode(encode(300, [])) == (300, [])


def test_zlib_used_when_shorter() -> None:
    text = encode(0, range(1, 20_000, 2))  # 10,000 identical (1, 1) run pairs
    assert text.startswith("fsm1z:") and len(text) < 100
    raw = zlib.decompress(base64.urlsafe_b64decode(text[6:] + "=" * (-len(text[6:]) % 4)))
    assert raw == varints(0, *[1, 1] * 10_000)
    assert decode(text) == (0, list(range(1, 20_000, 2)))


@SETTINGS
@given(base=st.integers(min_value=0, max_value=(1 << 63) - 5_000), rel=offsets_sets)
def test_round_trip(base: int, rel: set[int]) -> None:
    done = {base + r for r in rel}
    text = encode(base, done)
    assert text.isascii() and text.startswith(("fsm1:", "fsm1z:"))
    assert decode(text) == (base, sorted(done))
    plain = "fsm1:" + b64(varints(base, *_progress._runs(base, sorted(done))))
    assert len(text) <= len(plain)  # zlib only when it is shorter


@SETTINGS
@given(base=st.integers(min_value=0, max_value=10**12), runs=st.lists(st.integers(1, 5_000), max_size=60))
def test_round_trip_long_runs(base: int, runs: list[int]) -> None:
    # alternating gap/run lengths, multi-byte varints included
    done, position = [], base
    for i, length in enumerate(runs):
        if i % 2:
            done.extend(range(position, position + length))
        position += length
    assert decode(encode(base, done)) == (base, done)


def test_encode_rejects_bad_input() -> None:
    for base, done in ((-1, []), (10, [9]), (1 << 63, [])):
        with pytest.raises(ValueError):
            encode(base, done)


FOREIGN = [
    "",
    "hello",
    "fsm1:",  # no base
    "fsm1:!!!",
    "fsm1:ZAI",  # base + a lone not-done run
    "fsm1:gA",  # truncated varint
    "fsm1:" + b64(b"\xff" * 11),  # varint longer than 10 bytes
    "fsm1:" + b64(varints(100, 2, 0)),  # empty done run
    "fsm1:" + b64(varints(100, 2, 2, 0, 1)),  # empty inner not-done run
    "fsm1:" + b64(varints(1 << 63)),  # base beyond int64
    "fsm1:" + b64(varints(0, 0, 1 << 40)),  # implausibly many done offsets (no allocation)
    "fsm1:ZAICAQE=",  # padding is not ours
    "fsm1:ZAI+AQE",  # standard-alphabet character
    "fsm1:ZAIC AQE",
    "fsm1:ZAICA",  # impossible base64 length
    "fsm1z:AAAA",  # not zlib
    "fsm1z:" + b64(zlib.compress(varints(5, 1, 1))[:-2]),  # truncated zlib stream
    "fsm1z:" + b64(zlib.compress(varints(5, 1, 1)) + b"x"),  # trailing data
    "fsm2:ZAICAQE",
    "FSM1:ZAICAQE",
    "fsm1:ZAICAQÉ",
    # Confluent Parallel Consumer-like: standard base64 of a magic byte and a payload
    base64.b64encode(b"n\x00\x00\x00\x02\x00\x00\x00\x05").decode(),
    base64.b64encode(b"l\x00\x10" + bytes(16)).decode(),
    base64.b64encode(b"J" + zlib.compress(b"\x00\x01\x00\x02")).decode(),
    '{"host": "worker-1", "ts": 1700000000}',
]


@pytest.mark.parametrize("metadata", FOREIGN)
def test_foreign_metadata_restores_to_nothing_done(metadata: str) -> None:
    if metadata:
        with pytest.raises(ValueError):
            decode(metadata)
    progress = PartitionProgress.restore(100, metadata)
    assert progress.committable == 100 and progress.metadata() == "" and progress.metadata_bytes == 0
    assert all(progress.receive(offset) for offset in range(100, 120))


def test_restore_none_and_non_string() -> None:
    assert PartitionProgress.restore(5, None).receive(5) is True
    assert PartitionProgress.restore(5, b"fsm1:BQEB").receive(6) is True  # type: ignore[arg-type]


def test_restore_with_other_base_trusts_nothing() -> None:
    # metadata committed with offset 40 but the offset now is 50 (e.g. reset): not trusted
    text = encode(40, [45, 60])
    assert PartitionProgress.restore(40, text).receive(60) is False
    progress = PartitionProgress.restore(50, text)
    assert all(progress.receive(offset) for offset in range(50, 70))


# --- progress model ---------------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_matches_brute_force(data: st.DataObject) -> None:
    start = data.draw(st.integers(0, 1_000), label="start")
    log = log_with_gaps(data.draw(st.lists(st.integers(0, 3), max_size=60), label="gaps"), start)
    span = (log[-1] + 3) if log else start + 3
    restored = data.draw(st.sets(st.integers(start, span)), label="restored")
    limit = data.draw(st.sampled_from([0, 12, 40, 100, METADATA_LIMIT]), label="limit")
    progress = PartitionProgress(start, restored, limit)
    done, pending, received = set(restored), set(), []
    remaining = list(log)
    while remaining or pending:
        if remaining and (not pending or data.draw(st.booleans())):
            offset = remaining.pop(0)
            fresh = offset not in done
            assert progress.receive(offset) is fresh
            received.append(offset)
            if fresh:
                pending.add(offset)
        else:
            offset = data.draw(st.sampled_from(sorted(pending)))
            pending.remove(offset)
            done.add(offset)
            progress.complete(offset)
            progress.complete(offset)  # idempotent
        committable = min(pending) if pending else (received[-1] + 1 if received else start)
        assert progress.committable == committable
        assert progress.pending == len(pending)
        above = sorted(o for o in done if o >= committable)
        full = encode(committable, above) if above else ""
        assert progress.metadata_bytes == len(full)
        assert progress.should_block() is (len(full) > limit - min(256, limit // 4))
        assert progress.may_resume() is (len(full) <= limit // 2)
        text = progress.metadata()
        if len(full) <= limit:
            assert text == full and not progress.truncated
        else:
            assert progress.truncated and len(text) <= limit
            kept = decode(text)[1] if text else []
            assert kept == above[: len(kept)]


@SETTINGS
@given(data=st.data())
def test_restart_skips_exactly_the_done_offsets(data: st.DataObject) -> None:
    start = data.draw(st.integers(0, 10**9), label="start")
    log = log_with_gaps(data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=120), label="gaps"), start)
    received = log[: data.draw(st.integers(0, len(log)), label="received")]
    order = data.draw(st.permutations(received), label="completion order")
    completed = order[: data.draw(st.integers(0, len(order)), label="completed")]
    limit = data.draw(st.sampled_from([30, 200, METADATA_LIMIT]), label="limit")
    before = PartitionProgress(start, limit=limit)
    for offset in received:
        assert before.receive(offset)
    for offset in completed:
        before.complete(offset)
    committed, text = before.committable, before.metadata()
    done_above = {o for o in completed if o >= committed}

    after = PartitionProgress.restore(committed, text, limit)
    if not before.truncated:
        assert after.metadata() == text  # re-committing right away keeps the same information
    skipped = {offset for offset in log if offset >= committed and not after.receive(offset)}
    assert skipped <= done_above
    if before.truncated:
        assert sorted(skipped) == sorted(done_above)[: len(skipped)]  # a prefix in offset order
    else:
        assert skipped == done_above


def test_restored_offsets_before_and_at_committable() -> None:
    progress = PartitionProgress(10, [11, 12, 20])
    # restored offsets are kept in the metadata before they are received again
    assert progress.committable == 10 and decode(progress.metadata()) == (10, [11, 12, 20])
    assert progress.receive(10) and progress.committable == 10
    progress.complete(10)
    # committable = last received + 1, itself done: an empty first not-done run
    assert progress.committable == 11 and decode(progress.metadata()) == (11, [11, 12, 20])
    assert progress.receive(11) is False and progress.committable == 12
    assert progress.receive(15) and progress.committable == 15  # 12-14 compacted away
    assert decode(progress.metadata()) == (15, [20])
    assert progress.receive(20) is False and progress.committable == 15 and progress.pending == 1
    progress.complete(15)
    assert progress.committable == 21 and progress.metadata() == "" and progress.pending == 0


def test_receive_and_complete_misuse() -> None:
    progress = PartitionProgress(10)
    with pytest.raises(ValueError):
        progress.receive(9)  # below the committed offset
    assert progress.receive(10) and progress.receive(12)
    for offset in (12, 11):
        with pytest.raises(ValueError):
            progress.receive(offset)  # not increasing
    for offset in (11, 13):
        with pytest.raises(ValueError):
            progress.complete(offset)  # never received
    progress.complete(12)
    progress.complete(12)
    progress.complete(5)  # below committable: done already
    assert progress.committable == 10 and progress.pending == 1
    for args in ((-1,), (5, [4]), (5, (), -1)):
        with pytest.raises(ValueError):
            PartitionProgress(*args)


# --- truncation -------------------------------------------------------------------------------


def stuck_head(done: list[int], limit: int) -> PartitionProgress:
    """Offset 0 pending forever, offsets up to max(done) received, those in done completed."""
    progress = PartitionProgress(0, limit=limit)
    for offset in range(max(done) + 1):
        progress.receive(offset)
    for offset in done:
        progress.complete(offset)
    return progress


def check_truncation(done: list[int], limit: int) -> PartitionProgress:
    progress = stuck_head(done, limit)
    text = progress.metadata()
    assert text.isascii() and len(text) <= limit
    assert progress.truncated is (progress.metadata_bytes > limit)
    kept = decode(text)[1] if text else []
    assert kept == done[: len(kept)]  # a prefix in offset order
    if progress.truncated:
        # one more offset would not fit: the prefix is maximal
        assert len(encode(0, done[: len(kept) + 1])) > limit
    else:
        assert kept == done
    return progress


def test_every_other_offset_over_10000() -> None:
    done = list(range(1, 10_000, 2))
    progress = check_truncation(done, METADATA_LIMIT)
    assert not progress.truncated and progress.metadata().startswith("fsm1z:")  # regular: zlib wins
    for limit in (0, 5, 9, 20, 30):
        check_truncation(done, limit)
    assert check_truncation(done, 20).truncated


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_patterns_over_the_limit(seed: int) -> None:
    rng = random.Random(seed)
    offset, done = 0, []
    for _ in range(5_000):  # isolated done offsets, incompressible gaps (some 2-byte varints)
        offset += rng.randint(2, 200)
        done.append(offset)
    progress = check_truncation(done, METADATA_LIMIT)
    assert progress.truncated and progress.metadata_bytes > METADATA_LIMIT
    kept = decode(progress.metadata())[1]
    assert 0 < len(kept) < len(done)
    restored = PartitionProgress.restore(0, progress.metadata())
    skipped = [o for o in range(done[-1] + 1) if not restored.receive(o)]
    assert skipped == kept  # the left-out ones are handled again: at least once


@SETTINGS
@given(rel=st.sets(st.integers(1, 3_000), min_size=1, max_size=300), limit=st.integers(0, 400))
def test_truncation_property(rel: set[int], limit: int) -> None:
    check_truncation(sorted(rel), limit)


# --- back-pressure and cost -------------------------------------------------------------------


def test_block_and_resume_hysteresis() -> None:
    rng = random.Random(7)
    progress = PartitionProgress(0)
    offset, blocked, states = 0, False, []
    while not blocked:  # dispatch until blocked: each pending offset followed by random done ones
        progress.receive(offset)
        offset += 1
        for _ in range(rng.randint(1, 60)):
            progress.receive(offset)
            progress.complete(offset)
            offset += 1
        offset += rng.randint(0, 3)  # compacted gaps
        blocked = progress.should_block()
    assert progress.metadata_bytes > METADATA_LIMIT - 256 and not progress.may_resume()
    while progress.pending:  # the stuck ones finish in order, dispatching stays paused
        progress.complete(progress.committable)
        if blocked and progress.may_resume():
            blocked = False
        states.append((progress.metadata_bytes, blocked, progress.should_block(), progress.may_resume()))
    band = [s for s in states if METADATA_LIMIT // 2 < s[0] <= METADATA_LIMIT - 256]
    assert band and all(blocked and not block and not resume for _, blocked, block, resume in band)
    first_resume = next(i for i, s in enumerate(states) if not s[1])
    assert states[first_resume][0] <= METADATA_LIMIT // 2 and all(s[1] for s in states[:first_resume])
    assert progress.metadata_bytes == 0 and progress.may_resume() and not progress.should_block()


def test_small_limit_keeps_hysteresis_ordered() -> None:
    progress = stuck_head([2, 4, 6, 8], limit=40)
    size = progress.metadata_bytes
    assert progress.should_block() is (size > 30) and progress.may_resume() is (size <= 20)
    assert not (progress.should_block() and progress.may_resume())


def test_size_checks_use_the_bound_then_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = encode(0, range(2, 200, 2)), encode(0, [*range(2, 200, 2), 200])
    calls = []
    real = _progress._pack
    monkeypatch.setattr(_progress, "_pack", lambda *a: calls.append(a) or real(*a))
    progress = stuck_head(list(range(2, 200, 2)), METADATA_LIMIT)
    # 99 done offsets within 200: the bound proves the size small, nothing is encoded
    assert not progress.should_block() and progress.may_resume() and calls == []
    size = progress.metadata_bytes
    assert progress.metadata_bytes == size and len(calls) == 1  # cached
    progress.receive(200)  # a new pending offset changes nothing encoded
    assert progress.metadata_bytes == size and len(calls) == 1
    assert progress.metadata() == expected[0] and len(calls) == 1  # fits: the cached full encoding
    progress.complete(200)
    assert progress.metadata_bytes == len(expected[1]) and len(calls) == 2


def test_memory_is_bounded_by_records_in_flight() -> None:
    # 100,000 records, completed out of order in windows of 64: nothing piles up
    progress = PartitionProgress(0)
    window, largest = 64, 0
    for begin in range(0, 100_000, window):
        for offset in range(begin, begin + window):
            assert progress.receive(offset)
        for offset in reversed(range(begin, begin + window)):
            progress.complete(offset)
            largest = max(largest, len(progress._order), len(progress._done), progress.pending)
        assert progress.committable == begin + window
    assert largest <= window
    assert (len(progress._order), len(progress._done), progress.pending, progress.metadata()) == (0, 0, 0, "")
