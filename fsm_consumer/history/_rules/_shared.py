"""What the rules share: the lines they take, once-each violations, windows of reads, an index of commits."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from .._model import Commit, Read, Timeline, fmt_t
from .._violation import Violation

#: what a rule takes: the lines, or a Timeline built of them
Lines = Timeline | Iterable[object]


def dedupe(violations: Iterable[Violation]) -> list[Violation]:
    """Once each (the scopes of rules E, D, C share the consumers without a ``started`` line)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for v in violations:
        if (v.rule, v.message) not in seen:
            seen.add((v.rule, v.message))
            out.append(v)
    return out


def names(*consumers: str) -> tuple[str, ...]:
    """The consumers named, each once, in order."""
    return tuple(dict.fromkeys(consumers))


def in_window(reads: Sequence[Read], lo: int, hi: int) -> list[Read]:
    """The reads (ordered by ``i``) with ``lo <= i < hi``."""
    keys = [r.i for r in reads]
    return list(reads[bisect.bisect_left(keys, lo) : bisect.bisect_left(keys, hi)])


def span(reads: Sequence[Read]) -> tuple[int, int]:
    return min(r.first for r in reads), max(r.last for r in reads)


def times(reads: Sequence[Read]) -> str:
    return fmt_t(reads[0].t) if len(reads) == 1 else f"{reads[0].t:.1f}..{fmt_t(reads[-1].t)}"


class CommitIndex:
    """For one partition: the acknowledged commit of the largest offset among those answered before a time."""

    def __init__(self, commits: Iterable[Commit]) -> None:
        ordered = sorted(commits, key=lambda c: (c.t, c.i))
        self.times = [c.t for c in ordered]
        self.best: list[Commit] = []
        for c in ordered:
            self.best.append(c if not self.best or c.offset > self.best[-1].offset else self.best[-1])

    def before(self, t: float) -> Commit | None:
        n = bisect.bisect_left(self.times, t)
        return self.best[n - 1] if n else None
