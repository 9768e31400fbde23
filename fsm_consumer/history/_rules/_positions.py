"""Rules D (duplicates only above the group's last acknowledged commit) and M (no record skipped: positions
move forward without gaps, within an ownership and from one owner to the next)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from .._model import TP, Commit, Position, Read, Skip, Timeline, fmt_range, fmt_t, fmt_tp
from .._ownership import Kind, Model, Owned
from .._violation import Violation
from ._shared import CommitIndex, Lines, model_of, names


class GroupCommits:
    """The acknowledged commits a consumer's reads are judged against: those of its group's members (and of
    consumers without a started line), per partition."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self._acked: dict[TP, list[Commit]] = defaultdict(list)
        for c in tl.commits:
            if c.acked:
                self._acked[c.tp].append(c)
        self._cache: dict[tuple[Any, TP], CommitIndex] = {}

    def of(self, name: str, tp: TP) -> CommitIndex:
        key = (self.tl.group_of(name), tp)
        index = self._cache.get(key)
        if index is None:
            index = self._cache[key] = CommitIndex(
                c for c in self._acked.get(tp, ()) if self.tl.same_group(name, c.consumer)
            )
        return index


def rule_d(lines: Lines, model: Model | None = None) -> list[Violation]:
    """D: a read in an ownership its group gave hands out nothing below the group's last acknowledged commit
    of the partition before the ownership began (or before its poll began, if later: the member's own
    commits since), unless the reader sought back since it was assigned the partition (a ``seek`` to
    ``"earliest"`` or to at most the read's first offset): duplicates only where a user expects them."""
    m = model_of(lines, model)
    tl = m.tl
    commits = GroupCommits(tl)
    seeks: dict[tuple[str, TP], list[Position]] = defaultdict(list)
    for p in tl.positions:
        if p.kind == "seek":
            seeks[(p.consumer, p.tp)].append(p)

    def sought_back(r: Read, o: Owned) -> bool:
        return any(
            o.interval.start_i < p.i < r.i and (p.to == "earliest" or (p.offset is not None and p.offset <= r.first))
            for p in seeks.get((r.consumer, r.tp), ())
        )

    found: dict[tuple[str, TP, int], list[tuple[Read, Commit, Owned]]] = defaultdict(list)
    for r in tl.reads:
        v = m.verdict(r)
        o = v.owned
        if v.kind is not Kind.OWNED or o is None or not o.interval.exclusive:
            continue
        k = commits.of(r.consumer, r.tp).last_before(max(o.start_t, r.t_poll_start))
        if k is not None and r.first < k.offset and not sought_back(r, o):
            found[(r.consumer, r.tp, k.i)].append((r, k, o))
    out = []
    for (name, tp, _), items in found.items():
        r, c, o = items[0]
        hi = min(r.last, c.offset - 1)
        more = ""
        if len(items) > 1:
            lo_all = min(x.first for x, _, _ in items)
            hi_all = max(min(x.last, c.offset - 1) for x, _, _ in items)
            more = (
                f"; {len(items)} such reads in all, offsets {fmt_range(lo_all, hi_all)}, "
                f"the last at {fmt_t(items[-1][0].t)}"
            )
        out.append(
            Violation(
                "D",
                f"{fmt_tp(tp)}: {name} handed out offsets {fmt_range(r.first, hi)} (read {fmt_range(r.first, r.last)} "
                f"at {fmt_t(r.t)}, generation {r.generation}, in a poll begun at {fmt_t(r.t_poll_start)}), below the "
                f"commit of {c.offset} by {c.consumer} (generation {c.generation}) acknowledged at {fmt_t(c.t)}, "
                f"before its ownership (from {fmt_t(o.start_t)}) or its poll began; and {name} had "
                f"not sought back since it was assigned the partition{more}",
                t=r.t,
                consumers=names(name, c.consumer),
                tp=tp,
                offsets=(r.first, hi),
                details=dict(read=r, commit=c, reads=len(items)),
            )
        )
    return out


def rule_m(lines: Lines, model: Model | None = None) -> list[Violation]:
    """M: no record is skipped.

    * A read line holds together: ``from <= first <= last``, ``to`` above ``last`` (or equal to ``from``: handed
      out without moving the position), ``count`` the offsets ``first..last`` but the ``gaps`` it names; a skip
      moves forward.
    * Within one ownership, each ``read``/``skip`` begins (``from``) where the position was: the ``to`` of the
      previous one, or the offset of a ``seek``/``reset`` since.
    * An ownership its group gave begins where the group left the partition: at its last acknowledged commit
      (before the ownership began), or, with none, where the reset policy says (``latest`` skips by the user's
      choice); beginning above that is allowed only over offsets some member of the group had already handed
      out or passed over (a commit the broker applied whose answer its member never read). A ``seek`` first
      is the user's choice."""
    m = model_of(lines, model)
    tl = m.tl
    out = list(_held_together(tl))
    out.extend(_continuity(tl))
    out.extend(_handovers(m))
    return out


def _held_together(tl: Timeline) -> Iterator[Violation]:
    for r in tl.reads:
        broken = r.fault()
        if broken:
            yield Violation(
                "M",
                f"{fmt_tp(r.tp)}: {r.consumer}'s read {fmt_range(r.first, r.last)} (from {r.start} to {r.end}) at "
                f"{fmt_t(r.t)} does not hold together: {broken}",
                t=r.t,
                consumers=(r.consumer,),
                tp=r.tp,
                offsets=(r.first, r.last),
                details=dict(line=r.line),
            )
    for s in tl.skips:
        if s.end <= s.start:
            yield Violation(
                "M",
                f"{fmt_tp(s.tp)}: {s.consumer}'s skip from {s.start} to {s.end} at {fmt_t(s.t)} does not hold "
                "together: it does not move forward",
                t=s.t,
                consumers=(s.consumer,),
                tp=s.tp,
                offsets=(s.start, s.end),
                details=dict(line=s.line),
            )


def _continuity(tl: Timeline) -> Iterator[Violation]:
    steps: dict[tuple[str, TP], list[tuple[int, str, Any]]] = defaultdict(list)
    for v in tl.intervals:
        steps[(v.consumer, v.tp)].append((v.start_i, "assigned", v))
    for p in tl.positions:
        steps[(p.consumer, p.tp)].append((p.i, p.kind, p))
    for r in tl.reads:
        steps[(r.consumer, r.tp)].append((r.i, "read", r))
    for s in tl.skips:
        steps[(s.consumer, s.tp)].append((s.i, "skip", s))
    for (name, tp), items in sorted(steps.items()):
        items.sort(key=lambda x: x[0])
        position: int | None = None
        because = ""
        for _, kind, obj in items:
            if kind == "assigned":
                position, because = None, ""
                continue
            if kind in ("seek", "reset"):
                position = obj.offset
                because = f"its {kind} to {obj.to} at {fmt_t(obj.t)}"
                continue
            start, end = obj.start, obj.end
            what = (
                f"read {fmt_range(obj.first, obj.last)} (from {start} to {end})"
                if kind == "read"
                else f"skip from {start} to {end}"
            )
            if position is not None and start != position:
                gap = (
                    f"offsets {fmt_range(position, start - 1)} passed over"
                    if start > position
                    else f"back by {position - start}"
                )
                yield Violation(
                    "M",
                    f"{fmt_tp(tp)}: {name}'s {what} at {fmt_t(obj.t)} begins at {start}, but its position was "
                    f"{position} ({because}): {gap}",
                    t=obj.t,
                    consumers=(name,),
                    tp=tp,
                    offsets=(min(position, start), max(position, start)),
                    details=dict(position=position, start=start, line=obj.line),
                )
            position, because = end, f"the end of its {kind} at {fmt_t(obj.t)}"


def _handovers(m: Model) -> Iterator[Violation]:
    tl = m.tl
    commits = GroupCommits(tl)
    first_steps: dict[tuple[str, TP], list[tuple[int, Any]]] = defaultdict(list)
    for p in tl.positions:
        first_steps[(p.consumer, p.tp)].append((p.i, p))
    for r in tl.reads:
        first_steps[(r.consumer, r.tp)].append((r.i, r))
    for s in tl.skips:
        first_steps[(s.consumer, s.tp)].append((s.i, s))
    for steps in first_steps.values():
        steps.sort(key=lambda x: x[0])
    covered: dict[TP, list[tuple[int, str, int, int]]] = defaultdict(list)  # (i, consumer, first, last)
    for r in tl.reads:
        if not r.fault():  # its offsets, and those passed over before the first (compacted, say)
            covered[r.tp].append((r.i, r.consumer, r.start, r.last))
    for s in tl.skips:
        covered[s.tp].append((s.i, s.consumer, s.start, s.end - 1))
    for items in covered.values():
        items.sort()
    for key, owned in m.of.items():
        name, tp = key
        for o in owned:
            v = o.interval
            if not v.exclusive or o.void_by is not None:
                continue
            step = next((x for i, x in first_steps.get(key, ()) if v.start_i <= i < v.end_i), None)
            if step is None or (isinstance(step, Position) and step.kind == "seek"):
                continue  # nothing read, or where the user asked
            begin = step.offset if isinstance(step, Position) else step.start
            if begin is None:
                continue
            before = [(lo, hi) for i, c, lo, hi in covered.get(tp, ()) if i < v.start_i and tl.same_group(name, c)]
            k = commits.of(name, tp).last_before(v.start_t)
            if k is not None:
                lo = k.offset
                where = f"the group's last acknowledged commit {k.offset} (by {k.consumer} at {fmt_t(k.t)})"
            else:
                policy = step.why if isinstance(step, Position) and step.why not in (None, "committed") else None
                policy = policy or str(tl.consumers[name].config.get("auto_offset_reset", "earliest"))
                if policy == "latest" or not before:
                    continue  # the user's choice, or the first ownership these histories show
                lo = min(x for x, _ in before)
                where = (
                    f"the lowest offset the group had handed out ({lo}; no acknowledged commit, reset policy {policy})"
                )
            missing = _missing(before, lo, begin)
            if not missing:
                continue
            shown = ", ".join(fmt_range(a, b) for a, b in missing[:5]) + (" ..." if len(missing) > 5 else "")
            how = f"its {step.kind} to {step.to}" if isinstance(step, Position) else f"its {_kind(step)} from {begin}"
            yield Violation(
                "M",
                f"{fmt_tp(tp)}: {name} began its ownership (generation {v.generation}, assigned at "
                f"{fmt_t(v.start_t)}) at {begin} ({how} at {fmt_t(step.t)}), above {where}: offsets {shown} were "
                "handed out by no member of its group before: skipped between owners",
                t=step.t,
                consumers=names(name, *(() if k is None else (k.consumer,))),
                tp=tp,
                offsets=(missing[0][0], missing[-1][1]),
                details=dict(begin=begin, commit=k, missing=missing, owned=o),
            )


def _kind(step: Read | Skip) -> str:
    return "read" if isinstance(step, Read) else "skip"


def _missing(ranges: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The offsets of ``lo .. hi - 1`` no range covers, as ``[first, last]`` runs."""
    out = []
    nxt = lo
    for first, last in sorted(ranges):
        if nxt >= hi:
            break
        if last < nxt:
            continue
        if first > nxt:
            out.append((nxt, min(first, hi) - 1))
        nxt = max(nxt, last + 1)
    if nxt < hi:
        out.append((nxt, hi - 1))
    return out
