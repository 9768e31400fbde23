"""The history checker (fsm_consumer.history, docs/histories.md) on hand-written histories: each rule
reports exactly the history that breaks it, a clean multi-consumer history passes them all, and
``fsm-consumer check-history`` exits 0, 1 or 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fsm_consumer.cli import main
from fsm_consumer.history import RULES, CheckResult, HistoryError, check, load

T = "events"
Line = dict[str, Any]


# -- builders: one line each, with every common field -------------------------------------------------


def line(event: str, consumer: str, t: float, generation: int = -1, **fields: Any) -> Line:
    return {
        "t": t,
        "wall": 1_700_000_000.0 + t / 1000.0,
        "consumer": consumer,
        "client": consumer.split("@")[0],
        "member": f"{consumer}-member" if generation >= 0 else "",
        "generation": generation,
        "event": event,
        **fields,
    }


def started(c: str, t: float, group: str | None = "g") -> Line:
    config = dict(
        partition_assignment_strategy=["cooperative-sticky"],
        session_timeout_ms=10_000,
        max_poll_records=500,
        enable_auto_commit=False,
        isolation_level="read_committed",
        group_instance_id=None,
    )
    return line("started", c, t, group=group, config=config)


def owned(event: str, c: str, t: float, gen: int, *ps: int) -> Line:
    """assigned, revoked, lost, session_expired, abandoned."""
    return line(event, c, t, gen, partitions=[[T, p] for p in ps])


def read(
    c: str,
    t: float,
    gen: int,
    p: int,
    first: int,
    last: int,
    *,
    poll: float | None = None,
    frm: int | None = None,
    most: int = 500,
    gaps: list[list[int]] | None = None,
) -> Line:
    fields: dict[str, Any] = {"from": first if frm is None else frm, "to": last + 1}
    if gaps:
        fields["gaps"] = gaps
    count = last - first + 1 - sum(hi - lo + 1 for lo, hi in gaps or ())
    return line(
        "read",
        c,
        t,
        gen,
        tp=[T, p],
        offsets=[first, last],
        count=count,
        t_poll_start=t - 1 if poll is None else poll,
        max_records=most,
        **fields,
    )


def assign(c: str, t: float, *ps: int) -> Line:
    """assign(): partitions the consumer took itself (no group's business)."""
    return line("assigned", c, t, partitions=[[T, p] for p in ps], by="assign")


def skip(c: str, t: float, gen: int, p: int, frm: int, to: int) -> Line:
    return line("skip", c, t, gen, tp=[T, p], **{"from": frm, "to": to})


def seek(c: str, t: float, gen: int, p: int, to: int | str) -> Line:
    return line("seek", c, t, gen, tp=[T, p], to=to)


def reset(c: str, t: float, gen: int, p: int, to: int, why: str = "committed") -> Line:
    return line("reset", c, t, gen, tp=[T, p], to=to, why=why)


def commit(c: str, t: float, gen: int, offsets: dict[int, int], sent: float, error: str | None = None) -> Line:
    return line("commit", c, t, gen, offsets=[[T, p, o] for p, o in offsets.items()], error=error, sent_ago_ms=t - sent)


def transition(c: str, t: float, machine: str, source: str, trigger: str, dest: str) -> Line:
    return line("transition", c, t, machine=machine, source=source, trigger=trigger, dest=dest)


def handled(c: str, t_start: float, t: float, p: int, offset: int, key: str | None = "k1") -> Line:
    return line("handled", c, t, 3, tp=[T, p], offset=offset, key=key, t_start=t_start, outcome="ok")


def restart(c: str, t: float, p: int, offset: int | None) -> Line:
    return line("parallel_restart", c, t, 3, tp=[T, p], offset=offset)


A, B = "a@101#1", "b@102#1"


def clean() -> list[Line]:
    """Two consumers of group g on events-0 and events-1: a owns both, commits, gives events-1 up in a
    cooperative rebalance (keeping events-0), b takes events-1 (a ParallelConsumer handles its records,
    a transaction marker is skipped), then events-0 is handed from a to b after a's last commit, and b
    seeks events-0 back and commits below its own earlier commit."""
    return [
        started(A, 0),
        started(B, 5),
        transition(A, 9, "membership", "joining", "joined", "stable"),
        owned("assigned", A, 10, 1, 0, 1),
        reset(A, 11, 1, 0, 0, why="earliest"),
        reset(A, 11.5, 1, 1, 0, why="earliest"),
        read(A, 21, 1, 0, 0, 9, poll=20),
        read(A, 21.5, 1, 1, 0, 4, poll=20),
        commit(A, 30, 1, {0: 10, 1: 5}, sent=25),
        read(A, 40, 1, 0, 10, 14),
        read(A, 45, 1, 1, 5, 7),
        commit(A, 48, 1, {1: 8}, sent=46),
        # cooperative rebalance: a gives up events-1 only
        owned("revoked", A, 50, 2, 1),
        read(A, 56, 2, 0, 15, 19, poll=55),
        owned("assigned", B, 60, 3, 1),
        reset(B, 61, 3, 1, 8),
        restart(B, 61.5, 1, 8),
        read(B, 66, 3, 1, 8, 19, poll=65),
        handled(B, 67.0, 67.5, 1, 8, "k1"),
        handled(B, 67.1, 67.3, 1, 9, "k2"),  # another key: may run alongside
        handled(B, 67.6, 68.0, 1, 10, "k1"),
        handled(B, 68.1, 68.2, 1, 10, "k1"),  # a retry of one offset is in order
        commit(B, 72, 3, {1: 20}, sent=70),
        # events-0 goes from a to b
        commit(A, 98, 2, {0: 20}, sent=95),
        owned("revoked", A, 100, 4, 0),
        owned("assigned", B, 110, 5, 0),
        reset(B, 111, 5, 0, 20),
        read(B, 121, 5, 0, 20, 29, poll=120),
        commit(B, 127, 5, {0: 30}, sent=125),
        # b seeks events-0 back: re-reads below the commit and a lower commit are what it asked for
        seek(B, 130, 5, 0, 15),
        read(B, 141, 5, 0, 15, 24, poll=140),
        commit(B, 148, 5, {0: 25}, sent=145),
        skip(B, 150, 5, 1, 20, 22),  # a transaction marker at 20, 21
        read(B, 156, 5, 1, 22, 25, poll=155),
        line("closed", A, 200, 4),
        line("closed", B, 210, 5),
    ]


PRODUCED = {T: {"0": 30, "1": 20}}


def rules_of(result: CheckResult) -> set[str]:
    return {v.rule for v in result.violations}


def only(events: list[Line], rule: str, **kw: Any) -> CheckResult:
    result = check(events, **kw)
    assert rules_of(result) == {rule}, result.format()
    return result


# -- a clean history ----------------------------------------------------------------------------------


def test_a_clean_multi_consumer_history_passes_every_rule() -> None:
    result = check(clean(), produced=PRODUCED)
    assert result.ok, result.format()
    assert all(result.status(rule) == "passed" for rule in RULES)
    s = result.summary
    assert len(s["consumers"]) == 2 and s["groups"] == ["g"]
    assert s["records_read"] == 5 + 10 + 5 + 3 + 5 + 12 + 10 + 10 + 4
    assert s["distinct_offsets"] == 30 + 24 and s["rereads"] == 10  # b re-read 15..24 of events-0
    assert (s["commits"], s["commits_failed"], s["committed_offsets"]) == (6, 0, 7)
    assert s["consumers"][A]["generations"] == [1, 2, 4] and s["consumers"][B]["closed"]
    text = result.format()
    assert "no violations" in text and "consumers: 2" in text and "L  PASSED" in text


def test_without_produced_counts_l_is_not_checked_not_passed() -> None:
    result = check(clean())
    assert result.ok and result.status("L") == "not checked" and result.status("E") == "passed"
    assert "L  NOT CHECKED" in result.format()


def test_consumers_of_different_groups_do_not_share_partitions() -> None:
    other = "c@103#1"
    events = [
        *clean(),
        started(other, 1, group="h"),
        owned("assigned", other, 12, 1, 0),  # group h's own owner of events-0, at the same time as a
        reset(other, 13, 1, 0, 0, why="earliest"),
        read(other, 22, 1, 0, 0, 9),  # generation 1 too, and the offsets a read: another group
    ]
    assert check(events).ok
    # ...but L holds per group: group h read events-0 only up to 9, and events-1 not at all
    result = only(events, "L", produced=PRODUCED)
    p0, p1 = result.violations
    assert "events-0: 20 of 30 records produced never handed out in group 'h': offsets 10..29" in p0.message
    assert "events-1: 20 of 20 records produced never handed out in group 'h': offsets 0..19" in p1.message
    assert "no consumer of it read this partition" in p1.message


# -- L --------------------------------------------------------------------------------------------------


def test_l_an_offset_produced_that_no_consumer_handed_out() -> None:
    result = only(clean(), "L", produced={T: {"0": 32, "1": 20}})
    (v,) = result.violations
    assert v.tp == (T, 0) and v.offsets == (30, 31)
    assert "events-0: 2 of 32 records produced never handed out in group 'g': offsets 30..31" in v.message


def test_l_a_hole_in_the_middle_and_a_partition_nobody_touched() -> None:
    events = [e for e in clean() if not (e["event"] == "read" and e["offsets"] == [10, 14])]
    events = [dict(e, **{"from": 10}) if e["event"] == "read" and e["offsets"] == [15, 19] else e for e in events]
    result = check(events, produced={T: {"0": 30, "1": 20}, "other": {"0": 3}})
    assert rules_of(result) == {"L"}, result.format()
    hole, untouched = result.violations
    assert hole.offsets == (10, 14) and "offsets 10..14" in hole.message
    assert hole.consumers == (A,) and f"{A} read 15..19 (from position 10) past offset 10" in hole.message
    assert untouched.tp == ("other", 0) and "other-0: offsets 0..2 (all 3 records produced)" in untouched.message


def test_l_judges_the_offsets_acknowledged_to_the_producer() -> None:
    # offsets 10..14 never handed out: with the acknowledged ranges given, only what the producer was told is
    # there counts; an offset a broker crash left unacknowledged (and perhaps unkept) is not lost
    events = [e for e in clean() if not (e["event"] == "read" and e["offsets"] == [10, 14])]
    events = [dict(e, **{"from": 10}) if e["event"] == "read" and e["offsets"] == [15, 19] else e for e in events]
    assert check(events, produced={T: {"0": [[0, 9], [15, 29]], "1": [[0, 19]]}}).ok
    result = only(events, "L", produced={T: {"0": [[0, 9], [12, 12], [15, 29]], "1": [[0, 19]]}})
    (v,) = result.violations
    assert v.offsets == (12, 12) and "events-0: 1 of 26 records produced never handed out" in v.message
    result = only(events, "L", produced={T: {"0": [[0, 29]]}, "other": {"0": [[4, 5], [7, 7]]}})
    hole, untouched = result.violations
    assert hole.offsets == (10, 14) and "offsets 4..5, 7 (all 3 records produced)" in untouched.message
    with pytest.raises(ValueError, match="not \\[first, last\\] offsets"):
        check(events, produced={T: {"0": [[5, 2]]}})


def test_a_sources_own_lines_are_passed_over() -> None:
    # the Spark source's lines (historyPath) lie beside its readers' histories: not a consumer's, not malformed
    planned = {"t": 5.0, "wall": 1.0, "role": "driver", "event": "batch_planned", "ranges": [[T, 0, 0, 30]]}
    result = check([planned, *clean()], produced=PRODUCED)
    assert result.ok and result.summary["malformed"] == 0, result.format()
    assert "1 line(s) of a data source (the Spark source's own), passed over" in result.format()
    # an event this checker does not know is named, with how many lines it had
    result = check([*clean(), line("leader", A, 12), line("leader", A, 13), line("poll_error", B, 14)])
    assert result.ok and result.summary["unknown"] == {"leader": 2, "poll_error": 1}
    assert "3 line(s) of unknown events, passed over: leader (2), poll_error (1)" in result.format()


# -- E --------------------------------------------------------------------------------------------------


def test_a_consumer_that_only_carries_a_group_id_is_judged_group_less() -> None:
    """Two Spark queries' task consumers, each carrying its query's generated group id, reading halves of
    a topic with manual assignment: no group of theirs read everything, yet nothing is lost (they never
    joined those groups nor committed to them); a consumer that commits to its group stays in it."""
    events = [
        started(A, 0, group="spark-kafka-source-1-executor"),
        started(B, 1, group="spark-kafka-source-2-executor"),
        assign(A, 1.5, 0),
        assign(B, 1.6, 0),
        reset(A, 2, -1, 0, 0, why="earliest"),
        read(A, 10, -1, 0, 0, 4),
        read(B, 11, -1, 0, 5, 9),
    ]
    result = check(events, produced={"events": {"0": 10}})
    assert result.status("L") == "passed", result.format()
    committing = [*events, commit(B, 12, -1, {0: 10}, sent=11.5)]
    assert check(committing, produced={"events": {"0": 10}}).status("L") == "violated"


def test_e_compares_no_consumers_without_a_group() -> None:
    # two readers of one partition at once by assign() (a Spark source's): each its own, nothing to compare
    events = [
        started(A, 0, group=None),
        started(B, 1, group=None),
        assign(A, 1.5, 0),
        assign(B, 1.6, 0),
        reset(A, 2, -1, 0, 0, why="earliest"),
        reset(B, 3, -1, 0, 0, why="earliest"),
        read(A, 10, -1, 0, 0, 9),
        read(B, 11, -1, 0, 0, 9),
    ]
    assert check(events).status("E") == "passed", check(events).format()


def frozen(a_reads: list[Line], a_end: float = 206) -> list[Line]:
    """a owns events-0, reads 0..9, commits 10 and freezes in a poll begun at 40; its session runs out and
    b is assigned events-0 at 100 (a new generation) and reads on from 10; a thaws at 200 still believing
    in generation 1, hands out ``a_reads`` and notices at ``a_end`` that its session expired."""
    return [
        started(A, 0),
        started(B, 1),
        owned("assigned", A, 10, 1, 0),
        reset(A, 11, 1, 0, 0, why="earliest"),
        read(A, 21, 1, 0, 0, 9, poll=20),
        commit(A, 30, 1, {0: 10}, sent=25),
        transition(A, 39, "fetch", "idle", "poll", "polling"),
        transition(B, 99, "membership", "joining", "joined", "stable"),
        owned("assigned", B, 100, 2, 0),
        reset(B, 101, 2, 0, 10),
        read(B, 111, 2, 0, 10, 19, poll=110),
        transition(A, 201, "membership", "stable", "heartbeat_failed", "rejoining"),
        *a_reads,
        owned("session_expired", A, a_end, 1, 0),
        read(B, 300, 2, 0, 20, 24, poll=299),
        commit(B, 310, 2, {0: 25}, sent=305),
    ]


def test_e_the_one_poll_under_way_at_a_freeze_is_allowed() -> None:
    result = check(frozen([read(A, 205, 1, 0, 10, 14, poll=40)]))
    assert result.ok, result.format()
    # counted: the figure a run reports against max_poll_records
    assert result.summary["stale_polls"] == {"polls": 1, "max_records": 5}
    assert "1 poll(s) under way when their member's ownership ended" in result.summary["rules"]["E"]["note"]
    assert check(frozen([])).summary["stale_polls"] == {"polls": 0, "max_records": 0}


def test_e_the_one_poll_under_way_at_a_freeze_may_be_handed_out_never_committed() -> None:
    events = frozen([read(A, 205, 1, 0, 10, 14, poll=40), commit(A, 205.5, 1, {0: 15}, sent=205.2)])
    (v,) = only(events, "C").violations
    assert v.offsets == (15, 15) and v.consumers == (A, B)
    assert f"commit of 15 by {A} (generation 1) sent at 205.2 ms and acknowledged at 205.5 ms while it did not own" in (
        v.message
    )
    assert f"ended at 100.0 ms, when {B} was assigned the partition (generation 2); {B} owned it then" in v.message
    failed = frozen([read(A, 205, 1, 0, 10, 14, poll=40), commit(A, 205.5, 1, {0: 15}, sent=205.2, error="fenced")])
    assert check(failed).ok  # refused by the broker: nothing committed


def test_e_the_frozen_consumer_owning_the_partition_again_commits_what_it_read_then() -> None:
    """Seen with librdkafka members (tools/faults --client librdkafka): after its frozen poll a lost the
    partition, was given it again at 400 and read on from b's commit; its commits then are its own."""
    again = [
        read(A, 205, 1, 0, 10, 14, poll=40),
        owned("revoked", B, 390, 2, 0),
        owned("assigned", A, 400, 3, 0),
        reset(A, 401, 3, 0, 25),
        read(A, 411, 3, 0, 25, 29, poll=410),
        commit(A, 420, 3, {0: 30}, sent=415),
    ]
    assert check(frozen(again)).ok, check(frozen(again)).format()
    # a commit past the stale poll after its ownership ended, before a owns the partition again: a violation
    early = [*again[:1], commit(A, 260, 1, {0: 15}, sent=250), *again[1:]]
    (v,) = only(frozen(early), "C").violations
    assert "while it did not own the partition" in v.message


def test_e_a_stale_consumer_reading_on_while_the_new_owner_owns_the_partition() -> None:
    # the thawed a hands out its frozen poll (allowed) and then polls again, in its old generation
    result = only(frozen([read(A, 205, 1, 0, 10, 14, poll=40), read(A, 205.5, 1, 0, 15, 19, poll=205.2)]), "E")
    (v,) = result.violations
    assert v.tp == (T, 0) and v.offsets == (15, 19) and v.consumers == (A, B)
    assert (
        f"events-0: {A} handed out offsets 15..19 (5 records in 1 reads at 205.5 ms, generation 1) after" in v.message
    )
    assert f"ended at 100.0 ms, when {B} was assigned the partition (generation 2)" in v.message
    assert "its poll began at 205.2 ms, after that" in v.message
    assert v.t == 205.5
    # the transitions of a and b within 2 s of it, in time order; the report shows them
    assert [e["t"] for e in v.transitions] == [39, 99, 201]
    assert "201.0 ms a@101#1 membership: stable --heartbeat_failed--> rejoining" in result.format()


def test_e_a_single_poll_begun_after_the_new_owners_assignment() -> None:
    (v,) = only(frozen([read(A, 205, 1, 0, 10, 14, poll=150)]), "E").violations
    assert "10..14" in v.message and "its poll began at 150.0 ms, after that" in v.message


def test_e_the_frozen_poll_returned_after_the_consumer_declared_its_session_expired() -> None:
    # no allowance outside the consumer's own interval: it knew the partition was no longer its
    (v,) = only(frozen([read(A, 205, 1, 0, 10, 14, poll=40)], a_end=204), "E").violations
    assert f"events-0: {A} handed out offsets 10..14 (5 records in 1 reads at 205.0 ms, generation 1) after" in (
        v.message
    )
    assert "after its own lines had ended the ownership (it knew" in v.message


def test_e_an_abandoned_partition_is_no_longer_the_consumers() -> None:
    events = [e if e["event"] != "session_expired" else dict(e, event="abandoned", t=203) for e in frozen([])]
    events.insert(-2, read(A, 204, 1, 0, 10, 14, poll=40))
    (v,) = only(events, "E").violations
    assert "after its own lines had ended the ownership" in v.message


def test_a_partition_handed_over_within_one_generation_is_judged_by_its_commits() -> None:
    """Tansu 0.6 numbers a second round like the first: the handover is sequential, and what the new owner
    hands out again is judged against the group's commit (D), not against generation numbers."""
    events = [
        started(A, 0),
        started(B, 1),
        owned("assigned", A, 10, 4, 0),
        reset(A, 11, 4, 0, 0, why="earliest"),
        read(A, 21, 4, 0, 0, 9),
        owned("revoked", A, 30, 4, 0),
        owned("assigned", B, 40, 4, 0),
        reset(B, 41, 4, 0, 5, why="earliest"),
        read(B, 51, 4, 0, 5, 12),
    ]
    assert check(events).ok, check(events).format()  # nothing committed: everything may come again
    committed = [*events[:5], commit(A, 25, 4, {0: 10}, sent=22), *events[5:7], reset(B, 41, 4, 0, 5), events[-1]]
    (v,) = only(committed, "D").violations
    assert v.offsets == (5, 9) and v.consumers == (B, A)


def test_e_a_consumer_without_a_started_line_is_compared_with_every_group() -> None:
    c = "c@103#1"  # its history lost its first line: it could be in any group
    events = [*frozen([]), owned("assigned", c, 150, 7, 0), read(c, 160, 7, 0, 20, 21), line("closed", c, 400)]
    result = check(events)
    assert rules_of(result) == {"E", "C"}, result.format()  # b read on, and committed, after c was given it
    e, commit_ = result.by_rule()["E"][0], result.by_rule()["C"][0]
    assert e.consumers == (B, c) and f"{B} handed out offsets 20..24" in e.message
    assert commit_.consumers == (B, c) and "commit of 25" in commit_.message
    assert check([started(c, 2, group="h"), *events]).ok  # c of another group


def test_violations_carry_the_transitions_of_their_consumers_within_2_s() -> None:
    other = "c@103#1"
    noise = [transition(A, 205 + 2500, "fetch", "x", "far", "y"), transition(other, 205, "fetch", "x", "other", "y")]
    noise += [transition(B, 150 + k, "fetch", "x", f"t{k}", "y") for k in range(12)]
    result = check([*frozen([read(A, 205, 1, 0, 10, 14, poll=150)]), started(other, 2), *noise])
    (v,) = result.violations
    triggers = [e["trigger"] for e in v.transitions]
    assert "far" not in triggers and "other" not in triggers and len(triggers) == 3 + 12
    text = result.format()
    assert "(the 10 nearest of 15)" in text and "--t11-->" in text and "--t0-->" not in text


# -- D --------------------------------------------------------------------------------------------------


def test_d_a_read_below_a_commit_acknowledged_before_the_ownership_began() -> None:
    events = [
        started(A, 0),
        started(B, 1),
        owned("assigned", A, 10, 1, 0),
        reset(A, 11, 1, 0, 0, why="earliest"),
        read(A, 21, 1, 0, 0, 9),
        commit(A, 30, 1, {0: 10}, sent=25),
        owned("revoked", A, 40, 2, 0),
        owned("assigned", B, 50, 3, 0),
        reset(B, 51, 3, 0, 5),  # b starts from a stale committed offset
        read(B, 61, 3, 0, 5, 14, poll=60),
    ]
    (v,) = only(events, "D").violations
    assert v.tp == (T, 0) and v.offsets == (5, 9) and v.consumers == (B, A)
    assert f"events-0: {B} handed out offsets 5..9 (read 5..14 at 61.0 ms, generation 3, in a poll" in v.message
    assert f"below the commit of 10 by {A} (generation 1) acknowledged at 30.0 ms" in v.message
    # a poll begun before the commit was acknowledged, but handing out in an ownership begun after it: the same
    (v,) = only([*events[:-1], read(B, 61, 3, 0, 5, 14, poll=29)], "D").violations
    assert v.offsets == (5, 9) and "in a poll begun at 29.0 ms" in v.message


def test_d_a_seek_back_makes_the_rereads_expected_but_only_the_readers_own() -> None:
    events = [
        started(A, 0),
        owned("assigned", A, 10, 1, 0),
        reset(A, 11, 1, 0, 0, why="earliest"),
        read(A, 21, 1, 0, 0, 9),
        commit(A, 30, 1, {0: 10}, sent=25),
        seek(A, 40, 1, 0, 3),
        read(A, 51, 1, 0, 3, 12),
    ]
    assert check(events).ok
    # a seek forward explains no re-read: read from 3 after seeking to 5 breaks M and D alike
    result = check([*events[:5], seek(A, 40, 1, 0, 5), read(A, 51, 1, 0, 3, 12)])
    assert rules_of(result) == {"D", "M"}, result.format()


# -- M --------------------------------------------------------------------------------------------------


def test_m_a_gap_and_a_step_back_in_positions() -> None:
    events = [
        started(A, 0),
        owned("assigned", A, 10, 1, 0),
        reset(A, 11, 1, 0, 0, why="earliest"),
        read(A, 21, 1, 0, 0, 9),
        read(A, 31, 1, 0, 15, 19),  # 10..14 passed over
        read(A, 41, 1, 0, 18, 22),  # back from 20 to 18
    ]
    result = only(events, "M")
    gap, back = result.violations
    assert gap.offsets == (10, 15) and "begins at 15, but its position was 10" in gap.message
    assert "offsets 10..14 passed over" in gap.message and "events-0" in gap.message
    assert back.offsets == (18, 20) and "back by 2" in back.message


def test_m_gaps_bridged_by_skips_seeks_and_assignments_pass() -> None:
    events = [
        started(A, 0),
        owned("assigned", A, 10, 1, 0),
        reset(A, 11, 1, 0, 0, why="earliest"),
        read(A, 21, 1, 0, 0, 9),
        skip(A, 25, 1, 0, 10, 12),  # transaction markers
        read(A, 31, 1, 0, 12, 19),
        read(A, 35, 1, 0, 22, 25, frm=20),  # 20, 21 compacted away: from 20, first 22
        read(A, 37, 1, 0, 26, 30, gaps=[[28, 28]]),  # an aborted record at 28 between the records handed out
        seek(A, 40, 1, 0, 100),
        read(A, 51, 1, 0, 100, 101),
        commit(A, 55, 1, {0: 102}, sent=52),
        owned("revoked", A, 60, 2, 0),
        owned("assigned", A, 70, 3, 0),
        reset(A, 71, 3, 0, 102),  # a new ownership begins at the group's last acknowledged commit
        read(A, 81, 3, 0, 102, 103),
    ]
    assert check(events).ok, check(events).format()
    # a reset names the position: the next read begins there
    result = only([*events[:-1], read(A, 81, 3, 0, 104, 105)], "M")
    assert "its position was 102 (its reset to 102 at 71.0 ms)" in result.violations[0].message


# -- C --------------------------------------------------------------------------------------------------


def committing(*tail: Line) -> list[Line]:
    return [
        started(A, 0),
        owned("assigned", A, 10, 1, 0),
        reset(A, 11, 1, 0, 0, why="earliest"),
        read(A, 21, 1, 0, 0, 19),
        commit(A, 30, 1, {0: 20}, sent=25),
        *tail,
    ]


def test_c_a_commit_backwards() -> None:
    (v,) = only(committing(commit(A, 42, 1, {0: 15}, sent=40)), "C").violations
    assert v.tp == (T, 0) and v.offsets == (15, 20)
    assert f"events-0: commit of 15 by {A} (generation 1) sent at 40.0 ms after the commit of 20" in v.message
    assert "acknowledged at 30.0 ms" in v.message
    # sent before the larger one was answered: either order is possible at the broker
    assert check(committing(commit(A, 42, 1, {0: 15}, sent=29))).ok
    # a failed commit took no effect
    assert check(committing(commit(A, 42, 1, {0: 15}, sent=40, error="IllegalGenerationError()"))).ok


def test_c_a_commit_backwards_after_a_seek_passes() -> None:
    assert check(committing(seek(A, 35, 1, 0, 10), read(A, 38, 1, 0, 10, 14), commit(A, 42, 1, {0: 15}, sent=40))).ok
    assert check(committing(seek(A, 35, 1, 0, "earliest"), commit(A, 42, 1, {0: 15}, sent=40))).ok
    # a reset by the reset policy moves the position back too; one from the committed offset does not
    assert check(committing(reset(A, 35, 1, 0, 0, why="earliest"), commit(A, 42, 1, {0: 15}, sent=40))).ok
    only(committing(reset(A, 35, 1, 0, 15, why="committed"), commit(A, 42, 1, {0: 15}, sent=40)), "C")
    # a seek before the larger commit was sent explains nothing
    only([*committing()[:4], seek(A, 22, 1, 0, 20), *committing()[4:], commit(A, 42, 1, {0: 15}, sent=40)], "C")


def asked(line_: Line, at: float, explicit: bool = True) -> Line:
    """A commit line that says when it was asked for, and whether the application gave its offsets."""
    out = {**line_, "asked_ago_ms": line_["t"] - at}
    if explicit:
        out["explicit"] = True
    return out


def test_c_a_lower_commit_the_application_asked_for_afterwards_is_its_wish_not_a_step_back() -> None:
    """Issue 47 point 4: the application commits 30 in on_partitions_revoked after the revocation's commit of 40
    (going back on purpose). The checker judges a consumer's own commits by the order they were asked for:
    offsets the application gave, asked for after the higher one, are its wish; positions, or a commit asked for
    before the higher one and landing after it (the retried commit of point 2), are a step back."""
    higher = asked(commit(A, 30, 1, {0: 20}, sent=25), at=24, explicit=False)
    base = [*committing()[:4], higher]
    assert check([*base, asked(commit(A, 42, 1, {0: 15}, sent=40), at=39)]).ok
    # positions, not the application's offsets: the library's own step back
    only([*base, asked(commit(A, 42, 1, {0: 15}, sent=40), at=39, explicit=False)], "C")
    # asked for before the higher one, landing after it: a reorder
    only([*base, asked(commit(A, 42, 1, {0: 15}, sent=40), at=23)], "C")
    # not said when it was asked: judged as before
    only([*base, commit(A, 42, 1, {0: 15}, sent=40)], "C")
    # another member's higher commit is never excused by this one's wish
    other = [
        started(B, 0),
        owned("assigned", B, 26, 2, 0),
        reset(B, 27, 2, 0, 20),
        read(B, 28, 2, 0, 20, 24),
        asked(commit(B, 29, 2, {0: 25}, sent=28.5), at=28, explicit=False),
    ]
    history = [*committing()[:2], owned("revoked", A, 25.5, 1, 0), *committing()[2:4], higher, *other]
    found = check([*history, asked(commit(A, 42, 1, {0: 15}, sent=40), at=39)]).violations
    assert any(
        f"commit of 15 by {A} (generation 1) sent at 40.0 ms after the commit of 25 by {B}" in v.message for v in found
    )


def test_c_the_next_owner_committing_at_the_previous_owners_wish_does_not_go_back() -> None:
    """The old owner's revocation commits 20, then its on_partitions_revoked commits 15 (its wish): the
    group's offset is 15, and the next owner, starting there, commits 15 before it reads. That is no step
    back from the 20 (seen on Apache Kafka under both protocols); 14 would be, and so is 15 when the wish was
    sent before the 20 was answered (the broker may have applied them in either order)."""

    def handed_over(wish_sent: float, next_commit: int) -> list[Line]:
        return [
            *committing()[:4],
            asked(commit(A, 30, 1, {0: 20}, sent=wish_sent - 1), at=wish_sent - 2, explicit=False),
            asked(commit(A, 35, 1, {0: 15}, sent=wish_sent), at=wish_sent - 0.5),
            owned("revoked", A, 36, 1, 0),
            started(B, 0),
            owned("assigned", B, 37, 2, 0),
            reset(B, 38, 2, 0, 15),
            asked(commit(B, 45, 2, {0: next_commit}, sent=40), at=39, explicit=False),
        ]

    assert check(handed_over(31, 15)).ok, check(handed_over(31, 15)).format()
    (v,) = only(handed_over(31, 14), "C").violations  # below the wish, and below the 20
    assert "commit of 14 by" in v.message and v.offsets[0] == 14
    # the wish sent at 29.5, before the 20 was answered at 30: the group's offset may be 20
    (v,) = only(handed_over(29.5, 15), "C").violations
    assert f"commit of 15 by {B} (generation 2)" in v.message and "after the commit of 20" in v.message
    # the broker's log, 20 then 15 then 15: the step down is the old owner's wish, answered after its 20
    assert check(handed_over(31, 15), broker_commits=[(T, 0, 20), (T, 0, 15), (T, 0, 15)]).ok
    only(handed_over(29.5, 15), "C", broker_commits=[(T, 0, 20), (T, 0, 15), (T, 0, 15)])


def test_c_a_commit_ahead_of_what_its_consumer_had_reached() -> None:
    (v,) = only(committing(commit(A, 42, 1, {0: 25}, sent=40, error="RebalanceInProgressError()")), "C").violations
    assert v.offsets == (25, 25) and "commit of 25 by" in v.message
    assert (
        "is ahead of what a@101#1 had reached in its ownership (from 10.0 ms): 20 (the end of its read at 21.0 ms)"
        in (v.message)
    )


def test_c_from_the_broker_commit_log() -> None:
    events = committing()
    (v,) = only(events, "C", broker_commits=[(T, 0, 5), (T, 1, 3), (T, 0, 20), (T, 0, 7)]).violations
    assert v.tp == (T, 0) and "events-0: the broker's commit log goes from 20 down to 7 (entry 3)" in v.message
    assert "no history holds an acknowledged commit of 7" in v.message
    # a step down is explained only by a seek or reset of the committing member between the two commits
    back = [*events, seek(A, 35, 1, 0, 7), commit(A, 42, 1, {0: 7}, sent=40)]
    result = check(back, broker_commits=[(T, 0, 5), (T, 0, 20), (T, 0, 7)])
    assert result.ok and "1 step(s) down in it explained" in result.format(), result.format()
    early = [*events[:4], seek(A, 22, 1, 0, 7), *events[4:], commit(A, 42, 1, {0: 7}, sent=40)]
    result = check(early, broker_commits=[(T, 0, 20), (T, 0, 7)])
    assert rules_of(result) == {"C"} and any("goes from 20 down to 7" in v.message for v in result.violations)
    # the log is a witness beside the histories, never in their place: a commit backwards by the histories is
    # reported whatever order the log shows
    result = check(committing(commit(A, 42, 1, {0: 15}, sent=40)), broker_commits=[(T, 0, 15), (T, 0, 20)])
    (v,) = result.violations
    assert "commit of 15 by" in v.message and "after the commit of 20" in v.message


def test_c_an_acknowledged_commit_the_broker_never_applied() -> None:
    # the broker's log lacks the acknowledged 20 (an answer lost mid-frame, reported as a success)
    (v,) = only(committing(), "C", broker_commits=[(T, 0, 5)]).violations
    assert v.tp == (T, 0) and v.offsets == (20, 20)
    assert "commit of 20 by" in v.message and "the broker's commit log has no commit of that offset" in v.message
    assert "a false success" in v.message
    # a failed commit need not be in the log
    assert check(
        committing(commit(A, 42, 1, {0: 20}, sent=40, error="KafkaTimeoutError()")), broker_commits=[(T, 0, 20)]
    ).ok
    # a broker without a readable log: what it holds in the end
    (v,) = only(committing(), "C", broker_committed={(T, 0): 12}).violations
    assert "the broker holds 12 in the end" in v.message
    (v,) = only(committing(), "C", broker_committed={}).violations
    assert "the broker holds no committed offset" in v.message
    assert check(committing(), broker_committed={(T, 0): 20}).ok
    assert check(committing(), broker_committed={(T, 0): 25}).ok  # a later commit whose answer was lost
    # unless the consumer moved back itself (then a smaller one may have been committed last)
    assert check(committing(seek(A, 35, 1, 0, 10)), broker_committed={(T, 0): 12}).ok


# -- K --------------------------------------------------------------------------------------------------


def parallel(*handled_lines: Line) -> list[Line]:
    return [
        started(A, 0),
        owned("assigned", A, 10, 3, 0),
        reset(A, 11, 3, 0, 0, why="earliest"),
        restart(A, 12, 0, 0),
        read(A, 21, 3, 0, 0, 9),
        *handled_lines,
    ]


def test_k_one_key_handled_twice_at_once_and_out_of_order() -> None:
    result = only(
        parallel(
            handled(A, 22, 30, 0, 1, "k1"),
            handled(A, 25, 26, 0, 2, "k1"),  # while 1 still ran
            handled(A, 31, 32, 0, 5, "k1"),
            handled(A, 33, 34, 0, 4, "k1"),  # after 5
            handled(A, 22, 40, 0, 3, "k2"),  # another key: alongside is fine
        ),
        "K",
    )
    overlap, order = result.violations
    assert overlap.offsets == (1, 2) and "events-0 key k1:" in overlap.message
    assert "handled offset 2 from 25.0 ms while offset 1 of that key was still being handled (until 30.0 ms)" in (
        overlap.message
    )
    assert order.offsets == (4, 5) and "handled offset 4 (from 33.0 ms) after offset 5" in order.message


def test_k_a_restart_begins_a_new_run() -> None:
    events = parallel(
        handled(A, 22, 23, 0, 5, None),
        handled(A, 24, 25, 0, 6, None),
        seek(A, 26, 3, 0, 2),
        restart(A, 26.5, 0, 2),
        read(A, 31, 3, 0, 2, 9),
        handled(A, 32, 33, 0, 2, None),
    )
    assert check(events).ok, check(events).format()
    only([e for e in events if e["event"] != "parallel_restart" or e["offset"] != 2], "K")


# -- loading and the command ----------------------------------------------------------------------------


def write(directory: Path, events: list[Line], tail: str = "") -> None:
    directory.mkdir(exist_ok=True)
    for name in sorted({e["consumer"] for e in events}):
        text = "".join(json.dumps(e) + "\n" for e in events if e["consumer"] == name)
        (directory / f"{name.split('@')[0]}.jsonl").write_text(text + (tail if name == A else ""))


def test_a_half_line_at_the_end_of_a_file_is_counted_not_fatal(tmp_path: Path) -> None:
    write(tmp_path, clean(), tail='{"t": 250.0, "consumer": "a@101#1", "event": "re')
    (tmp_path / "notes.txt").write_text("not a history")
    history = load(tmp_path)
    assert len(history.files) == 2 and len(history.events) == len(clean())
    assert history.torn == 1 and history.unparseable[0].at_end and history.unparseable[0].path.endswith("a.jsonl")
    result = check(history, produced=PRODUCED)
    assert result.ok and result.summary["torn"] == 1
    assert "1 torn last line(s) passed over (what a process killed while writing leaves)" in result.format()


def test_load_refuses_a_directory_without_history(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="no history there"):
        load(tmp_path)
    (tmp_path / "x.jsonl").write_text('{"t": 1, "cons')
    with pytest.raises(HistoryError, match="no history lines"):
        load(tmp_path)


def test_lines_without_the_fields_their_event_needs_are_reported() -> None:
    broken = line("read", A, 30, 1, tp=[T, 0])  # no offsets
    result = check([*committing(), broken])
    assert result.summary["malformed"] == 1 and not result.violations and not result.ok  # not checked whole
    assert "WARNING: 1 line(s) lack fields their event needs and were not checked" in result.format()
    # lines of some other format are no history at all: nothing passes
    other = check([{"t": 1.0, "member": "m0", "event": "read"}])
    assert not other.ok and other.status("E") == "not checked"


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad, empty = tmp_path / "good", tmp_path / "bad", tmp_path / "empty"
    write(good, clean())
    write(bad, frozen([read(A, 205, 1, 0, 10, 14, poll=40), read(A, 205.5, 1, 0, 15, 19, poll=205.2)]))
    empty.mkdir()
    produced = tmp_path / "produced.json"
    produced.write_text(json.dumps(PRODUCED))

    assert main(["check-history", str(good), "--produced", str(produced)]) == 0
    out = capsys.readouterr().out
    assert "consumers: 2" in out and "records read" in out and "no violations" in out and "L  PASSED" in out

    assert main(["check-history", str(bad), "--limit", "5"]) == 1
    out = capsys.readouterr().out
    assert "E: 1 violation(s)" in out and "E  VIOLATED" in out and "L  NOT CHECKED" in out

    broker = tmp_path / "commits.jsonl"
    broker.write_text('["events", 0, 9]\n["events", 0, 7]\n')
    assert main(["check-history", str(good), "--broker-commits", str(broker)]) == 1
    assert "goes from 9 down to 7" in capsys.readouterr().out
    held = tmp_path / "committed.json"
    held.write_text(json.dumps({T: {"0": 0, "1": 0}}))  # below what the histories say was acknowledged
    assert main(["check-history", str(good), "--broker-committed", str(held)]) == 1
    assert "a false success" in capsys.readouterr().out

    malformed = tmp_path / "malformed"
    write(malformed, [*committing(), line("read", A, 30, 1, tp=[T, 0])])
    assert main(["check-history", str(malformed)]) == 2
    captured = capsys.readouterr()
    assert "WARNING: 1 line(s) lack fields" in captured.out and "not checked whole" in captured.err

    old_format = tmp_path / "old"
    old_format.mkdir()
    (old_format / "m0.jsonl").write_text(json.dumps({"t": 1.0, "member": "m0", "event": "read"}) + "\n")
    for argv in (
        [str(empty)],
        [str(old_format)],
        [str(tmp_path / "missing")],
        [str(good), "--produced", str(broker)],  # not a produced file
        [str(good), "--broker-commits", str(produced)],
        [str(good), "--broker-committed", str(broker)],  # not a {"topic": {"partition": offset}} file
    ):
        assert main(["check-history", *argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
        assert captured.err.startswith("fsm-consumer check-history: ")


def test_every_public_name_resolves() -> None:
    import fsm_consumer.history as history

    assert all(getattr(history, name) is not None for name in history.__all__)
    assert list(RULES) == ["L", "E", "D", "M", "C", "K", "H", "N", "A", "S"]
