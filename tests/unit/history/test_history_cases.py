"""Issue 46's cases: small hand-built histories, each breaking a guarantee the README promises, each of which
an earlier checker passed. Every one must now be reported, with the rule it breaks (or refused as input that
cannot be judged); and the clean variant beside it must pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fsm_consumer.cli import main
from fsm_consumer.history import IncomparableHistories, check, load

from .test_history_check import A, B, Line, T, assign, commit, line, owned, read, reset, rules_of, started

C = "c@103#1"


def only(events: list[Line], rule: str, **kw: Any) -> list[Any]:
    result = check(events, **kw)
    assert rules_of(result) == {rule}, result.format()
    return result.violations


def owner_a(*tail: Line) -> list[Line]:
    """a owns events-0 (generation 1), reads 0..9 and commits 10."""
    return [
        started(A, 0),
        started(B, 1),
        owned("assigned", A, 10, 1, 0),
        reset(A, 11, 1, 0, 0, why="earliest"),
        read(A, 21, 1, 0, 0, 9, poll=20),
        commit(A, 30, 1, {0: 10}, sent=25),
        *tail,
    ]


# 1 -------------------------------------------------------------------------------------------------------


def test_1_a_poll_begun_after_the_members_own_session_expired_with_no_other_owner() -> None:
    events = owner_a(owned("session_expired", A, 50, 1, 0), read(A, 60, 1, 0, 10, 14, poll=55))
    (v,) = only(events, "E")
    assert v.consumers == (A,) and v.offsets == (10, 14)
    assert "after its own lines had ended the ownership" in v.message
    # begun before its own session_expired line, handed out after it: it knew as well
    only(owner_a(owned("session_expired", A, 50, 1, 0), read(A, 60, 1, 0, 10, 14, poll=45)), "E")
    assert check(owner_a(owned("session_expired", A, 50, 1, 0))).ok


# 2 -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["revoked", None], ids=["left", "died"])
def test_2_a_zombie_reads_after_the_newer_owner_left_or_died(end: str | None) -> None:
    newer = [
        owned("assigned", B, 100, 2, 0),
        reset(B, 101, 2, 0, 10),
        read(B, 111, 2, 0, 10, 19, poll=110),
        commit(B, 120, 2, {0: 20}, sent=115),
    ]
    if end is not None:
        newer.append(owned(end, B, 150, 2, 0))
    events = owner_a(*newer, read(A, 200, 1, 0, 10, 14, poll=199))
    (v,) = only(events, "E")
    assert v.consumers == (A, B) and v.offsets == (10, 14)
    assert f"ended at 100.0 ms, when {B} was assigned the partition (generation 2)" in v.message
    assert check(owner_a(*newer)).ok


# 3 -------------------------------------------------------------------------------------------------------


def test_3_a_late_assigned_of_an_older_generation_is_the_stale_one() -> None:
    events = [
        started(A, 0),
        started(B, 1),
        owned("assigned", B, 10, 5, 0),
        reset(B, 11, 5, 0, 0, why="earliest"),
        owned("assigned", A, 20, 4, 0),  # an answer of round 4 logged after round 5 gave the partition to b
        read(A, 31, 4, 0, 0, 9, poll=30),
        read(B, 32, 5, 0, 0, 9, poll=30),
    ]
    result = check(events)
    (v,) = result.by_rule()["E"]
    assert v.consumers == (A, B) and "void: assigned in generation 4 at 20.0 ms while" in v.message
    assert f"{B} owned it in generation 5" in v.message  # the live owner is not blamed


# 4 -------------------------------------------------------------------------------------------------------


def test_4_a_reader_with_no_ownership_line_at_all() -> None:
    events = owner_a(started(C, 2), read(C, 40, -1, 0, 0, 9, poll=39))
    (v,) = only(events, "E")
    assert v.consumers == (C,) and "it had never been assigned the partition" in v.message
    # assign() is an ownership of its own (written by the consumer since): no one else's business
    manual = owner_a(started(C, 2, group=None), assign(C, 35, 0), read(C, 40, -1, 0, 0, 9, poll=39))
    assert check(manual).ok, check(manual).format()


# 5 -------------------------------------------------------------------------------------------------------


def test_5_a_new_owners_long_poll_begun_before_the_rebalance_reads_below_the_commit() -> None:
    events = owner_a(
        owned("revoked", A, 40, 1, 0),
        owned("assigned", B, 50, 2, 0),
        reset(B, 51, 2, 0, 5),  # the committed offset it was told: stale
        read(B, 61, 2, 0, 5, 14, poll=15),  # its poll began before a's commit was acknowledged
    )
    (v,) = only(events, "D")
    assert v.offsets == (5, 9) and v.consumers == (B, A)


# 6 -------------------------------------------------------------------------------------------------------


def test_6_a_read_line_whose_count_does_not_fit_its_offsets() -> None:
    bad = dict(read(A, 21, 1, 0, 0, 99, poll=20), count=50)  # 50 of 0..99 handed out: which ones?
    events = [started(A, 0), owned("assigned", A, 10, 1, 0), reset(A, 11, 1, 0, 0, why="earliest"), bad]
    result = check(events, produced={T: {"0": 100}})
    assert rules_of(result) == {"M", "L"}, result.format()
    (m,) = result.by_rule()["M"]
    assert "count 50 is not the 100 offsets of 0..99 (no gaps named)" in m.message
    # the gaps a line names are offsets no record was handed out at: they hold nothing for rule L either
    gapped = [*events[:3], read(A, 21, 1, 0, 0, 99, poll=20, gaps=[[40, 89]])]
    result = check(gapped, produced={T: {"0": 100}})
    assert rules_of(result) == {"L"} and "offsets 40..89" in result.violations[0].message
    assert check(gapped, produced={T: {"0": [[0, 39], [90, 99]]}}).ok


# 7 -------------------------------------------------------------------------------------------------------


def test_7_the_broker_log_is_a_witness_beside_the_histories_not_a_replacement() -> None:
    base = owner_a(read(A, 31, 1, 0, 10, 19), commit(A, 40, 1, {0: 20}, sent=35))
    backwards = [*base, commit(A, 52, 1, {0: 15}, sent=50)]
    log = [(T, 0, 10), (T, 0, 20), (T, 0, 15)]
    result = check(backwards, broker_commits=log)
    assert rules_of(result) == {"C"}
    messages = " | ".join(v.message for v in result.violations)
    assert "after the commit of 20" in messages and "goes from 20 down to 15" in messages
    # a seek anywhere no longer excuses a step down: another member's, or one before the larger commit was sent
    elsewhere = [*backwards[:2], owned("assigned", B, 2, -1, 1), line("seek", B, 45, tp=[T, 0], to=0), *backwards[2:]]
    assert "goes from 20 down to 15" in " ".join(v.message for v in check(elsewhere, broker_commits=log).violations)
    before = [*base[:7], line("seek", A, 33, 1, tp=[T, 0], to=0), *base[7:], commit(A, 52, 1, {0: 15}, sent=50)]
    assert "goes from 20 down to 15" in " ".join(v.message for v in check(before, broker_commits=log).violations)
    # its own seek between the two commits explains it, in the histories and in the log
    sought = [*base, line("seek", A, 45, 1, tp=[T, 0], to=15), commit(A, 52, 1, {0: 15}, sent=50)]
    assert check(sought, broker_commits=log).ok, check(sought, broker_commits=log).format()


# 8 -------------------------------------------------------------------------------------------------------


def test_8_files_whose_clocks_do_not_share_a_base_are_refused(tmp_path: Path, capsys: Any) -> None:
    events = owner_a(owned("revoked", A, 40, 1, 0), owned("assigned", B, 50, 2, 0), reset(B, 51, 2, 0, 10))
    assert check(events).ok
    # b's file from another host: its monotonic clock began elsewhere (its wall clock says when it really was)
    other_host = [dict(e, t=e["t"] + 3_600_000.0) if e["consumer"] == B else e for e in events]
    with pytest.raises(IncomparableHistories, match="its clock base differs from .* by -3600.000 s"):
        check(other_host)
    # a file whose t was shifted part way (t and wall disagree within one consumer)
    shifted = [dict(e, t=e["t"] + 5000.0) if e["consumer"] == A and e["t"] > 20 else e for e in events]
    with pytest.raises(IncomparableHistories, match="its t and wall disagree by"):
        check(shifted)
    # started lines naming different boots
    booted = [
        dict(e, clock={"boot_id": e["consumer"][0], "host": "h"}) if e["event"] == "started" else e for e in events
    ]
    with pytest.raises(IncomparableHistories, match="different boots or machines"):
        check(booted)
    # lines without a wall time cannot be placed beside another consumer's
    with pytest.raises(IncomparableHistories, match="without a wall time"):
        check([{k: v for k, v in e.items() if k != "wall"} if e["consumer"] == B else e for e in events])
    # the command refuses them with exit 2 and one line
    d = tmp_path / "h"
    d.mkdir()
    for name in (A, B):
        (d / f"{name[0]}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in other_host if e["consumer"] == name))
    assert main(["check-history", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be judged together" in err


# 9 -------------------------------------------------------------------------------------------------------


def test_9_two_processes_with_one_consumer_name_are_not_merged(tmp_path: Path) -> None:
    one = owner_a()
    twin = [dict(e, t=e["t"] + 1.0, wall=e["wall"] + 0.001) for e in one if e["consumer"] == A]
    (tmp_path / "a1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in one if e["consumer"] == A))
    (tmp_path / "a2.jsonl").write_text("".join(json.dumps(e) + "\n" for e in twin))
    with pytest.raises(IncomparableHistories, match="its lines are in 2 files .* two processes under one"):
        check(load(tmp_path))
    with pytest.raises(IncomparableHistories, match="started 2 times"):
        check([*one, *twin])


# 10 ------------------------------------------------------------------------------------------------------


def frozen_a(*a_reads: Line) -> list[Line]:
    """a freezes in a poll begun at 40 owning events-0 and events-1; b is given both at 100; a thaws and
    hands out ``a_reads`` at 205 before noticing at 206 that its session expired."""
    return [
        started(A, 0),
        started(B, 1),
        owned("assigned", A, 10, 1, 0, 1),
        reset(A, 11, 1, 0, 0, why="earliest"),
        reset(A, 12, 1, 1, 0, why="earliest"),
        owned("assigned", B, 100, 2, 0, 1),
        reset(B, 101, 2, 0, 0, why="earliest"),
        reset(B, 102, 2, 1, 0, why="earliest"),
        *a_reads,
        owned("session_expired", A, 206, 1, 0, 1),
    ]


def test_10_the_stale_poll_allowance_is_one_poll_a_member_and_bounded_by_its_own_max_records() -> None:
    # one poll under way at the freeze, both partitions, 50 records within its max_records 50: allowed
    one = frozen_a(read(A, 205, 1, 0, 0, 24, poll=40, most=50), read(A, 205.1, 1, 1, 0, 24, poll=40, most=50))
    result = check(one)
    assert result.ok and result.summary["stale_polls"] == {"polls": 1, "max_records": 50}, result.format()
    # a second stale poll (the other partition) passes no longer: the allowance is the member's, not a partition's
    two = frozen_a(read(A, 205, 1, 0, 0, 24, poll=40), read(A, 205.3, 1, 1, 0, 24, poll=205.2))
    (v,) = only(two, "E")
    assert v.tp == (T, 1) and "its poll began at 205.2 ms, after that" in v.message
    # and it holds at most what that poll could take: 5,000 records against poll(max_records=50)
    big = frozen_a(read(A, 205, 1, 0, 0, 4999, poll=40, most=50))
    (v,) = only(big, "E")
    assert "handed out 5000 records, more than its max_records 50" in v.message
    # the poll's own bound, not the config's: poll(max_records=6000) could take 5,000
    assert check(frozen_a(read(A, 205, 1, 0, 0, 4999, poll=40, most=6000))).ok


# 11 ------------------------------------------------------------------------------------------------------


def test_11_a_zombies_commit_while_another_member_owns_the_partition() -> None:
    events = owner_a(
        owned("assigned", B, 100, 2, 0),
        reset(B, 101, 2, 0, 10),
        read(B, 111, 2, 0, 10, 19, poll=110),
        commit(B, 120, 2, {0: 20}, sent=115),
        commit(A, 160, 1, {0: 10}, sent=150),  # the zombie a: acknowledged (a lax broker)
        read(B, 171, 2, 0, 20, 24, poll=170),
    )
    result = check(events)
    assert rules_of(result) == {"C"}, result.format()
    blamed = [v for v in result.violations if "while it did not own the partition" in v.message]
    assert len(blamed) == 1 and blamed[0].consumers == (A, B)
    assert all(v.consumers[0] == A for v in result.violations)  # the owner is not blamed


# 12 ------------------------------------------------------------------------------------------------------


def test_12_an_unparseable_line_inside_a_file_is_not_passed_over(tmp_path: Path, capsys: Any) -> None:
    lines = [json.dumps(e) for e in owner_a() if e["consumer"] == A]
    (tmp_path / "a.jsonl").write_text("\n".join([*lines[:2], '{"t": 12, "consumer": "a@1', *lines[2:]]) + "\n")
    history = load(tmp_path)
    assert history.torn == 0 and len(history.damaged) == 1
    result = check(history)
    assert not result.violations and not result.ok and result.summary["damaged"] == 1
    assert "1 line(s) inside a file did not parse: the history is not whole" in result.format()
    assert main(["check-history", str(tmp_path)]) == 2
    assert "1 line(s) inside a file do not parse" in capsys.readouterr().err
    # a torn last line is the only one passed over, and the report says so
    (tmp_path / "a.jsonl").write_text("\n".join([*lines, '{"t": 99, "consumer": "a@1']))
    result = check(load(tmp_path))
    assert result.ok and result.summary["torn"] == 1
    assert "1 torn last line(s) passed over" in result.format()


# two guarantees no rule stated ---------------------------------------------------------------------------


def test_a_new_owner_starts_at_the_groups_last_acknowledged_commit() -> None:
    handover = owner_a(owned("revoked", A, 40, 1, 0), owned("assigned", B, 50, 2, 0))
    assert check([*handover, reset(B, 51, 2, 0, 10), read(B, 61, 2, 0, 10, 14)]).ok
    # above it: offsets 10..14 handed out by nobody, skipped between owners
    (v,) = only([*handover, reset(B, 51, 2, 0, 15), read(B, 61, 2, 0, 15, 19)], "M")
    assert v.offsets == (10, 14) and "skipped between owners" in v.message
    assert "above the group's last acknowledged commit 10" in v.message
    # above it over offsets a had handed out: a commit the broker applied whose answer a never read (killed)
    lost_answer = owner_a(read(A, 35, 1, 0, 10, 14), owned("assigned", B, 50, 2, 0), reset(B, 51, 2, 0, 15))
    assert check(lost_answer).ok, check(lost_answer).format()
    # no commit at all: where the reset policy says; "earliest" cannot begin above what was never handed out
    no_commit = [e for e in handover if e["event"] != "commit"]
    (v,) = only([*no_commit, read(B, 61, 2, 0, 20, 24)], "M")  # no reset line: b's config says, earliest
    assert "offsets 10..19" in v.message and "reset policy earliest" in v.message
    assert check([*no_commit, reset(B, 51, 2, 0, 0, why="earliest"), read(B, 61, 2, 0, 0, 4)]).ok
    assert check([*no_commit, reset(B, 51, 2, 0, 20, why="latest"), read(B, 61, 2, 0, 20, 24)]).ok  # its choice
    latest = [dict(e, config={"auto_offset_reset": "latest"}) if e["event"] == "started" else e for e in no_commit]
    assert check([*latest, read(B, 61, 2, 0, 20, 24)]).ok


def test_a_commit_ahead_is_judged_within_its_ownership() -> None:
    events = owner_a(
        read(A, 31, 1, 0, 10, 49),
        owned("revoked", A, 40, 1, 0),
        owned("assigned", B, 50, 2, 0),
        reset(B, 51, 2, 0, 10),
        read(B, 61, 2, 0, 10, 29),
        commit(B, 70, 2, {0: 30}, sent=65),
        owned("revoked", B, 80, 2, 0),
        owned("assigned", A, 90, 3, 0),
        reset(A, 91, 3, 0, 30),
        commit(A, 100, 3, {0: 45}, sent=95),  # a reached 50 in its first ownership, only 30 in this one
    )
    (v,) = only(events, "C")
    assert v.offsets == (45, 45) and "had reached in its ownership (from 90.0 ms): 30" in v.message
