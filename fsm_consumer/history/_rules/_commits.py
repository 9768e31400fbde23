"""Rule C: commits never go backwards, and never ahead of what their consumer had reached."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._model import TP, Commit, Position, Timeline, as_timeline, fmt_t, fmt_tp
from .._violation import Violation
from ._shared import CommitIndex, Lines, dedupe, names


def _moves_back(p: Position, offset: int) -> bool:
    """Whether a seek/reset puts the position at ``offset`` or below (so that a commit of ``offset`` after a
    larger one is what the user asked for, or what the reset policy did). A reset from the committed offset
    moves nothing back by itself: going below a larger acknowledged commit is what C forbids."""
    if p.kind == "seek":
        return p.to == "earliest" or (p.offset is not None and p.offset <= offset)
    return p.why != "committed" and p.offset is not None and p.offset <= offset


class _RangeMax:
    """Index of the largest key in ``keys[lo:hi]`` (a sparse table)."""

    def __init__(self, keys: Sequence[int]) -> None:
        self.keys = keys
        self.table: list[list[int]] = [list(range(len(keys)))]
        span = 1
        while 2 * span <= len(keys):
            prev = self.table[-1]
            self.table.append(
                [a if keys[a] >= keys[b] else b for a, b in zip(prev, prev[span:], strict=False)][
                    : len(keys) - 2 * span + 1
                ]
            )
            span *= 2

    def argmax(self, lo: int, hi: int) -> int:
        level = (hi - lo).bit_length() - 1
        a, b = self.table[level][lo], self.table[level][hi - (1 << level)]
        return a if self.keys[a] >= self.keys[b] else b


def rule_c(
    lines: Lines,
    broker_commits: Iterable[Sequence[Any]] | None = None,
    broker_committed: Mapping[TP, int] | None = None,
) -> list[Violation]:
    """C, from the histories (by default):

    * backwards: an acknowledged commit sent after an acknowledged commit of a larger offset of its
      partition (by any consumer of the group) was answered, with no ``seek``/``reset`` of that partition by
      the committing consumer between the larger commit's sending and its own that moved the position to
      its offset or below (a seek to ``"earliest"`` or to at most it; a reset, not from the committed
      offset, to at most it);
    * ahead: every commit (answered or failed) is at most what its consumer had reached when it was sent:
      the ``to`` of its reads and skips of the partition, the offsets of its seeks and resets of it.

    Given ``broker_commits`` (``(topic, partition, offset)`` in the order they took effect), "backwards" is
    judged from that log instead: an entry below the one before it for its partition is a violation unless
    the histories hold a seek/reset of that partition that moved a position back to the new offset or below
    (see ``broker_backwards``; the log has no times: whether it came between is not checked).

    A false success, judged from the broker's word: an acknowledged commit whose offset is not in the
    broker's commit log for its partition (given ``broker_commits``), or one above what the broker holds in
    the end (given ``broker_committed``, ``(topic, partition) -> offset`` read back after the run, for a
    broker without a readable log) with no seek/reset back to that or below in the histories."""
    tl = as_timeline(lines)
    out: list[Violation] = []
    if broker_commits is None:
        for _, scope in tl.scopes():
            out.extend(_backwards(scope))
    else:
        log = [tuple(e) for e in broker_commits]
        out.extend(broker_backwards(tl, log)[0])
        out.extend(_not_in_log(tl, log))
    if broker_committed is not None:
        out.extend(_above_final(tl, broker_committed))
    out.extend(_ahead(tl))
    return dedupe(out)


def _false_success(c: Commit, why: str) -> Violation:
    return Violation(
        "C",
        f"{fmt_tp(c.tp)}: commit of {c.offset} by {c.consumer} (generation {c.generation}) sent at {fmt_t(c.sent)} "
        f"was acknowledged at {fmt_t(c.t)}, but {why}: a false success",
        t=c.t,
        consumers=(c.consumer,),
        tp=c.tp,
        offsets=(c.offset, c.offset),
        details=dict(commit=c),
    )


def _not_in_log(tl: Timeline, log: list[tuple[Any, ...]]) -> list[Violation]:
    applied: dict[TP, set[int]] = defaultdict(set)
    for topic, partition, offset in log:
        applied[(str(topic), int(partition))].add(int(offset))
    return [
        _false_success(c, "the broker's commit log has no commit of that offset for the partition")
        for c in tl.commits
        if c.acked and c.offset not in applied.get(c.tp, ())
    ]


def _above_final(tl: Timeline, final: Mapping[TP, int]) -> list[Violation]:
    held = {(str(t), int(p)): int(o) for (t, p), o in final.items()}
    out = []
    for c in tl.commits:
        end = held.get(c.tp)
        if not c.acked or (end is not None and end >= c.offset):
            continue
        # a seek/reset back to what the broker holds, after this commit, may have led to a smaller one since
        if end is not None and any(p.tp == c.tp and p.t > c.t and _moves_back(p, end) for p in tl.positions):
            continue
        why = "the broker holds no committed offset" if end is None else f"the broker holds {end} in the end"
        out.append(_false_success(c, f"{why} for the partition (and no history seeks back after it)"))
    return out


def _backwards(tl: Timeline) -> list[Violation]:
    excuses: dict[tuple[str, TP], list[Position]] = defaultdict(list)  # by time
    for p in sorted(tl.positions, key=lambda p: p.i):
        if p.kind == "seek" or p.why != "committed":
            excuses[(p.consumer, p.tp)].append(p)
    excuse_times = {key: [p.t for p in ps] for key, ps in excuses.items()}
    acked: dict[TP, list[Commit]] = defaultdict(list)
    for c in tl.commits:
        if c.acked:
            acked[c.tp].append(c)
    out = []
    for tp, commits in sorted(acked.items()):
        commits.sort(key=lambda c: (c.t, c.i))
        times = [c.t for c in commits]
        best = _RangeMax([c.offset for c in commits])
        for y in commits:
            n = bisect.bisect_left(times, y.sent)  # commits[:n] were answered before y was sent
            if n == 0:
                continue
            mine = excuses.get((y.consumer, tp), [])
            k = bisect.bisect_left(excuse_times.get((y.consumer, tp), []), y.sent)
            # the last seek/reset before this commit that moved the position to its offset or below: larger
            # commits sent before it are excused
            since = next((p.t for p in reversed(mine[:k]) if _moves_back(p, y.offset)), None)
            lo = 0 if since is None else bisect.bisect_left(times, since)
            if lo >= n:
                continue
            x: Commit | None = commits[best.argmax(lo, n)]
            if x is not None and x.offset <= y.offset:
                continue
            if since is not None and x is not None and x.sent < since:
                x = max(
                    (c for c in commits[lo:n] if c.sent >= since and c.offset > y.offset),
                    key=lambda c: c.offset,
                    default=None,
                )
            if x is None:
                continue
            out.append(
                Violation(
                    "C",
                    f"{fmt_tp(tp)}: commit of {y.offset} by {y.consumer} (generation {y.generation}) sent at "
                    f"{fmt_t(y.sent)} after the commit of {x.offset} by {x.consumer} (generation {x.generation}) was "
                    f"acknowledged at {fmt_t(x.t)}, and {y.consumer} made no seek or reset of {fmt_tp(tp)} to "
                    f"{y.offset} or below since that one was sent ({fmt_t(x.sent)})",
                    t=y.sent,
                    consumers=names(y.consumer, x.consumer),
                    tp=tp,
                    offsets=(y.offset, x.offset),
                    details=dict(commit=y, earlier=x),
                )
            )
    return out


def broker_backwards(lines: Lines, log: Iterable[Sequence[Any]]) -> tuple[list[Violation], int]:
    """C's "backwards" over the broker's commit log: the violations, and how many backwards steps a seek or
    reset in the histories allowed: one to the new offset or below (a seek to ``"earliest"``; a reset not from
    the committed offset) made when a commit of a larger offset had been acknowledged (by the histories)."""
    tl = as_timeline(lines)
    acked: dict[TP, list[Commit]] = defaultdict(list)
    for c in tl.commits:
        if c.acked:
            acked[c.tp].append(c)
    index = {tp: CommitIndex(cs) for tp, cs in acked.items()}
    movers: dict[TP, list[Position]] = defaultdict(list)
    for p in tl.positions:
        # only a seek/reset below an offset already committed then moved a position back (not, say, the
        # reset to "earliest" of a partition that had no committed offset yet)
        idx = index.get(p.tp)
        best = idx.before(p.t) if idx is not None else None
        if best is not None and (p.offset is None or p.offset < best.offset):
            movers[p.tp].append(p)
    last: dict[TP, int] = {}
    out = []
    allowed = 0
    for entry, (topic, partition, offset) in enumerate(log):
        tp = (str(topic), int(partition))
        before = last.get(tp)
        last[tp] = offset
        if before is None or offset >= before:
            continue
        if any(_moves_back(p, offset) for p in movers.get(tp, ())):
            allowed += 1
            continue
        out.append(
            Violation(
                "C",
                f"{fmt_tp(tp)}: the broker's commit log goes from {before} down to {offset} (entry {entry}), and no "
                f"history has a seek or reset of {fmt_tp(tp)} back to {offset} or below (the log has no times: any "
                "such seek or reset would have allowed it)",
                tp=tp,
                offsets=(offset, before),
                details=dict(entry=entry, before=before, offset=offset),
            )
        )
    return out, allowed


def _ahead(tl: Timeline) -> list[Violation]:
    reached: dict[tuple[str, TP], list[tuple[float, int, str]]] = defaultdict(list)  # (t, position, what)
    for r in tl.reads:
        reached[(r.consumer, r.tp)].append((r.t, r.end, f"the end of its read at {fmt_t(r.t)}"))
    for s in tl.skips:
        reached[(s.consumer, s.tp)].append((s.t, s.end, f"the end of its skip at {fmt_t(s.t)}"))
    for p in tl.positions:
        if p.offset is not None:
            reached[(p.consumer, p.tp)].append((p.t, p.offset, f"its {p.kind} at {fmt_t(p.t)}"))
    highest: dict[tuple[str, TP], tuple[list[float], list[tuple[int, str]]]] = {}
    for key, items in reached.items():
        items.sort(key=lambda x: x[0])
        tops: list[tuple[int, str]] = []
        for _, position, what in items:
            tops.append((position, what) if not tops or position > tops[-1][0] else tops[-1])
        highest[key] = ([x[0] for x in items], tops)
    out = []
    for c in tl.commits:
        times, tops = highest.get((c.consumer, c.tp), ([], []))
        n = bisect.bisect_right(times, c.sent)
        top = tops[n - 1] if n else None
        if top is not None and c.offset <= top[0]:
            continue
        had = (
            f"what {c.consumer} had reached: {top[0]} ({top[1]})"
            if top is not None
            else f"anything {c.consumer} had reached: it had no position on it (no read, skip, seek or reset before)"
        )
        answer = "acknowledged" if c.acked else f"failed: {c.error}"
        out.append(
            Violation(
                "C",
                f"{fmt_tp(c.tp)}: commit of {c.offset} by {c.consumer} (generation {c.generation}, {answer}) sent at "
                f"{fmt_t(c.sent)} is ahead of {had}",
                t=c.sent,
                consumers=(c.consumer,),
                tp=c.tp,
                offsets=(c.offset, c.offset),
                details=dict(commit=c, reached=None if top is None else top[0]),
            )
        )
    return out
