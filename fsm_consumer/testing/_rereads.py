"""How many offsets the rules let a group hand out again (the bound a scenario's re-reads are shown against).

A re-read is allowed where ownership changes hands: the new owner begins at the group's last acknowledged
commit, so it may hand out again what was handed out beyond it (rule D forbids anything below it; rule M
forbids going back within one ownership; rule E forbids reading beside another owner). For every ownership
the group gave (``_ownership``'s model) that is ``R - C``: ``R`` one past the highest offset of the partition
handed out before the ownership began, ``C`` the group's last commit of it acknowledged by then (0 without
one). Add the records of the polls rule E's allowance covered (a member frozen mid-poll). A run whose
re-reads exceed the sum has handed out again something no rule allows, and the rules will have said where.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable

from ..history import History
from ..history._model import TP, Read, Timeline, as_timeline
from ..history._ownership import Model
from ..history._rules._positions import GroupCommits

__all__ = ["reread_bound"]


def reread_bound(history: History | Timeline | Iterable[object]) -> int:
    """The offsets the consumers of ``history`` (``load()``'s, or the lines) may hand out again."""
    tl = as_timeline(history)
    model = Model(tl)
    commits = GroupCommits(tl)
    reads: dict[TP, list[Read]] = defaultdict(list)
    for r in tl.reads:
        reads[r.tp].append(r)
    total = sum(model.allowed_polls.values())
    for (name, tp), owned in model.of.items():
        rs = [r for r in reads.get(tp, []) if tl.same_group(name, r.consumer)]
        at = [r.i for r in rs]
        reach: list[int] = []  # reach[n]: one past the highest offset of rs[:n + 1]
        for r in rs:
            reach.append(max(reach[-1] if reach else 0, r.last + 1))
        for o in owned:
            if not o.interval.exclusive or o.void_by is not None:
                continue
            n = bisect.bisect_left(at, o.interval.start_i)
            handed_out = reach[n - 1] if n else 0
            last = commits.of(name, tp).last_before(o.start_t)
            total += max(0, handed_out - (last.offset if last is not None else 0))
    return total
