"""What the rules share: the lines they take, once-each violations, an index of commits, the model."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from .._model import Commit, Read, Timeline, as_timeline, fmt_t
from .._ownership import Model
from .._violation import Violation

#: what a rule takes: the lines, or a Timeline built of them
Lines = Timeline | Iterable[object]


def model_of(lines: Lines, model: Model | None = None) -> Model:
    """The ownership model of the lines (the one given, when the caller built it already)."""
    return model if model is not None else Model(as_timeline(lines))


def dedupe(violations: Iterable[Violation]) -> list[Violation]:
    """Once each."""
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


def span(reads: Sequence[Read]) -> tuple[int, int]:
    return min(r.first for r in reads), max(r.last for r in reads)


def times(reads: Sequence[Read]) -> str:
    return fmt_t(reads[0].t) if len(reads) == 1 else f"{reads[0].t:.1f}..{fmt_t(reads[-1].t)}"


class CommitIndex:
    """For one partition's acknowledged commits: the last one answered before a time (the offset the broker
    then held, by the histories), and the one of the largest offset answered before it."""

    def __init__(self, commits: Iterable[Commit]) -> None:
        self.ordered = sorted(commits, key=lambda c: (c.t, c.i))
        self.times = [c.t for c in self.ordered]
        self.best: list[Commit] = []
        for c in self.ordered:
            self.best.append(c if not self.best or c.offset > self.best[-1].offset else self.best[-1])

    def last_before(self, t: float) -> Commit | None:
        n = bisect.bisect_left(self.times, t)
        return self.ordered[n - 1] if n else None

    def largest_before(self, t: float) -> Commit | None:
        n = bisect.bisect_left(self.times, t)
        return self.best[n - 1] if n else None
