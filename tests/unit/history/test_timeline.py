"""The timeline picture (``draw_timeline``, ``fsm-consumer timeline``) of hand-written histories: an SVG
that parses, a band per consumer, a bar per ownership interval where its times put it, marks for reads,
commits, faults, silent stretches and the checker's violations, merging and a cap for big histories."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from fsm_consumer.cli import main
from fsm_consumer.history import Timeline, check, draw_timeline, load

from .test_history_check import line

T = "events"
Line = dict[str, Any]
NS = {"s": "http://www.w3.org/2000/svg"}
A, B = "a@101#1", "b@102#1"


# -- builders (line() is test_history_check's) -------------------------------------------------------------


def started(c: str, t: float, group: str | None = "g") -> Line:
    return line("started", c, t, group=group, config={"group_instance_id": None})


def owned(event: str, c: str, t: float, gen: int, *ps: int) -> Line:
    return line(event, c, t, gen, partitions=[[T, p] for p in ps])


def read(c: str, t: float, gen: int, p: int, first: int, last: int, poll: float | None = None) -> Line:
    fields = {"from": first, "to": last + 1}
    t_poll = t - 1 if poll is None else poll
    return line(
        "read", c, t, gen, tp=[T, p], offsets=[first, last], count=last - first + 1, t_poll_start=t_poll, **fields
    )


def commit(c: str, t: float, gen: int, offsets: dict[int, int], error: str | None = None) -> Line:
    return line("commit", c, t, gen, offsets=[[T, p, o] for p, o in offsets.items()], error=error, sent_ago_ms=2)


def membership(c: str, t: float, source: str, trigger: str, dest: str, gen: int = -1) -> Line:
    return line("transition", c, t, gen, machine=f"membership/{c}", source=source, trigger=trigger, dest=dest)


def handover() -> list[Line]:
    """a owns events-0 and events-1, reads and commits; events-1 goes to b at 60 (a commit of b's fails and
    is retried); a closes at 200, b at 210."""
    return [
        started(A, 0),
        started(B, 5),
        membership(A, 8, "unjoined", "join_requested", "joining"),
        membership(A, 9, "joining", "joined", "stable", 1),
        owned("assigned", A, 10, 1, 0, 1),
        read(A, 21, 1, 0, 0, 9),
        read(A, 21.5, 1, 1, 0, 4),
        commit(A, 30, 1, {0: 10, 1: 5}),
        membership(A, 49, "stable", "rejoin_needed", "joining", 1),
        owned("revoked", A, 50, 2, 1),
        membership(A, 55, "joining", "joined", "stable", 2),
        read(A, 56, 2, 0, 10, 19),
        membership(B, 58, "joining", "joined", "stable", 2),
        owned("assigned", B, 60, 2, 1),
        read(B, 66, 2, 1, 5, 19),
        commit(B, 70, 2, {1: 20}, error="RequestTimedOut"),
        commit(B, 80, 2, {1: 20}),
        commit(A, 98, 2, {0: 20}),
        line("closed", A, 200, 2),
        line("closed", B, 210, 2),
    ]


def frozen(a_reads: list[Line], a_end: float = 206) -> list[Line]:
    """a owns events-0, freezes in a poll begun at 40 (no line from 30 to 201); b is assigned it at 100; a
    thaws, hands out ``a_reads`` and notices at ``a_end`` that its session expired."""
    return [
        started(A, 0),
        started(B, 1),
        owned("assigned", A, 10, 1, 0),
        read(A, 21, 1, 0, 0, 9, poll=20),
        commit(A, 30, 1, {0: 10}),
        owned("assigned", B, 100, 2, 0),
        read(B, 111, 2, 0, 10, 19, poll=110),
        membership(A, 201, "stable", "heartbeat_failed", "joining", 1),
        *a_reads,
        owned("session_expired", A, a_end, 1, 0),
        read(B, 300, 2, 0, 20, 24, poll=299),
        commit(B, 310, 2, {0: 25}),
    ]


STALE = [read(A, 205, 1, 0, 10, 14, poll=40), read(A, 205.5, 1, 0, 15, 19, poll=205.2)]


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg.encode())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def find(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    """The marks of a class drawn on the picture (the legend's swatches aside)."""
    drawn = [child for child in root if child.get("id") != "legend"]
    return [e for child in drawn for e in child.iter(f"{{{NS['s']}}}{tag}") if e.get("class") == cls]


def texts(root: ET.Element) -> list[str]:
    return [e.text or "" for e in root.iter(f"{{{NS['s']}}}text")]


# -- the picture -------------------------------------------------------------------------------------------


def test_a_band_per_consumer_and_a_bar_per_ownership_where_its_times_put_it() -> None:
    events = handover()
    root = parse(draw_timeline(events, width=1000))
    assert [b.get("data-consumer") for b in find(root, "rect", "band")] == [A, B]
    left, scale, origin = (float(root.get(k) or "nan") for k in ("data-left", "data-scale", "data-origin"))
    assert origin == 0 and left > 0 and scale == pytest.approx((1000 - left - 24) / 210)
    intervals = Timeline.build(events).intervals
    assert len(intervals) == 3  # a: events-0 (to its close), events-1 (to the revoke); b: events-1
    for view in ("consumer", "partition"):
        bars = [b for b in find(root, "rect", "own") if b.get("data-view") == view]
        assert len(bars) == len(intervals)
        for v in intervals:
            key = (v.consumer, f"{v.tp[0]}-{v.tp[1]}", repr(v.start_t))
            (bar,) = [b for b in bars if (b.get("data-consumer"), b.get("data-tp"), b.get("data-t0")) == key]
            assert bar.get("data-ended-by") == v.ended_by and bar.get("data-generation") == str(v.generation)
            assert float(bar.get("x") or 0) == pytest.approx(left + (v.start_t - origin) * scale, abs=0.06)
            assert float(bar.get("width") or 0) == pytest.approx((v.end_t - v.start_t) * scale, abs=0.11)
            assert bar.find("s:title", NS) is not None  # a tooltip with the details
    (a_1,) = [b for b in find(root, "rect", "own") if b.get("data-view") == "consumer" and b.get("data-t1") == "50.0"]
    assert "read 0..4 (5 records in 1 reads), committed up to 5" in (a_1.findtext("s:title", "", NS))


def test_reads_commits_and_states_are_marked() -> None:
    root = parse(draw_timeline(handover(), width=1000))
    assert len(find(root, "line", "rd")) == 4 and not find(root, "line", "srd")
    acked = find(root, "polygon", "ca")
    assert sorted(int(c.get("data-offset") or 0) for c in acked) == [5, 10, 20, 20]  # a's first commit: 2 rows
    (failed,) = find(root, "path", "cf")
    assert failed.get("data-offset") == "20" and "FAILED: RequestTimedOut" in failed.findtext("s:title", "", NS)
    states = [s.get("data-state") for s in find(root, "rect", "state")]
    assert states == ["unjoined", "joining", "stable", "joining", "stable", "joining", "stable"]
    assert "checker: no violations" in texts(root) and not find(root, "rect", "vio")


def test_a_violation_of_rule_e_is_marked_with_its_letter() -> None:
    events = frozen(STALE)
    result = check(events)
    assert [v.rule for v in result.violations] == ["E"]
    for svg in (draw_timeline(events), draw_timeline(events, result=result)):  # checked by itself by default
        root = parse(svg)
        (band,) = find(root, "rect", "vio")
        assert band.get("data-rule") == "E" and band.get("data-t") == "205.0"
        assert "E: events-0: a@101#1 handed out offsets 10..19" in band.findtext("s:title", "", NS)
        assert "E" in texts(root) and "checker: rule E: 1 violation(s)" in texts(root)
        assert len(find(root, "circle", "vm")) == 2  # on a's and b's rows of events-0
        assert find(root, "rect", "ov")  # a and b owned events-0 at once
        assert not find(root, "rect", "gap")  # a was silent 171 ms only


def test_silent_stretches_faults_and_reads_while_not_owning() -> None:
    # a declares its session expired at 204 and hands out its frozen poll at 205: no longer its partition
    events = frozen([read(A, 205, 1, 0, 10, 14, poll=40)], a_end=204)
    events = [{k: v * 10 if k in ("t", "t_poll_start") else v for k, v in e.items()} for e in events]  # 10x slower
    events = [dict(e, wall=1_700_000_000.0 + e["t"] / 1000.0) for e in events]  # the wall clock with it
    root = parse(draw_timeline(events))
    (gap,) = [g for g in find(root, "rect", "gap") if g.get("data-consumer") == A]  # 300 .. 2010
    assert "no line from a for 1.71 s" in gap.findtext("s:title", "", NS)
    (stale,) = find(root, "line", "srd")
    assert "while this consumer did not own the partition" in stale.findtext("s:title", "", NS)
    (fault,) = find(root, "polygon", "fault")
    assert "session expired (generation 1): events-0" in fault.findtext("s:title", "", NS)
    assert any("read(s) made while their consumer did not own the partition" in t for t in texts(root))


def test_reads_closer_than_a_pixel_are_merged_and_marks_are_capped() -> None:
    events = [started(A, 0), owned("assigned", A, 1, 1, 0, 1)]
    events += [read(A, 2 + k * 0.01, 1, k % 2, k, k) for k in range(2000)]  # 20 ms of 2000 reads
    events += [read(A, 1000 + k, 1, k % 2, 2000 + k, 2000 + k) for k in range(0, 1000, 10)]
    events += [line("closed", A, 2000, 1)]
    root = parse(draw_timeline(events, width=1000))
    ticks = find(root, "line", "rd")
    assert 100 < len(ticks) < 200  # 100 reads a pixel apart or more, the 2000 in a few pixels
    assert any("2100 reads drawn as" in t and "merged" in t for t in texts(root))
    capped = parse(draw_timeline(events, width=1000, max_elements=60))
    assert any("not drawn: the picture holds at most 60 marks" in t for t in texts(capped))
    assert len(find(capped, "line", "rd")) < 60


def test_text_from_the_histories_is_escaped() -> None:
    odd = 'x<&">\x01@1#1'
    events = [started(odd, 0), owned("assigned", odd, 1, 1, 0), line("held", odd, 5, 1, key="k", error="<boom> & \x02")]
    root = parse(draw_timeline(events, title="a <title> & more"))
    assert [b.get("data-consumer") for b in find(root, "rect", "band")] == ['x<&">\ufffd@1#1']
    assert "a <title> & more" in texts(root)
    assert "<boom> & \ufffd" in find(root, "polygon", "fault")[0].findtext("s:title", "", NS)


def test_no_lines_still_make_a_picture_and_a_narrow_width_is_refused() -> None:
    parse(draw_timeline([]))
    with pytest.raises(ValueError, match="at least 400"):
        draw_timeline(handover(), width=100)


# -- the command ---------------------------------------------------------------------------------------------


def write(directory: Path, events: list[Line]) -> None:
    directory.mkdir(exist_ok=True)
    for name in sorted({e["consumer"] for e in events}):
        text = "".join(json.dumps(e) + "\n" for e in events if e["consumer"] == name)
        (directory / f"{name.split('@')[0]}.jsonl").write_text(text)


def test_cli_writes_the_picture_and_exits_2_without_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, empty = tmp_path / "good", tmp_path / "empty"
    write(good, frozen(STALE))
    empty.mkdir()
    assert main(["timeline", str(good)]) == 0  # violations are drawn, not an error
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {good / 'timeline.svg'} (") and out.rstrip().endswith("violations: E 1")
    assert find(parse((good / "timeline.svg").read_text()), "rect", "vio")

    other = tmp_path / "out.svg"
    produced = tmp_path / "produced.json"
    produced.write_text(json.dumps({T: {"0": 30}}))
    assert main(["timeline", str(good / "a.jsonl"), str(good / "b.jsonl"), "-o", str(other), "--width", "800",
                 "--produced", str(produced)]) == 0  # fmt: skip
    root = parse(other.read_text())
    assert root.get("width") == "800" and [v.get("data-rule") for v in find(root, "rect", "vio")] == ["E"]
    assert "rule L: 1 violation(s) without a time (not drawn): see fsm-consumer check-history" in texts(root)
    capsys.readouterr()

    for argv in ([str(empty)], [str(tmp_path / "missing")], [str(good), "--produced", str(good / "a.jsonl")]):
        assert main(["timeline", *argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
        assert captured.err.startswith("fsm-consumer timeline: ")
    assert main(["timeline", str(good), "--width", "10"]) == 2
    assert load(good).files and not (empty / "timeline.svg").exists()


def test_what_the_picture_marks_red_the_checker_reports() -> None:
    """One model for both: the poll under way at the freeze (within its max_records) is rule E's allowance and
    no red tick; the poll begun after the new owner's assignment is red, and it is what E reports."""
    allowed, late = (dict(r, max_records=500) for r in STALE)
    events = frozen([allowed, late])
    result = check(events)
    (v,) = result.violations
    assert v.rule == "E" and v.offsets == (15, 19)
    root = parse(draw_timeline(events, result=result))
    (red,) = find(root, "line", "srd")
    assert "15..19" in red.findtext("s:title", "", NS) and "(rule E)" in red.findtext("s:title", "", NS)
    assert any("1 read(s) of a poll under way when its consumer's ownership ended" in t for t in texts(root))
    # a's bar after b was given the partition is hatched: the part of its own view the group no longer meant
    tails = [t for t in find(root, "rect", "ov") if t.get("data-legit-t1") == "100.0"]
    assert len(tails) == 2  # in a's band and in the partition's row
