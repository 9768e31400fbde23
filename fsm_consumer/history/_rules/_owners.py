"""Rule E: one owner at a time."""

from __future__ import annotations

import bisect
from collections import defaultdict

from .._model import TP, Commit, GroupKey, Interval, Read, Timeline, as_timeline, fmt_group, fmt_range, fmt_t, fmt_tp
from .._violation import Violation
from ._shared import Lines, dedupe, in_window, span, times


def rule_e(lines: Lines) -> list[Violation]:
    """E: one owner at a time, whatever the generations.

    * When a consumer Y is assigned a partition while another consumer X still owns it (X's interval
      began before Y's and has not ended), X's reads of it in the overlap are violations, except one:
      a read whose poll began before Y's ``assigned`` and which is X's only read in the overlap (the poll
      under way when X froze), provided X committed none of it (no acknowledged commit of X past the read's
      first offset sent after Y's assignment and before X owns the partition again). Several such Y in
      one interval of X: one read in all the overlaps.
    * A read of a partition by a consumer that does not own it (outside its own intervals) while another
      consumer owns it is a violation (no allowance).
    * Two consumers, both alive at the time (their histories' first to last lines overlap), handing out
      an offset of a partition in one generation (>= 0) is a violation (the read the first point allows
      excepted), unless the later reader joined that generation after the earlier read: then the broker
      numbered a second round like the first (Tansu 0.6 does; ``reused_generation_pairs`` counts them), and
      the first two points judge the ownership."""
    tl = as_timeline(lines)
    out: list[Violation] = []
    for group, scope in tl.scopes():
        allowed: set[int] = set()
        out.extend(_overlaps(scope, allowed))
        out.extend(_outside(scope))
        out.extend(_same_generation(scope, group, allowed)[0])
    return dedupe(out)


def _reads_by(tl: Timeline) -> dict[tuple[str, TP], list[Read]]:
    out: dict[tuple[str, TP], list[Read]] = defaultdict(list)
    for r in tl.reads:  # in line order
        out[(r.consumer, r.tp)].append(r)
    return out


def _intervals_by_tp(tl: Timeline) -> dict[TP, list[Interval]]:
    out: dict[TP, list[Interval]] = defaultdict(list)
    for v in tl.intervals:
        out[v.tp].append(v)
    return out


def _overlaps(tl: Timeline, allowed: set[int]) -> list[Violation]:
    reads = _reads_by(tl)
    out: list[Violation] = []
    for tp, intervals in sorted(_intervals_by_tp(tl).items()):
        starts = [v.start_i for v in intervals]  # the intervals are ordered by start
        for x in intervals:
            # every interval of another consumer that began while x held the partition, and x's reads in
            # the overlap: x is stale there (frozen, or cut off without knowing it yet)
            found: list[tuple[Interval, list[Read]]] = []
            for y in intervals[bisect.bisect_right(starts, x.start_i) : bisect.bisect_left(starts, x.end_i)]:
                if y.consumer != x.consumer:
                    inside = in_window(reads.get((x.consumer, tp), []), y.start_i, min(x.end_i, y.end_i))
                    if inside:
                        found.append((y, inside))
            stale = {r.i for _, inside in found for r in inside}
            if len(stale) == 1 and all(inside[0].t_poll_start < y.start_t for y, inside in found):
                # the one poll under way when x froze: allowed, as long as x did not commit it
                read = found[0][1][0]
                since = min(y.start_t for y, _ in found)
                # until x owns the partition again: then it reads on from the new owner's commit, and commits
                # what it read in that ownership, not the stale poll
                again = next((v.start_t for v in intervals if v.consumer == x.consumer and v.start_i > x.start_i), None)
                covering = [
                    k
                    for k in tl.commits
                    if k.consumer == x.consumer
                    and k.tp == tp
                    and k.acked
                    and since <= k.sent
                    and (again is None or k.sent < again)
                    and k.offset > read.first
                ]
                if not covering:
                    allowed.update(stale)
                    continue
                out.append(_committed_stale(tp, x, found[0][0], read, covering[0]))
                continue
            out.extend(_overlap(tp, x, y, inside) for y, inside in found)
    return out


def _overlap(tp: TP, x: Interval, y: Interval, inside: list[Read]) -> Violation:
    late = sum(1 for r in inside if r.t_poll_start >= y.start_t)
    lo, hi = span(inside)
    records = sum(r.count for r in inside)
    gens = sorted({r.generation for r in inside})
    return Violation(
        "E",
        f"{fmt_tp(tp)}: {x.consumer} handed out offsets {fmt_range(lo, hi)} ({records} records in "
        f"{len(inside)} reads at {times(inside)}, {late} of them in polls begun after "
        f"{y.consumer}'s assignment; it believed generation {'/'.join(map(str, gens))}) while "
        f"{y.consumer} owned it (assigned at {fmt_t(y.start_t)}, generation {y.generation}); "
        f"{x.consumer} had it from {fmt_t(x.start_t)} (generation {x.generation}) until "
        f"{fmt_t(x.end_t)} ({x.ended_by})",
        t=inside[0].t,
        consumers=(x.consumer, y.consumer),
        tp=tp,
        offsets=(lo, hi),
        details=dict(
            stale=x.consumer,
            owner=y.consumer,
            window=(y.start_t, min(x.end_t, y.end_t)),
            reads=len(inside),
            late_polls=late,
            records=records,
            stale_interval=x,
            owner_interval=y,
        ),
    )


def _committed_stale(tp: TP, x: Interval, y: Interval, read: Read, commit: Commit) -> Violation:
    return Violation(
        "E",
        f"{fmt_tp(tp)}: {x.consumer} handed out offsets {fmt_range(read.first, read.last)} at {fmt_t(read.t)} from the "
        f"poll under way when it froze (begun {fmt_t(read.t_poll_start)}) while {y.consumer} owned it (assigned at "
        f"{fmt_t(y.start_t)}), and committed {commit.offset} past them (sent {fmt_t(commit.sent)}, acknowledged "
        f"{fmt_t(commit.t)}): the records of that poll may be handed out, never committed",
        t=commit.t,
        consumers=(x.consumer, y.consumer),
        tp=tp,
        offsets=(read.first, read.last),
        details=dict(stale=x.consumer, owner=y.consumer, read=read, commit=commit, owner_interval=y),
    )


def _outside(tl: Timeline) -> list[Violation]:
    by_tp = _intervals_by_tp(tl)
    out = []
    for (name, tp), reads in sorted(_reads_by(tl).items()):
        others = [v for v in by_tp.get(tp, []) if v.consumer != name]
        if not others:
            continue
        mine = [v for v in by_tp.get(tp, []) if v.consumer == name]  # ordered, disjoint
        starts = [v.start_i for v in mine]
        found: dict[Interval, list[Read]] = defaultdict(list)
        for r in reads:
            n = bisect.bisect_right(starts, r.i)
            if n and mine[n - 1].holds(r.i):
                continue
            for v in others:
                if v.holds(r.i):
                    found[v].append(r)
        for owner, rs in found.items():
            ended = [v for v in mine if v.end_i <= rs[0].i]
            if ended:
                last = max(ended, key=lambda v: v.end_i)
                why = f"its own ownership had ended at {fmt_t(last.end_t)} ({last.ended_by})"
            else:
                why = "it had not been assigned it"
            lo, hi = span(rs)
            out.append(
                Violation(
                    "E",
                    f"{fmt_tp(tp)}: {name} handed out offsets {fmt_range(lo, hi)} ({len(rs)} reads at {times(rs)}, "
                    f"generation {'/'.join(map(str, sorted({r.generation for r in rs})))}) while {owner.consumer} "
                    f"owned it (assigned at {fmt_t(owner.start_t)}, generation {owner.generation}), and {why}",
                    t=rs[0].t,
                    consumers=(name, owner.consumer),
                    tp=tp,
                    offsets=(lo, hi),
                    details=dict(reader=name, owner=owner.consumer, reads=len(rs), owner_interval=owner),
                )
            )
    return out


def _joins(tl: Timeline) -> dict[tuple[str, int], list[float]]:
    """(consumer, generation) -> the times of its ``joined`` lines of that generation."""
    out: dict[tuple[str, int], list[float]] = defaultdict(list)
    for e in tl.events:
        generation = e.get("generation")
        if e["event"] == "joined" and isinstance(generation, int) and generation >= 0:
            out[(e["consumer"], generation)].append(float(e["t"]))
    return out


def _rejoined(joins: dict[tuple[str, int], list[float]], first: Read, second: Read, generation: int) -> bool:
    """Whether ``second``'s consumer joined ``generation`` after ``first`` was handed out: a second round of
    the group under the same number (a correct broker numbers every round anew)."""
    return any(first.t < t <= second.t for t in joins.get((second.consumer, generation), ()))


def stale_polls(lines: Lines) -> list[Read]:
    """The reads E's first point allowed: each the one poll under way when its consumer froze, handed out
    after another was given the partition, never committed (the issue-25 bound: at most one poll's
    records, ``max_poll_records``, read by a member after its session ended)."""
    tl = as_timeline(lines)
    allowed: set[int] = set()
    for _, scope in tl.scopes():
        _overlaps(scope, allowed)
    return [r for r in tl.reads if r.i in allowed]


def reused_generation_pairs(lines: Lines) -> int:
    """How many pairs of reads E's third point passed over as a broker's reused generation number."""
    tl = as_timeline(lines)
    return sum(_same_generation(scope, group, set())[1] for group, scope in tl.scopes() if group is not None)


def _same_generation(tl: Timeline, group: GroupKey, allowed: set[int]) -> tuple[list[Violation], int]:
    life = {c.name: (c.first_i, c.last_i) for c in tl.consumers.values()}
    joins = _joins(tl)
    reused = 0

    def coexist(a: str, b: str) -> bool:
        return life[a][0] <= life[b][1] and life[b][0] <= life[a][1]

    by: dict[tuple[TP, int], list[Read]] = defaultdict(list)
    for r in tl.reads:
        if r.generation >= 0 and r.i not in allowed:
            by[(r.tp, r.generation)].append(r)
    out = []
    for (tp, generation), reads in sorted(by.items()):
        reads.sort(key=lambda r: (r.first, r.i))
        active: list[Read] = []
        pairs: dict[tuple[str, str], list[tuple[int, int, Read, Read]]] = defaultdict(list)
        for r in reads:
            active = [a for a in active if a.last >= r.first]
            for a in active:
                if a.consumer != r.consumer and coexist(a.consumer, r.consumer):
                    first, second = (a, r) if a.i < r.i else (r, a)
                    if _rejoined(joins, first, second, generation):
                        reused += 1
                        continue
                    pairs[(first.consumer, second.consumer)].append((r.first, min(r.last, a.last), first, second))
            active.append(r)
        for (c1, c2), found in sorted(pairs.items()):
            lo, hi = min(f[0] for f in found), max(f[1] for f in found)
            _, _, r1, r2 = min(found, key=lambda f: f[3].i)
            out.append(
                Violation(
                    "E",
                    f"{fmt_tp(tp)}: offsets {fmt_range(lo, hi)} handed out by both {c1} (e.g. "
                    f"{fmt_range(r1.first, r1.last)} at {fmt_t(r1.t)}) and {c2} (e.g. {fmt_range(r2.first, r2.last)} "
                    f"at {fmt_t(r2.t)}) in generation {generation} of {fmt_group(group)} "
                    f"({len(found)} overlapping pairs of reads)",
                    t=r2.t,
                    consumers=(c1, c2),
                    tp=tp,
                    offsets=(lo, hi),
                    details=dict(generation=generation, pairs=len(found), reads=(r1, r2)),
                )
            )
    return out, reused
