"""Rule C: a commit takes effect only from the partition's owner, never ahead of what that owner handed out in
its ownership, never backwards, and never as a false success."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .._model import TP, Commit, NoStart, Position, Timeline, as_timeline, fmt_t, fmt_tp
from .._ownership import Model
from .._violation import Violation
from ._shared import Lines, dedupe, model_of, names


def _moves_back(p: Position, offset: int) -> bool:
    """Whether a seek/reset puts the position at ``offset`` or below (so that a commit of ``offset`` after a
    larger one is what the user asked for, or what the reset policy did). A reset from the committed offset
    moves nothing back by itself: going below a larger acknowledged commit is what C forbids."""
    if p.kind == "seek":
        return p.to == "earliest" or (p.offset is not None and p.offset <= offset)
    return p.why != "committed" and p.offset is not None and p.offset <= offset


def rule_c(
    lines: Lines,
    broker_commits: Iterable[Sequence[Any]] | None = None,
    broker_committed: Mapping[TP, int] | None = None,
    model: Model | None = None,
) -> list[Violation]:
    """C, from the histories, always:

    * by the owner: every acknowledged commit of a partition was sent while its member owned the partition
      as its group meant it (``_ownership``): a zombie's commit, or one sent after its member gave the
      partition up, is a violation whoever else owns it then;
    * not ahead: every commit (answered or failed) sent within an ownership is at most what its member had
      reached in that ownership when it was sent: the ``to`` of its reads and skips of the partition, the
      offsets of its seeks and resets of it, since the ownership began;
    * not backwards: an acknowledged commit sent after an acknowledged commit of a larger offset of its
      partition (by any member of the group) was answered, with no ``seek``/``reset`` of that partition by
      the committing member between the larger commit's sending and its own that moved the position to its
      offset or below (a seek to ``"earliest"`` or to at most it; a reset, not from the committed offset, to
      at most it), and none that its application asked for (``explicit`` offsets, asked after the larger one
      by the same member); a larger commit the application of its own member brought down afterwards (an
      explicit commit of at most ``y``'s offset sent after it was answered, answered before ``y`` was sent)
      no longer counts: the group's offset was that wish.

    With the broker's word, besides: its commit log (``broker_commits``: ``(topic, partition, offset)`` in
    the order they took effect) never goes down but where the histories show the seek or reset that allowed
    it, made after the larger commit was sent and before the smaller one (``broker_backwards``); every
    acknowledged commit is in that log; none is above what the broker holds in the end (``broker_committed``,
    read back after the run) unless its member sought or reset back after it."""
    m = model_of(lines, model)
    tl = m.tl
    out: list[Violation] = []
    out.extend(_not_owner(m))
    out.extend(_ahead(m))
    for scope in _scopes(tl):
        out.extend(_backwards(tl, scope))
    if broker_commits is not None:
        log = [tuple(e) for e in broker_commits]
        out.extend(broker_backwards(tl, log)[0])
        out.extend(_not_in_log(tl, log))
    if broker_committed is not None:
        out.extend(_above_final(tl, broker_committed))
    return dedupe(out)


def _scopes(tl: Timeline) -> list[set[str]]:
    """The sets of consumers whose commits are compared: each group's (with the consumers without a started
    line, which could be in any)."""
    groups = tl.groups()
    unknown = groups.pop(NoStart.UNKNOWN, set())
    named = [names for g, names in sorted(groups.items(), key=lambda kv: str(kv[0])) if g is not None]
    return [n | unknown for n in named] or ([unknown] if unknown else [])


def _not_owner(m: Model) -> Iterator[Violation]:
    tl = m.tl
    seen: set[tuple[int, TP]] = set()
    for c in tl.commits:
        if not c.acked or (c.i, c.tp) in seen or m.owner_at(c.consumer, c.tp, c.sent) is not None:
            continue
        seen.add((c.i, c.tp))
        mine = [o for o in m.of.get((c.consumer, c.tp), ()) if o.start_t <= c.sent]
        had = mine[-1].ended() if mine else "it had never owned it"
        others = [
            o
            for (name, tp), os_ in m.of.items()
            if tp == c.tp and name != c.consumer
            for o in os_
            if o.holds_t(c.sent) and tl.same_group(name, c.consumer)
        ]
        owner = f"; {others[0].consumer} owned it then (from {fmt_t(others[0].start_t)})" if others else ""
        yield Violation(
            "C",
            f"{fmt_tp(c.tp)}: commit of {c.offset} by {c.consumer} (generation {c.generation}) sent at {fmt_t(c.sent)} "
            f"and acknowledged at {fmt_t(c.t)} while it did not own the partition: {had}{owner}",
            t=c.sent,
            consumers=names(c.consumer, *(o.consumer for o in others[:1])),
            tp=c.tp,
            offsets=(c.offset, c.offset),
            details=dict(commit=c),
        )


def _ahead(m: Model) -> Iterator[Violation]:
    tl = m.tl
    reached: dict[tuple[str, TP], list[tuple[int, float, int, str]]] = defaultdict(list)  # (i, t, position, what)
    for r in tl.reads:
        reached[(r.consumer, r.tp)].append((r.i, r.t, r.end, f"the end of its read at {fmt_t(r.t)}"))
    for s in tl.skips:
        reached[(s.consumer, s.tp)].append((s.i, s.t, s.end, f"the end of its skip at {fmt_t(s.t)}"))
    for p in tl.positions:
        if p.offset is not None:
            reached[(p.consumer, p.tp)].append((p.i, p.t, p.offset, f"its {p.kind} at {fmt_t(p.t)}"))
    index: dict[tuple[str, TP], tuple[list[int], list[float], _RangeMax]] = {}
    for key, items in reached.items():
        items.sort()  # by line, so by time too
        index[key] = ([x[0] for x in items], [x[1] for x in items], _RangeMax([x[2] for x in items]))
    for c in tl.commits:
        own = next(
            (o for o in m.of.get((c.consumer, c.tp), ()) if o.start_t <= c.sent < o.interval.end_t),
            None,
        )
        if own is None:
            continue  # outside its ownership: rule C's first point, for one that took effect
        v = own.interval
        top: tuple[int, str] | None = None
        if (c.consumer, c.tp) in index:
            lines, times, best = index[(c.consumer, c.tp)]
            lo, hi = bisect.bisect_left(lines, v.start_i), bisect.bisect_right(times, c.sent)
            if lo < hi:
                item = reached[(c.consumer, c.tp)][best.argmax(lo, hi)]
                top = (item[2], item[3])
        if top is not None and c.offset <= top[0]:
            continue
        had = (
            f"what {c.consumer} had reached in its ownership (from {fmt_t(v.start_t)}): {top[0]} ({top[1]})"
            if top is not None
            else f"anything {c.consumer} had reached in its ownership (from {fmt_t(v.start_t)}): no read, skip, seek "
            "or reset before it"
        )
        answer = "acknowledged" if c.acked else f"failed: {c.error}"
        yield Violation(
            "C",
            f"{fmt_tp(c.tp)}: commit of {c.offset} by {c.consumer} (generation {c.generation}, {answer}) sent at "
            f"{fmt_t(c.sent)} is ahead of {had}",
            t=c.sent,
            consumers=(c.consumer,),
            tp=c.tp,
            offsets=(c.offset, c.offset),
            details=dict(commit=c, reached=None if top is None else top[0]),
        )


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


def _excuses(tl: Timeline, scope: set[str]) -> dict[tuple[str, TP], list[Position]]:
    """The seeks and resets that may move a position back (not resets from the committed offset), by time."""
    out: dict[tuple[str, TP], list[Position]] = defaultdict(list)
    for p in sorted(tl.positions, key=lambda p: p.i):
        if p.consumer in scope and (p.kind == "seek" or p.why != "committed"):
            out[(p.consumer, p.tp)].append(p)
    return out


def _wished(y: Commit, x: Commit) -> bool:
    """Whether ``y``, lower than ``x``, is what its consumer's application asked for after ``x``: offsets it
    gave itself (``explicit``), asked for after its own ``x`` was (a commit in on_partitions_revoked that
    goes back, say). A commit of positions, or one asked for before ``x`` and landing after it, is never."""
    return y.explicit and y.consumer == x.consumer and y.asked is not None and x.asked is not None and y.asked > x.asked


def _judged(c: Commit, y: Commit, since: float | None, wishes: Sequence[Commit]) -> bool:
    """Whether ``c`` is a larger commit ``y`` is judged against: sent since the seek that allowed ``y`` (if
    any), not one ``y`` itself is the application's wish to go below, and not brought down by such a wish of
    ``c``'s own consumer to ``y``'s offset or below, sent after ``c`` was answered (so applied after it) and
    answered before ``y`` was sent: the group's offset was then that wish, and ``y`` does not move it back."""
    return (
        c.offset > y.offset
        and (since is None or c.sent >= since)
        and not _wished(y, c)
        and not any(c.t < w.sent and w.t < y.sent and w.offset <= y.offset and _wished(w, c) for w in wishes)
    )


def _backwards(tl: Timeline, scope: set[str]) -> list[Violation]:
    excuses = _excuses(tl, scope)
    excuse_times = {key: [p.t for p in ps] for key, ps in excuses.items()}
    acked: dict[TP, list[Commit]] = defaultdict(list)
    for c in tl.commits:
        if c.acked and c.consumer in scope:
            acked[c.tp].append(c)
    out = []
    for tp, commits in sorted(acked.items()):
        commits.sort(key=lambda c: (c.t, c.i))
        times = [c.t for c in commits]
        best = _RangeMax([c.offset for c in commits])
        wishes = [c for c in commits if c.explicit]  # the application's own offsets: few
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
            if x is not None and not _judged(x, y, since, wishes):
                x = max(
                    (c for c in commits[lo:n] if _judged(c, y, since, wishes)), key=lambda c: c.offset, default=None
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


def broker_backwards(lines: Lines, log: Iterable[Sequence[Any]]) -> tuple[list[Violation], int]:
    """C's "backwards" over the broker's commit log, a witness beside the histories: every step down of a
    partition's log (from ``b`` to ``o``) must be explained by the histories, by an acknowledged commit of
    ``o`` whose member sought or reset that partition back to ``o`` or below (a seek to ``"earliest"``; a
    reset not from the committed offset) after a commit of ``b`` was sent (any, when no history holds one) and
    before its own commit of ``o`` was sent, or whose application gave ``o`` itself after that member's own
    commit of ``b`` was answered. The violations, and how many steps down were so explained."""
    tl = as_timeline(lines)
    acked: dict[tuple[TP, int], list[Commit]] = defaultdict(list)
    for c in tl.commits:
        if c.acked:
            acked[(c.tp, c.offset)].append(c)
    movers: dict[tuple[str, TP], list[Position]] = defaultdict(list)
    for p in tl.positions:
        if p.kind == "seek" or p.why != "committed":
            movers[(p.consumer, p.tp)].append(p)
    last: dict[TP, int] = {}
    out = []
    allowed = 0
    for entry, (topic, partition, offset) in enumerate(log):
        tp = (str(topic), int(partition))
        before = last.get(tp)
        last[tp] = offset
        if before is None or offset >= before:
            continue
        larger_sent = [c.sent for c in acked.get((tp, before), ())]
        since = min(larger_sent) if larger_sent else float("-inf")
        explained = any(
            since <= p.t < y.sent and _moves_back(p, offset)
            for y in acked.get((tp, offset), ())
            for p in movers.get((y.consumer, tp), ())
        ) or any(  # the application's own lower offsets, asked for after its member's commit of b was answered
            x.t < y.sent and _wished(y, x) for y in acked.get((tp, offset), ()) for x in acked.get((tp, before), ())
        )
        if explained:
            allowed += 1
            continue
        why = (
            f"no history holds an acknowledged commit of {offset} of it"
            if not acked.get((tp, offset))
            else f"no member that committed {offset} had sought or reset {fmt_tp(tp)} back to {offset} or below "
            f"after a commit of {before} was sent and before its own"
        )
        out.append(
            Violation(
                "C",
                f"{fmt_tp(tp)}: the broker's commit log goes from {before} down to {offset} (entry {entry}), and {why}",
                tp=tp,
                offsets=(offset, before),
                details=dict(entry=entry, before=before, offset=offset),
            )
        )
    return out, allowed
