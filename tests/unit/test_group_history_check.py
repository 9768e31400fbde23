"""The checker over group members' histories (fsm_consumer/testing/_group_history.py), on hand-written
histories: each rule flags exactly what breaks it, and a clean history passes."""

from __future__ import annotations

import json

from fsm_consumer.testing import check, commits_backwards, load_histories, reads_below_commit, shared_reads, summarize

T = "events"


def read(member, generation, p, first, last, start, end=None):
    return dict(
        event="read",
        member=member,
        generation=generation,
        member_id=f"{member}-id",
        tp=[T, p],
        offsets=[first, last],
        count=last - first + 1,
        t_poll_start=start,
        t=start + 5 if end is None else end,
    )


def commit(member, generation, p, offset, start, end):
    return dict(event="commit", member=member, generation=generation, tp=[T, p], offset=offset, t_start=start, t=end)


def owned(event, member, generation, *ps, t):
    return dict(event=event, member=member, generation=generation, partitions=[[T, p] for p in ps], t=t)


# a partition handed from a to b through a cooperative rebalance: a reads 0..9 (gen 1), commits 10, gives
# p0 up (gen 2), b gets it (gen 3) and reads on from 10; a re-read above the last commit is allowed
CLEAN = [
    owned("assigned", "a", 1, 0, t=0),
    read("a", 1, 0, 0, 9, 10),
    commit("a", 1, 0, 10, 20, 30),
    read("a", 1, 0, 10, 14, 40),  # handed out, never committed...
    owned("revoked", "a", 2, 0, t=50),
    owned("assigned", "b", 3, 0, t=60),
    read("b", 3, 0, 10, 19, 70),  # ...so b reads 10..14 again: a duplicate, no violation
    commit("b", 3, 0, 20, 80, 90),
    dict(event="commit_failed", member="a", error="RebalanceInProgressError()", t=45),
    dict(event="closed", member="a", t=100),
]


def test_a_clean_history_has_no_violations_and_its_totals():
    result = check(CLEAN, produced={(T, 0): 20, (T, 1): 0})
    assert result.violations == [] and result.ok
    s = result.summary
    assert (s["records_read"], s["distinct_offsets"], s["duplicates"]) == (25, 20, 5)
    assert (s["commits"], s["commits_failed"], s["reads_without_generation"]) == (2, 1, 0)
    assert s["members"]["a"]["generations"] == [1, 2] and s["members"]["b"]["generations"] == [3]
    assert s["members"]["a"]["closed"] and not s["members"]["b"]["closed"]
    assert (s["produced"], s["never_read"], s["lost"]) == (20, 0, 0)
    assert "no violations" in result.format()


def test_r1_two_members_read_one_offset_in_one_generation():
    events = [
        read("a", 4, 0, 0, 9, 10),
        read("b", 4, 0, 8, 12, 11),  # 8..9 overlap, same generation: a violation
        read("b", 5, 0, 0, 9, 20),  # another generation: a re-read, allowed
        read("a", 4, 0, 5, 7, 30),  # a again: never R1 with itself, and below b's 8
        read("a", 4, 1, 0, 9, 10),
        read("c", -1, 1, 0, 9, 12),  # outside any generation: counted, not R1
    ]
    vs = shared_reads(events)
    assert [(v.details["members"], v.details["offsets"], v.details["generation"]) for v in vs] == [
        (("a", "b"), (8, 9), 4)
    ]
    assert vs[0].rule == "R1" and "events-0 offsets 8..9 read by a" in vs[0].message and "generation 4" in vs[0].message
    assert commits_backwards(events) == [] and reads_below_commit(events) == []
    assert summarize(events)["reads_without_generation"] == 10


def test_r2_a_commit_below_one_completed_before_it_started():
    events = [
        commit("a", 1, 0, 50, 0, 10),
        commit("b", 2, 0, 40, 5, 15),  # overlaps the larger commit: either order is possible, fine
        commit("b", 2, 0, 45, 20, 30),  # started after 50 completed: backwards
        commit("a", 1, 1, 7, 0, 10),
        commit("a", 1, 1, 7, 20, 30),  # the same offset again: not backwards
    ]
    vs = commits_backwards(events)
    assert len(vs) == 1 and vs[0].rule == "R2"
    assert vs[0].details["commit"]["offset"] == 45 and vs[0].details["earlier"]["offset"] == 50
    assert "events-0 commit of 45 by b" in vs[0].message and "after a committed 50" in vs[0].message
    assert shared_reads(events) == [] and reads_below_commit(events) == []


def test_r3_a_read_below_a_completed_commit():
    events = [
        commit("b", 3, 0, 100, 40, 50),
        read("a", 2, 0, 90, 109, 45),  # its poll started before the commit completed: fine
        read("a", 2, 0, 95, 120, 60),  # started after: 95..99 are below the commit
        read("b", 3, 0, 100, 110, 61),  # at the commit: fine
        read("a", 2, 1, 0, 5, 60),  # another partition: fine
    ]
    vs = reads_below_commit(events)
    assert len(vs) == 1 and vs[0].rule == "R3"
    assert vs[0].details["offsets"] == (95, 99) and vs[0].details["read"]["member"] == "a"
    assert "events-0 offsets 95..99 read by a" in vs[0].message and "commit of 100 by b" in vs[0].message
    assert shared_reads(events) == [] and commits_backwards(events) == []


def test_check_collects_every_rule_and_format_names_them():
    events = [
        *CLEAN,
        read("c", 3, 0, 15, 16, 71),  # R1 with b's 10..19 (gen 3); above a's commit of 10
        commit("c", 3, 0, 12, 95, 96),  # R2: below b's 20, completed at 90
        read("c", 3, 0, 18, 18, 97),
    ]  # R1 with b's 10..19 again; R3: below b's 20
    result = check(events)
    assert [(v.rule, v.details.get("offsets")) for v in result.violations] == [
        ("R1", (15, 16)),
        ("R1", (18, 18)),
        ("R2", None),
        ("R3", (18, 18)),
    ]
    text = result.format(limit=1)
    assert "R1: 2 violation(s)" in text and "... and 1 more" in text and "R2: 1 violation(s)" in text


def test_never_read_counts_as_lost_only_when_the_end_was_reached():
    events = [read("a", 1, 0, 0, 4, 10), read("a", 1, 0, 7, 9, 20), read("a", 1, 1, 0, 2, 10)]
    s = summarize(events, produced={(T, 0): 10, (T, 1): range(6)})
    assert (s["never_read"], s["lost"]) == (5, 2)
    assert s["partitions"]["events-0"] == dict(produced=10, never_read=2, never_read_sample=[5, 6], end_reached=True)
    assert s["partitions"]["events-1"]["end_reached"] is False


def test_load_histories_skips_a_torn_last_line(tmp_path):
    good, torn = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    good.write_text("".join(json.dumps(e) + "\n" for e in CLEAN[:3]))
    torn.write_text(json.dumps(CLEAN[5]) + "\n" + '{"event": "re')
    events, bad = load_histories([good, torn])
    assert len(events) == 4 and bad == 1


def test_e_a_stale_member_reading_while_another_holds_the_partition_whatever_the_generations():
    """Issue 23: a thawed member that has not noticed its session ran out (old generation 1) reads its old
    partition while the member it went to (generation 2) holds it. R1 (one generation) cannot see it."""
    from fsm_consumer.testing._group_history import stale_reads

    events = [
        owned("assigned", "a", 1, 0, t=0),
        read("a", 1, 0, 0, 9, 10, 15),
        # a frozen from 20; the group moves on: b gets p0 at 100 and reads from a's last commit
        owned("assigned", "b", 2, 0, t=100),
        read("b", 2, 0, 0, 19, 110),
        read("a", 1, 0, 10, 14, 18, 205),  # the poll under way at the freeze, returned on waking: allowed
        read("a", 1, 0, 15, 19, 210),  # a poll begun after b got p0: stale
        read("a", 1, 0, 20, 24, 220),
        owned("lost", "a", -1, 0, t=230),  # a notices at last
        read("b", 2, 0, 20, 24, 240),
    ]
    assert shared_reads(events) == []  # different generations: the old rule sees nothing
    (v,) = stale_reads(events)
    assert v.rule == "E" and "a read 15 records" in v.message and "while b held it" in v.message
    assert v.details["polls"] == 3
    # the thawed member's one poll that was under way at the freeze alone is not a violation
    assert stale_reads(events[:5] + events[7:]) == []
    result = check(events)
    assert result.summary["held_twice"] == 1 and result.summary["stale_records"] == 15
    # a clean handover (revoked before the other is assigned) holds nothing twice
    assert check(CLEAN).summary["held_twice"] == 0


def test_c_the_broker_commit_log_never_goes_down():
    from fsm_consumer.testing import broker_commits_backwards

    assert broker_commits_backwards([(T, 0, 5), (T, 1, 3), (T, 0, 5), (T, 0, 9)]) == []
    (v,) = broker_commits_backwards([(T, 0, 5), (T, 0, 9), (T, 1, 1), (T, 0, 7)])
    assert v.rule == "C" and "events-0: the broker's commit log goes from 9 down to 7 (entry 3)" in v.message
