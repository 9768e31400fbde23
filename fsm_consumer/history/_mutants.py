"""Proving the history checker by breaking what it checks: mutants of a clean history, each with one kind of
violation injected, each of which the checker must report (with the rule that kind breaks) or refuse.

    from fsm_consumer.history import check, load, mutation_report
    report = mutation_report(check(load(dir), ...))   # a clean result: its history and inputs are mutated
    assert report.all_caught, report.format()

``fsm-consumer check-history DIR --mutants N`` does the same after a clean check: a user can prove the
checker on the histories of their own runs.

The kinds (``KINDS``), each applied where the history has what it needs (a kind a history cannot host, say a
second member's ownership in a one-member history, is reported as not applicable, never as caught):

* ``shift-read``: a read moved into a time when another member of the group owned its partition and its
  reader did not (rule E);
* ``drop-records``: a read's count cut by one (its line no longer holds together), or its last record cut
  where the next read of its ownership follows on (a gap): rule M;
* ``commit-backwards``: an acknowledged commit lowered below a larger one the group had acknowledged before
  it was sent, with no seek between, as positions (not offsets the application gave) (rule C);
* ``rename-member``: one member's file written under another member's name (refused: two processes, one name);
* ``skew-clock``: one file's ``t`` shifted by seconds, its ``wall`` kept (refused: another clock);
* ``stretch-stale-poll``: a poll begun after its member's ownership ended, handing out the next records; and,
  where a member went on believing it owned a partition the group had given another, a poll under way then
  that hands out more than its ``max_records`` (rule E);
* ``delete-ownership``: the ``assigned`` line an ownership with reads began with, deleted (rule E).

The share-group kinds (``_share_mutants``: a second holder, counts that go back or past the limit, a record
again after its ACCEPT, a late acknowledgement taking effect, records left unsettled) are tried on the share
consumers' lines the same way.
"""

from __future__ import annotations

import bisect
import copy
import pickle
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._check import CheckResult, check
from ._load import History, HistoryError
from ._model import GROUP, TP, Commit, Read, Timeline, fmt_tp
from ._ownership import Kind, Model, Owned
from ._share_mutants import SHARE_KINDS

__all__ = [
    "CONSUMER_MUTANT_KINDS",
    "KINDS",
    "MUTANT_KINDS",
    "SHARE_MUTANT_KINDS",
    "Mutant",
    "MutationReport",
    "Outcome",
    "judge",
    "mutants",
    "mutation_report",
]

Events = list[dict[str, Any]]


@dataclass
class Mutant:
    """One injected violation: its kind, what was done, the lines (and their files) after it, and what the
    checker must then say (a rule letter, or ``"refused"``)."""

    kind: str
    what: str
    events: Events
    sources: list[str]
    expect: str


@dataclass
class Outcome:
    mutant: Mutant
    caught: bool
    said: str  # the rules that reported it, or the refusal


@dataclass
class MutationReport:
    """Per kind: the mutants tried and caught; ``missed`` lists those the checker passed."""

    outcomes: list[Outcome] = field(default_factory=list)
    applicable: dict[str, int] = field(default_factory=dict)

    @property
    def all_caught(self) -> bool:
        return all(o.caught for o in self.outcomes)

    def by_kind(self) -> dict[str, tuple[int, int]]:
        out = {kind: (0, 0) for kind in KINDS}
        for o in self.outcomes:
            tried, caught = out[o.mutant.kind]
            out[o.mutant.kind] = (tried + 1, caught + int(o.caught))
        return out

    @property
    def missed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.caught]

    def format(self) -> str:
        lines = ["mutants of the history, by kind: caught / tried"]
        for kind, (tried, caught) in self.by_kind().items():
            share = "not applicable to this history" if not tried else f"{caught}/{tried}"
            lines.append(f"  {kind:<20} {share}")
        for o in self.missed:
            lines.append(
                f"  MISSED {o.mutant.kind}: {o.mutant.what} (expected {o.mutant.expect}; the checker: {o.said})"
            )
        return "\n".join(lines)


def _copy(events: Events) -> Events:
    """A deep copy of the lines (JSON values) for one mutant to change; pickle's round trip is copy.deepcopy's
    answer in a tenth of its time, which a long history's mutants (16 copies of 100,000 lines) feel."""
    return pickle.loads(pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL))


def _retime(e: dict[str, Any], t: float) -> None:
    """Move a line to ``t``, its wall clock with it (the same instant on both clocks), its poll start too."""
    dt = t - float(e["t"])
    e["t"] = round(t, 3)
    if isinstance(e.get("wall"), (int, float)):
        e["wall"] = round(float(e["wall"]) + dt / 1000.0, 6)
    if isinstance(e.get("t_poll_start"), (int, float)):
        e["t_poll_start"] = round(float(e["t_poll_start"]) + dt, 3)


def _backwards_candidates(tl: Timeline) -> list[tuple[Commit, Commit]]:
    """Each acknowledged commit ``y`` not of a consumer that moved its own position, with ``x``: the highest
    acknowledged commit of its partition answered before ``y`` was sent, in ``y``'s group. A running best
    per group over the commits in answer order, so linear in the commits, not quadratic: a long run's
    history has tens of thousands. (The scan it replaced carried the last ``x`` found to a ``y`` that had
    none, of another group too: a mutant that was no violation.)"""
    acked: dict[TP, list[Commit]] = {}
    for c in tl.commits:
        if c.acked:
            acked.setdefault(c.tp, []).append(c)
    movers = {(p.consumer, p.tp) for p in tl.positions if p.kind == "seek" or p.why != "committed"}
    candidates = []
    for tp, commits in acked.items():
        commits.sort(key=lambda c: (c.t, c.i))
        answered = [c.t for c in commits]
        # prefixes[group of y][k]: the first highest commit among commits[:k] in that group
        prefixes: dict[Any, list[Commit | None]] = {}
        for y in commits:
            key = tl.group_of(y.consumer)
            prefix = prefixes.get(key)
            if prefix is None:
                prefix = prefixes[key] = _running_best(commits, tl, y.consumer)
            best = prefix[bisect.bisect_left(answered, y.sent)]
            if best is not None and best.offset >= 1 and (y.consumer, tp) not in movers:
                candidates.append((y, best))
    return candidates


def _running_best(commits: list[Commit], tl: Timeline, consumer: str) -> list[Commit | None]:
    """``out[k]``: the first commit of highest offset among ``commits[:k]`` in ``consumer``'s group."""
    out: list[Commit | None] = [None]
    best: Commit | None = None
    for x in commits:
        if tl.same_group(x.consumer, consumer) and (best is None or x.offset > best.offset):
            best = x
        out.append(best)
    return out


def _line_of(tl: Timeline, i: int, events: Events) -> int:
    """The position in ``events`` (as given) of the timeline's line ``i`` (the timeline orders by t)."""
    target = tl.events[i]
    for n, e in enumerate(events):
        if e is target:
            return n
    raise LookupError("line not found")


class _Source:
    """A clean history's lines, its timeline and ownership model, and a random source."""

    def __init__(self, history: History, rng: random.Random, inputs: Mapping[str, Any] | None = None) -> None:
        self.inputs = dict(inputs or {})  # what the clean check was given (produced counts, delivery limit)
        self.events: Events = history.events
        self.sources = list(history.sources) or [""] * len(history.events)
        self.tl = Timeline.build(self.events, self.sources)
        self.model = Model(self.tl)
        self.rng = rng
        self._cache: dict[str, Any] = {}

    def cached(self, name: str, make: Callable[[], Any]) -> Any:
        """What ``make`` finds in the clean history, found once for every round of mutants."""
        if name not in self._cache:
            self._cache[name] = make()
        return self._cache[name]

    def mutant(self, kind: str, what: str, change: Callable[[Events, list[str]], None], expect: str) -> Mutant:
        events, sources = _copy(self.events), list(self.sources)
        change(events, sources)
        return Mutant(kind, what, events, sources, expect)

    def index(self, i: int) -> int:
        return _line_of(self.tl, i, self.events)

    def owned_reads(self) -> list[tuple[Read, Owned]]:
        return [
            (v.read, v.owned)
            for v in self.model.verdicts.values()
            if v.kind is Kind.OWNED and v.owned is not None and v.owned.interval.exclusive
        ]


def _shift_read(s: _Source) -> Iterator[Mutant]:
    reads = [r for r, _ in s.owned_reads()]
    s.rng.shuffle(reads)
    for r in reads:
        for (name, tp), owned in s.model.of.items():
            if tp != r.tp or name == r.consumer or not s.tl.same_group(name, r.consumer):
                continue
            for o in owned:
                if not o.interval.exclusive or o.void_by is not None or o.end_t - o.start_t < 4.0:
                    continue
                t = _free(s.model, r.consumer, tp, o.start_t, o.end_t)
                if t is None:
                    continue
                n = s.index(r.i)
                what = f"{r.consumer}'s read {r.first}..{r.last} of {fmt_tp(tp)} moved to {t:.1f} ms, in {name}'s"

                def shift(ev: Events, _: list[str], n: int = n, t: float = t) -> None:
                    _retime(ev[n], t)

                yield s.mutant("shift-read", what + " ownership", shift, "E")
                return


def _free(model: Model, consumer: str, tp: TP, lo: float, hi: float) -> float | None:
    """A time in ``(lo, hi)`` when ``consumer`` had no ownership of ``tp`` by its own lines."""
    busy = sorted((o.interval.start_t, o.interval.end_t) for o in model.of.get((consumer, tp), ()))
    start = lo
    for b_lo, b_hi in busy + [(hi, hi)]:
        if b_lo > start + 2.0:
            return (start + min(b_lo, hi)) / 2.0
        start = max(start, b_hi)
        if start >= hi:
            break
    return None


def _drop_records(s: _Source) -> Iterator[Mutant]:
    reads = [r for r, _ in s.owned_reads() if r.count >= 2 and not r.gaps]
    if not reads:
        return
    r = s.rng.choice(reads)
    n = s.index(r.i)

    def fewer(ev: Events, _: list[str]) -> None:
        ev[n]["count"] -= 1

    yield s.mutant("drop-records", f"{r.consumer}'s read {r.first}..{r.last}: count cut by one", fewer, "M")
    following: dict[tuple[str, TP, int], list[Read]] = {}
    for r, o in s.owned_reads():
        following.setdefault((r.consumer, r.tp, o.interval.start_i), []).append(r)
    pairs = [
        (a, b)
        for rs in following.values()
        for a, b in zip(rs, rs[1:], strict=False)
        if a.count >= 2 and not a.gaps and a.moved and b.start == a.end
    ]
    if pairs:
        a, _b = s.rng.choice(pairs)
        n = s.index(a.i)

        def shorter(ev: Events, _: list[str]) -> None:
            ev[n]["offsets"][1] -= 1
            ev[n]["to"] -= 1
            ev[n]["count"] -= 1

        yield s.mutant("drop-records", f"{a.consumer}'s read {a.first}..{a.last}: its last record cut", shorter, "M")


def _commit_backwards(s: _Source) -> Iterator[Mutant]:
    candidates = s.cached("commit-backwards", lambda: _backwards_candidates(s.tl))
    if not candidates:
        return
    y, x = s.rng.choice(candidates)
    n = s.index(y.i)
    low = x.offset - 1

    def lower(ev: Events, _: list[str]) -> None:
        for entry in ev[n]["offsets"]:
            if (entry[0], entry[1]) == y.tp:
                entry[2] = low
        ev[n].pop("explicit", None)  # the library's own step back, not offsets the application asked for

    what = f"{y.consumer}'s commit of {y.offset} of {fmt_tp(y.tp)} lowered to {low}, below {x.consumer}'s {x.offset}"
    yield s.mutant("commit-backwards", what, lower, "C")


def _rename_member(s: _Source) -> Iterator[Mutant]:
    files: dict[str, set[str]] = {}
    for e, f in zip(s.events, s.sources, strict=True):
        files.setdefault(e["consumer"], set()).add(f)
    names = sorted(n for n, fs in files.items() if len(fs) == 1)
    if len(names) < 2:
        return
    a, b = s.rng.sample(names, 2)

    def rename(ev: Events, _: list[str]) -> None:
        for e in ev:
            if e["consumer"] == a:
                e["consumer"] = b

    yield s.mutant("rename-member", f"{a}'s file written under {b}'s name", rename, "refused")


def _skew_clock(s: _Source) -> Iterator[Mutant]:
    files = sorted(set(s.sources))
    if len(files) < 2:
        return
    f = s.rng.choice(files)
    delta = s.rng.choice((-1, 1)) * s.rng.uniform(2_000.0, 60_000.0)

    def skew(ev: Events, sources: list[str]) -> None:
        for e, src in zip(ev, sources, strict=True):
            if src == f:
                for key in ("t", "t_poll_start", "t_start"):
                    if isinstance(e.get(key), (int, float)) and not isinstance(e.get(key), bool):
                        e[key] = round(float(e[key]) + delta, 3)

    yield s.mutant(
        "skew-clock", f"{f.rsplit('/', 1)[-1]}'s t shifted by {delta / 1000:+.1f} s, its wall kept", skew, "refused"
    )


def _stretch_stale_poll(s: _Source) -> Iterator[Mutant]:
    # a poll begun after the member's ownership ended (by its own lines), handing out the records after its last
    ends = [
        (o, r) for r, o in s.owned_reads() if o.interval.ended_by in ("revoked", "lost", "session_expired", "abandoned")
    ]
    last: dict[Any, Any] = {}
    for o, r in ends:
        if r.moved and (o.interval not in last or r.i > last[o.interval][1].i):
            last[o.interval] = (o, r)
    choices = [(o, r) for o, r in last.values() if _alive_after(s.tl, r.consumer, o.interval.end_t + 2.0)]
    if choices:
        o, r = s.rng.choice(sorted(choices, key=lambda x: x[1].i))
        n = s.index(r.i)
        t = o.interval.end_t + 1.0

        def after(ev: Events, sources: list[str]) -> None:
            e = copy.deepcopy(ev[n])
            _retime(e, t)
            e["t_poll_start"] = round(t - 0.5, 3)
            first = r.end
            e["offsets"] = [first, first + r.count - 1]
            e["from"], e["to"] = first, first + r.count
            e.pop("gaps", None)
            ev.insert(n + 1, e)
            sources.insert(n + 1, sources[n])

        what = (
            f"{r.consumer} polled {fmt_tp(r.tp)} again at {t:.1f} ms, after its ownership ended ({o.interval.ended_by})"
        )
        yield s.mutant("stretch-stale-poll", what, after, "E")
    # a poll under way when the group gave the partition to another, larger than the poll could take
    cut = [o for os_ in s.model.of.values() for o in os_ if o.cut_by is not None and o.interval.end_t - o.end_t > 2.0]
    if cut:
        o = s.rng.choice(cut)
        mine = [v.read for v in s.model.verdicts.values() if v.owned is o and v.read.moved and v.read.max_records]
        if mine:
            r = mine[-1]
            n = s.index(r.i)
            t = (o.end_t + o.interval.end_t) / 2.0

            def big(ev: Events, sources: list[str]) -> None:
                e = copy.deepcopy(ev[n])
                _retime(e, t)
                e["t_poll_start"] = round(o.end_t - 0.5, 3)
                size = int(r.max_records or 1) + 1
                e["offsets"] = [r.end, r.end + size - 1]
                e["from"], e["to"], e["count"] = r.end, r.end + size, size
                e.pop("gaps", None)
                ev.insert(n + 1, e)
                sources.insert(n + 1, sources[n])

            what = (
                f"{r.consumer}'s poll under way when {fmt_tp(r.tp)} went to another hands out more than its max_records"
            )
            yield s.mutant("stretch-stale-poll", what, big, "E")


def _alive_after(tl: Timeline, consumer: str, t: float) -> bool:
    return tl.consumers[consumer].last_t >= t


def _delete_ownership(s: _Source) -> Iterator[Mutant]:
    with_reads = {o.interval for _, o in s.owned_reads() if o.interval.by == GROUP}
    lines = sorted({v.start_i for v in with_reads})
    if not lines:
        return
    i = s.rng.choice(lines)
    n = s.index(i)
    e = s.events[n]

    def delete(ev: Events, sources: list[str]) -> None:
        del ev[n]
        del sources[n]

    yield s.mutant(
        "delete-ownership", f"{e['consumer']}'s assigned line at {float(e['t']):.1f} ms deleted", delete, "E"
    )


#: kind -> the function that makes its mutants of a clean consumer-group history
CONSUMER_MUTANT_KINDS: Mapping[str, Callable[[_Source], Iterator[Mutant]]] = {
    "shift-read": _shift_read,
    "drop-records": _drop_records,
    "commit-backwards": _commit_backwards,
    "rename-member": _rename_member,
    "skew-clock": _skew_clock,
    "stretch-stale-poll": _stretch_stale_poll,
    "delete-ownership": _delete_ownership,
}
#: kind -> the function that makes its mutants of a clean share-group history
SHARE_MUTANT_KINDS: Mapping[str, Callable[[Any], Iterator[Mutant]]] = SHARE_KINDS
#: every kind: those a history cannot host make no mutant ("not applicable", never "caught")
KINDS: Mapping[str, Callable[[Any], Iterator[Mutant]]] = {**CONSUMER_MUTANT_KINDS, **SHARE_MUTANT_KINDS}


#: the kinds, as the package exports them
MUTANT_KINDS = KINDS


def mutants(
    history: History, *, seed: int = 0, rounds: int = 1, inputs: Mapping[str, Any] | None = None
) -> Iterator[Mutant]:
    """``rounds`` mutants of each kind (those the history can host), each from the clean history; ``inputs``:
    what the clean check was given (a kind that needs the produced counts makes none without them)."""
    source = _Source(history, random.Random(seed), inputs)
    for _ in range(rounds):
        for make in KINDS.values():
            yield from make(source)


def judge(m: Mutant, inputs: Mapping[str, Any]) -> Outcome:
    files = sorted(set(m.sources))
    history = History(m.events, [Path(f) for f in files], sources=m.sources)
    try:
        result = check(history, **inputs)
    except HistoryError as e:
        return Outcome(m, m.expect == "refused", f"refused: {e}"[:300])
    rules = sorted({v.rule for v in result.violations})
    said = ", ".join(rules) or ("not whole" if not result.whole else "passed")
    return Outcome(m, m.expect in rules, said)


def mutation_report(result: CheckResult, *, seed: int = 0, rounds: int = 1) -> MutationReport:
    """Every kind's mutants of the clean history ``result`` was judged from, each judged with the same inputs
    (produced offsets, the broker's word)."""
    if not result.ok or result.inputs is None or result.inputs.get("history") is None:
        raise ValueError("mutation needs a clean result of check() over a loaded history")
    history: History = result.inputs["history"]
    inputs = {k: v for k, v in result.inputs.items() if k != "history"}
    report = MutationReport()
    for m in mutants(history, seed=seed, rounds=rounds, inputs=inputs):
        report.applicable[m.kind] = report.applicable.get(m.kind, 0) + 1
        report.outcomes.append(judge(m, inputs))
    return report
