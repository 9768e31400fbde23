"""How many offsets the rules let a group hand out again (the bound a scenario's re-reads are shown against).

A re-read is allowed where ownership changes hands: the new owner begins at the committed offset, so it
may hand out again what was handed out beyond the last acknowledged commit (rule D forbids anything
below it; rule M forbids going back within one ownership; rule E forbids reading beside another owner).
For every ownership interval (a consumer's ``assigned`` to its end) that is ``R - C``: ``R`` one past
the highest offset of the partition handed out before the interval began, ``C`` the largest commit of
it acknowledged by then (0 without one). Add the records of the one poll rule E lets a stale owner
return while a newer one holds the partition (a member frozen mid-poll). A run whose re-reads exceed
the sum has handed out again something no rule allows, and the rules will have said where.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable

from ..history import History
from ..history._model import TP, Commit, Interval, Read, Timeline, as_timeline
from ..history._rules._shared import CommitIndex

__all__ = ["reread_bound"]


def reread_bound(history: History | Timeline | Iterable[object]) -> int:
    """The offsets the consumers of ``history`` (``load()``'s, or the lines) may hand out again."""
    tl = as_timeline(history.events if isinstance(history, History) else history)
    return sum(_scope_bound(scope) for _, scope in tl.scopes())


def _scope_bound(tl: Timeline) -> int:
    reads: dict[TP, list[Read]] = defaultdict(list)
    for r in tl.reads:
        reads[r.tp].append(r)
    intervals: dict[TP, list[Interval]] = defaultdict(list)
    for iv in tl.intervals:
        intervals[iv.tp].append(iv)
    acked: dict[TP, list[Commit]] = defaultdict(list)
    for c in tl.commits:
        if c.acked:
            acked[c.tp].append(c)
    total = 0
    for tp, ivs in intervals.items():
        rs = sorted(reads.get(tp, []), key=lambda r: r.i)
        at = [r.i for r in rs]
        reach: list[int] = []  # reach[n]: one past the highest offset of rs[:n + 1]
        for r in rs:
            reach.append(max(reach[-1] if reach else 0, r.last + 1))
        index = CommitIndex(acked.get(tp, []))
        for iv in ivs:
            n = bisect.bisect_left(at, iv.start_i)
            handed_out = reach[n - 1] if n else 0
            best = index.before(iv.start_t)
            total += max(0, handed_out - (best.offset if best is not None else 0))
        total += _stale_poll(rs, ivs)
    return total


def _stale_poll(reads: list[Read], intervals: list[Interval]) -> int:
    """The records of the first read of each ownership made while a newer owner held the partition."""
    out = 0
    counted: set[tuple[str, int]] = set()
    for r in reads:
        holding = [iv for iv in intervals if iv.holds(r.i)]
        own = [iv.start_i for iv in holding if iv.consumer == r.consumer]
        mine = max(own) if own else -1
        if any(iv.consumer != r.consumer and iv.start_i > mine for iv in holding) and (r.consumer, mine) not in counted:
            counted.add((r.consumer, mine))
            out += r.count
    return out
