"""What the timeline picture (``_timeline``) draws, worked out from a ``Timeline``: each consumer's membership
states, its silent stretches and faults, reads and commits merged per pixel, the partitions' owners in
lanes and where two owners overlap. No drawing here."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from ._model import Commit, Interval, Read, Timeline
from ._ownership import Model, Verdict

Scale = Callable[[float], float]  # a time (ms) to an x (px)


@dataclass
class Segment:
    """A stretch of one membership state: ``t0`` to ``t1``; ``merged`` states too brief to draw on their own
    were folded into it."""

    t0: float
    t1: float
    state: str
    via: str  # the trigger that entered it ("" for the state before the first transition)
    generation: int
    merged: int = 0


def membership_segments(tl: Timeline, name: str) -> list[Segment]:
    """The states of a consumer's membership machine(s) (``transition`` lines whose machine begins with
    "membership"), from its first line to its last."""
    info = tl.consumers[name]
    lines = [e for e in tl.transitions.get(name, []) if str(e.get("machine", "")).startswith("membership")]
    if not lines:
        return []
    out = [Segment(info.first_t, float(lines[0]["t"]), str(lines[0].get("source", "?")), "", -1)]
    for e in lines:
        t = float(e["t"])
        out[-1].t1 = t
        generation = e.get("generation")
        out.append(
            Segment(
                t, t, str(e.get("dest", "?")), str(e.get("trigger", "")), generation if type(generation) is int else -1
            )
        )
    out[-1].t1 = max(out[-1].t0, info.last_t)
    return out


def merge_segments(segments: Sequence[Segment], x: Scale, min_px: float = 1.0) -> list[Segment]:
    """Segments narrower than ``min_px`` folded into the one before them (or, at the start, the next)."""
    out: list[Segment] = []
    start: float | None = None  # brief segments at the start wait for one to fold into
    waiting = 0
    for s in segments:
        if x(s.t1) - x(s.t0) < min_px:
            if out:
                out[-1].t1 = s.t1
                out[-1].merged += 1 + s.merged
            else:
                start = s.t0 if start is None else start
                waiting += 1
            continue
        out.append(Segment(s.t0 if start is None else start, s.t1, s.state, s.via, s.generation, s.merged + waiting))
        start, waiting = None, 0
    if start is not None:  # all of them brief: one segment
        last = segments[-1]
        out.append(Segment(start, last.t1, last.state, last.via, last.generation, waiting - 1))
    return out


@dataclass(frozen=True)
class Gap:
    """No line of a consumer from ``t0`` to ``t1``: frozen, stalled, or nothing to say."""

    consumer: str
    t0: float
    t1: float


def silent_gaps(tl: Timeline, gap_ms: float) -> dict[str, list[Gap]]:
    out: dict[str, list[Gap]] = defaultdict(list)
    previous: dict[str, float] = {}
    for e in tl.events:
        name, t = e["consumer"], float(e["t"])
        before = previous.get(name)
        if before is not None and t - before > gap_ms:
            out[name].append(Gap(name, before, t))
        previous[name] = t
    return dict(out)


@dataclass(frozen=True)
class Fault:
    consumer: str
    t: float
    kind: str
    text: str


def _partitions(value: object) -> str:
    if not isinstance(value, list):
        return ""
    return ", ".join(f"{p[0]}-{p[1]}" for p in value if isinstance(p, (list, tuple)) and len(p) == 2)


def faults(tl: Timeline) -> dict[str, list[Fault]]:
    """Per consumer: its sessions that expired, partitions lost or abandoned, errors held for the user,
    rebalance callbacks that raised."""
    out: dict[str, list[Fault]] = defaultdict(list)
    for e in tl.events:
        kind, name, t = e["event"], e["consumer"], float(e["t"])
        generation = e.get("generation", -1)
        if kind in ("session_expired", "lost", "abandoned"):
            what = {"session_expired": "session expired", "lost": "partitions lost", "abandoned": "abandoned"}[kind]
            text = f"{what} (generation {generation}): {_partitions(e.get('partitions')) or 'no partitions'}"
        elif kind == "held":
            text = f"error held for the user ({e.get('key')}): {e.get('error')}"
        elif kind == "callback" and e.get("error") is not None:
            text = f"{e.get('name')} raised: {e.get('error')} (partitions {_partitions(e.get('partitions'))})"
        else:
            continue
        out[name].append(Fault(name, t, kind, text))
    return dict(out)


def outside_reads(model: Model) -> dict[int, Verdict]:
    """The reads (by line ``i``) the ownership model finds outside their member's ownership, beyond the one
    poll rule E allows: what the picture marks red is what the checker reports."""
    return {i: v for i, v in model.verdicts.items() if v.kind.violates}


@dataclass
class ReadMark:
    """Reads of one row merged into one tick: those within one ``px`` wide bucket (and all inside or all
    outside their consumer's ownership)."""

    t0: float
    t1: float
    reads: int
    records: int
    first: int
    last: int
    outside: bool
    generations: set[int] = field(default_factory=set)


@dataclass
class CommitMark:
    t0: float
    t1: float
    commits: int
    low: int
    high: int
    acked: bool
    generations: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def merge_reads(reads: Sequence[Read], outside: Collection[int], x: Scale, px: float) -> list[ReadMark]:
    out: list[ReadMark] = []
    keys: list[tuple[int, bool]] = []
    for r in reads:
        key = (int(x(r.t) // px), r.i in outside)
        if out and keys[-1] == key:
            m = out[-1]
            m.t1, m.reads, m.records = r.t, m.reads + 1, m.records + r.count
            m.first, m.last = min(m.first, r.first), max(m.last, r.last)
            m.generations.add(r.generation)
        else:
            out.append(ReadMark(r.t, r.t, 1, r.count, r.first, r.last, key[1], {r.generation}))
            keys.append(key)
    return out


def merge_commits(commits: Sequence[Commit], x: Scale, px: float) -> list[CommitMark]:
    out: list[CommitMark] = []
    keys: list[tuple[int, bool]] = []
    for k in commits:
        key = (int(x(k.t) // px), k.acked)
        if out and keys[-1] == key:
            m = out[-1]
            m.t1, m.commits = k.t, m.commits + 1
            m.low, m.high = min(m.low, k.offset), max(m.high, k.offset)
            m.generations.add(k.generation)
        else:
            m = CommitMark(k.t, k.t, 1, k.offset, k.offset, k.acked, {k.generation})
            out.append(m)
            keys.append(key)
        if k.error is not None and len(m.errors) < 3:
            m.errors.append(k.error)
    return out


def bucket_px(rows: Sequence[tuple[Sequence[Read], Sequence[Commit]]], x: Scale, budget: int) -> float:
    """The narrowest bucket (1, 2, 4 ... px) at which the rows' reads and commits make at most ``budget`` marks."""
    px = 1.0
    while px < 1024:
        marks = 0
        for reads, commits in rows:
            marks += len({int(x(r.t) // px) for r in reads}) + len({int(x(k.t) // px) for k in commits})
        if marks <= budget:
            break
        px *= 2
    return px


def within(lines: Sequence[Read], v: Interval) -> Sequence[Read]:
    """The reads (of one consumer and partition, in line order) within an ownership interval."""
    return lines[bisect.bisect_left(lines, v.start_i, key=_i) : bisect.bisect_left(lines, v.end_i, key=_i)]


def committed_within(commits: Sequence[Commit], v: Interval) -> int | None:
    """The largest offset acknowledged to a consumer's commits (of one partition, in line order) within an
    ownership interval."""
    lo, hi = bisect.bisect_left(commits, v.start_i, key=_i), bisect.bisect_left(commits, v.end_i, key=_i)
    return max((k.offset for k in commits[lo:hi] if k.acked), default=None)


def _i(line: Read | Commit) -> int:
    return line.i


def lanes(intervals: Sequence[Interval]) -> list[list[Interval]]:
    """Intervals (of one partition) in as few lanes as keep each lane's intervals apart in time."""
    out: list[list[Interval]] = []
    for v in sorted(intervals, key=lambda v: (v.start_t, v.start_i)):
        for lane in out:
            if lane[-1].end_t <= v.start_t:
                lane.append(v)
                break
        else:
            out.append([v])
    return out


@dataclass(frozen=True)
class Overlap:
    """Two consumers owning one partition at once (``a`` assigned first)."""

    a: Interval
    b: Interval
    t0: float
    t1: float


def overlaps(intervals: Sequence[Interval]) -> list[Overlap]:
    out: list[Overlap] = []
    ordered = sorted(intervals, key=lambda v: (v.start_i, v.consumer))
    for n, a in enumerate(ordered):
        for b in ordered[n + 1 :]:
            if b.start_i >= a.end_i:
                break
            if b.consumer != a.consumer:
                out.append(Overlap(a, b, b.start_t, min(a.end_t, b.end_t)))
    return out
