"""Rules D (duplicates only where a user expects them) and M (positions move forward without gaps)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

from .._model import TP, Commit, Position, Read, Timeline, as_timeline, fmt_range, fmt_t, fmt_tp
from .._violation import Violation
from ._shared import CommitIndex, Lines, dedupe, names


def _starts(tl: Timeline) -> dict[tuple[str, TP], list[int]]:
    out: dict[tuple[str, TP], list[int]] = defaultdict(list)
    for v in tl.intervals:
        out[(v.consumer, v.tp)].append(v.start_i)
    for starts in out.values():
        starts.sort()
    return out


def rule_d(lines: Lines) -> list[Violation]:
    """D: no read in a poll begun after a commit of ``c`` (by any consumer of the group) was acknowledged
    hands out an offset below ``c``, unless the reader itself sought back since it was last assigned the
    partition (a ``seek`` to ``"earliest"`` or to at most the read's first offset)."""
    tl = as_timeline(lines)
    out: list[Violation] = []
    for _, scope in tl.scopes():
        out.extend(_below_commits(scope))
    return dedupe(out)


def _below_commits(tl: Timeline) -> list[Violation]:
    acked: dict[TP, list[Commit]] = defaultdict(list)
    for c in tl.commits:
        if c.acked:
            acked[c.tp].append(c)
    index = {tp: CommitIndex(cs) for tp, cs in acked.items()}
    starts = _starts(tl)
    seeks: dict[tuple[str, TP], list[Position]] = defaultdict(list)
    for p in tl.positions:
        if p.kind == "seek":
            seeks[(p.consumer, p.tp)].append(p)

    def sought_back(r: Read) -> bool:
        assigned = starts.get((r.consumer, r.tp), [])
        n = bisect.bisect_left(assigned, r.i)
        since = assigned[n - 1] if n else -1
        return any(
            since < p.i < r.i and (p.to == "earliest" or (p.offset is not None and p.offset <= r.first))
            for p in seeks.get((r.consumer, r.tp), ())
        )

    found: dict[tuple[str, TP, int], list[tuple[Read, Commit]]] = defaultdict(list)
    for r in tl.reads:
        idx = index.get(r.tp)
        best = idx.before(r.t_poll_start) if idx is not None else None
        if best is not None and r.first < best.offset and not sought_back(r):
            found[(r.consumer, r.tp, best.i)].append((r, best))
    out = []
    for (name, tp, _), items in found.items():
        r, c = items[0]
        hi = min(r.last, c.offset - 1)
        more = ""
        if len(items) > 1:
            lo_all = min(x.first for x, _ in items)
            hi_all = max(min(x.last, c.offset - 1) for x, _ in items)
            more = (
                f"; {len(items)} such reads in all, offsets {fmt_range(lo_all, hi_all)}, "
                f"the last at {fmt_t(items[-1][0].t)}"
            )
        out.append(
            Violation(
                "D",
                f"{fmt_tp(tp)}: {name} handed out offsets {fmt_range(r.first, hi)} (read {fmt_range(r.first, r.last)} "
                f"at {fmt_t(r.t)}, generation {r.generation}) in a poll begun at {fmt_t(r.t_poll_start)}, below the "
                f"commit of {c.offset} by {c.consumer} (generation {c.generation}) acknowledged at {fmt_t(c.t)}; "
                f"and {name} had not sought back to it since it was assigned the partition{more}",
                t=r.t,
                consumers=names(name, c.consumer),
                tp=tp,
                offsets=(r.first, hi),
                details=dict(read=r, commit=c, reads=len(items)),
            )
        )
    return out


def rule_m(lines: Lines) -> list[Violation]:
    """M: per consumer and partition, each ``read``/``skip`` begins (``from``) where the position was: the
    ``to`` of the previous read/skip, or the offset of a ``seek``/``reset`` since; after an ``assigned``, or a
    seek to ``"earliest"``/``"latest"``, the next one may begin anywhere (until a reset names the offset). A
    read line must also hold together (``from <= first <= last < to``, ``1 <= count <= last - first + 1``)
    and a skip move forward (``from < to``)."""
    tl = as_timeline(lines)
    steps: dict[tuple[str, TP], list[tuple[int, str, Any]]] = defaultdict(list)
    for v in tl.intervals:
        steps[(v.consumer, v.tp)].append((v.start_i, "assigned", v))
    for p in tl.positions:
        steps[(p.consumer, p.tp)].append((p.i, p.kind, p))
    for r in tl.reads:
        steps[(r.consumer, r.tp)].append((r.i, "read", r))
    for s in tl.skips:
        steps[(s.consumer, s.tp)].append((s.i, "skip", s))
    out = []
    for (name, tp), items in sorted(steps.items()):
        items.sort(key=lambda x: x[0])
        position: int | None = None
        because = ""
        for _, kind, obj in items:
            if kind == "assigned":
                position, because = None, ""
            elif kind in ("seek", "reset"):
                position = obj.offset
                because = f"its {kind} to {obj.to} at {fmt_t(obj.t)}"
            else:
                start, end = obj.start, obj.end
                what = (
                    f"read {fmt_range(obj.first, obj.last)} (from {start} to {end})"
                    if kind == "read"
                    else f"skip from {start} to {end}"
                )
                broken = _inconsistent(obj) if kind == "read" else ("it does not move forward" if end <= start else "")
                if broken:
                    out.append(
                        Violation(
                            "M",
                            f"{fmt_tp(tp)}: {name}'s {what} at {fmt_t(obj.t)} does not hold together: {broken}",
                            t=obj.t,
                            consumers=(name,),
                            tp=tp,
                            offsets=(start, end),
                            details=dict(line=obj.line),
                        )
                    )
                if position is not None and start != position:
                    gap = (
                        f"offsets {fmt_range(position, start - 1)} passed over"
                        if start > position
                        else f"back by {position - start}"
                    )
                    out.append(
                        Violation(
                            "M",
                            f"{fmt_tp(tp)}: {name}'s {what} at {fmt_t(obj.t)} begins at {start}, but its position was "
                            f"{position} ({because}): {gap}",
                            t=obj.t,
                            consumers=(name,),
                            tp=tp,
                            offsets=(min(position, start), max(position, start)),
                            details=dict(position=position, start=start, line=obj.line),
                        )
                    )
                position, because = end, f"the end of its {kind} at {fmt_t(obj.t)}"
    return out


def _inconsistent(r: Read) -> str:
    if not r.start <= r.first:
        return f"from {r.start} is above the first offset {r.first}"
    if not r.last < r.end:
        return f"to {r.end} is not above the last offset {r.last}"
    if not 1 <= r.count <= r.last - r.first + 1:
        return f"count {r.count} does not fit offsets {fmt_range(r.first, r.last)}"
    return ""
