"""Running the rules over a history, and the result: the violations (each with the ``transition`` lines
of its consumers around it) and a summary of what the history holds."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ._clock import comparable
from ._load import History
from ._model import TP, Event, NoStart, Timeline, as_timeline, fmt_tp
from ._ownership import Model
from ._rules import (
    DELIVERY_LIMIT,
    broker_backwards,
    rule_a,
    rule_c,
    rule_d,
    rule_e,
    rule_h,
    rule_k,
    rule_l,
    rule_m,
    stale_figures,
)
from ._rules._share import _counts, _Records, _settle, share_consumers
from ._violation import RULES, Violation

#: how far (ms) from a violation's time the transitions of its consumers are kept
WINDOW_MS = 2000.0


@dataclass
class CheckResult:
    """The violations, in rule order (L E D M C K H N A S), each rule's by time; ``summary`` (a dict) holds the totals
    and, under ``"rules"``, each rule's ``status``: ``"passed"``, ``"violated"`` or ``"not checked"``."""

    violations: list[Violation]
    summary: dict[str, Any]
    model: Model | None = field(default=None, repr=False, compare=False)  # who owned what when (_ownership)
    #: what it was judged from: ``history`` (the loaded History, when one was given), ``produced``,
    #: ``broker_commits``, ``broker_committed`` (so a check can be run again, on a mutant say)
    inputs: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """No violation, and a history that was checked whole: at least one line, none that lacked the
        fields its event needs (``summary["malformed"]``), none inside a file that did not parse (a torn last
        line, what a killed process leaves, is the only one passed over). A rule not checked (L without the
        produced counts) is no violation: see ``status``."""
        return self.whole and not self.violations

    @property
    def whole(self) -> bool:
        """Every line was read and understood (see ``ok``)."""
        s = self.summary
        return not s["malformed"] and not s.get("damaged", 0) and s["lines"] > 0

    def by_rule(self) -> dict[str, list[Violation]]:
        out: dict[str, list[Violation]] = {rule: [] for rule in RULES}
        for v in self.violations:
            out.setdefault(v.rule, []).append(v)
        return out

    def status(self, rule: str) -> str:
        return str(self.summary["rules"][rule]["status"])

    def format(self, limit: int = 10, transitions: int = 10) -> str:
        """The summary, then at most ``limit`` violations of each rule (and how many there were), each with
        at most ``transitions`` transition lines of its consumers, the nearest to it in time."""
        from ._report import format_result

        return format_result(self, limit=limit, transitions=transitions)


def check(
    history: History | Timeline | Iterable[Mapping[str, Any]],
    produced: Mapping[Any, Any] | None = None,
    broker_commits: Iterable[Sequence[Any]] | None = None,
    *,
    broker_committed: Mapping[Any, int] | None = None,
    delivery_limit: int = DELIVERY_LIMIT,
    share_settled: Mapping[Any, int] | None = None,
    broker_restarts: Sequence[Sequence[float]] | None = None,
    window_ms: float = WINDOW_MS,
) -> CheckResult:
    """Every rule over a history (``load()``'s, or the lines themselves). Raises ``IncomparableHistories``
    (a ``HistoryError``) when the lines cannot be judged together: a consumer name shared by two processes,
    or lines whose ``t`` are not of one clock (``_clock``).

    ``produced``: ``{"topic": {"partition": count}}`` (or ``{(topic, partition): count}``): records at
    offsets ``0..count-1``; or, in place of a count, the ``[first, last]`` ranges of the offsets acknowledged
    to the producer; without it rule L is not checked (and says so). ``broker_commits``: the
    broker's commit log, ``(topic, partition, offset)`` in the order they took effect: C's "backwards"
    is judged from it instead of from the histories, and every acknowledged commit must be in it.
    ``broker_committed``: ``{(topic, partition): offset}`` the broker holds after the run (for a broker
    whose log cannot be read): no acknowledged commit may be above it. ``delivery_limit``: the share groups'
    delivery count limit (the broker's group.share.delivery.count.limit). ``share_settled``: ``{(topic,
    partition): offset}``, below which the broker holds every record of the share group settled after the run
    (its word for records whose last member's acknowledgement went unanswered, killed or cut off: rule S's
    allowance). ``broker_restarts``: ``[(down_from, up_at), ...]`` in the lines' clock (ms), when the broker was
    restarted: rule N allows a record acquired but not acknowledged then to come back at its count last written."""
    loaded = history if isinstance(history, History) else None
    tl = as_timeline(history)
    comparable(tl)
    model = Model(tl)
    log = None if broker_commits is None else [tuple(e) for e in broker_commits]
    found = {
        "L": rule_l(tl, produced),
        "E": rule_e(tl, model),
        "D": rule_d(tl, model),
        "M": rule_m(tl, model),
        "C": rule_c(tl, log, _tp_keys(broker_committed), model),
        "K": rule_k(tl),
    }
    records = _Records.of(tl)
    restarts = [(float(a), float(b)) for a, b in (broker_restarts or [])]
    # N and S once each: their violations, and what they allowed on the broker's word (for the notes)
    found["N"], across = _counts(tl, records, delivery_limit, restarts)
    found["S"], word = _settle(tl, produced, records, delivery_limit, _tp_keys(share_settled) or {})
    found.update(H=rule_h(tl, records), A=rule_a(tl, records))
    context = _Transitions(tl, window_ms)
    violations: list[Violation] = []
    for rule in RULES:
        found[rule].sort(key=lambda v: (v.t is None, v.t or 0.0))
        violations.extend(context.attach(v) for v in found[rule])
    summary = summarize(tl, loaded)
    summary["stale_polls"] = stale_figures(model)
    allowed = broker_backwards(tl, log)[1] if log is not None else 0
    summary["rules"] = {
        rule: dict(
            title=title,
            status="not checked"
            if (rule in ("L", "S") and produced is None) or not tl.events
            else ("violated" if found[rule] else "passed"),
            violations=len(found[rule]),
            note=_note(rule, tl, model, produced, log, allowed, delivery_limit, share_settled, restarts, across, word),
        )
        for rule, title in RULES.items()
    }
    inputs = dict(
        history=loaded,
        produced=produced,
        broker_commits=log,
        broker_committed=broker_committed,
        delivery_limit=delivery_limit,
        share_settled=share_settled,
        broker_restarts=broker_restarts,
    )
    return CheckResult(violations, summary, model, inputs)


def _tp_keys(offsets: Mapping[Any, int] | None) -> dict[tuple[str, int], int] | None:
    if offsets is None:
        return None
    return {(str(tp[0]), int(tp[1])): int(o) for tp, o in offsets.items()}


def _note(
    rule: str,
    tl: Timeline,
    model: Model,
    produced: Mapping[Any, Any] | None,
    log: list[tuple[Any, ...]] | None,
    allowed: int,
    delivery_limit: int = DELIVERY_LIMIT,
    share_settled: Mapping[Any, int] | None = None,
    restarts: Sequence[tuple[float, float]] = (),
    across: int = 0,
    word: int = 0,
) -> str:
    if rule in ("L", "S") and produced is None:
        return "no produced counts given (--produced): nothing is known to be lost or not"
    if rule in ("H", "N", "A", "S") and not share_consumers(tl):
        return "no share consumer's lines: nothing to check"
    if rule == "S" and share_settled is not None:
        return (
            f"the delivery limit taken as {delivery_limit} (--delivery-limit); {word} record(s) settled on the "
            "broker's word only (--share-settled: their last member's acknowledgement unanswered, killed or cut off)"
        )
    if rule == "N" and restarts:
        return (
            f"the delivery limit taken as {delivery_limit} (--delivery-limit); {across} redelivery(ies) at no higher "
            f"a count across the broker's {len(restarts)} restart(s) (--broker-restarts: Kafka writes a delivery "
            "count with its record's acknowledgement or release, and one acquired then comes back at the count "
            "last written)"
        )
    if rule in ("N", "S"):
        return f"the delivery limit taken as {delivery_limit} (--delivery-limit)"
    if rule == "C" and log is not None:
        return (
            f"judged from the histories, and by the broker's commit log ({len(log)} entries) as a witness: "
            f"{allowed} step(s) down in it explained by a seek or reset in the histories between the two commits; "
            "every acknowledged commit looked up in it"
        )
    if rule == "C":
        return "judged from the histories' commit lines (no broker commit log given)"
    if rule == "E":
        stale = stale_figures(model)
        if stale["polls"]:
            return (
                f"{stale['polls']} poll(s) under way when their member's ownership ended handed out after it (at "
                f"most {stale['max_records']} records in one, within its max_records), none committed (rule C)"
            )
        return ""
    if rule == "K" and not tl.handled:
        return "no handled lines (no ParallelConsumer): nothing to check"
    return ""


class _Transitions:
    """Each consumer's ``transition`` lines by time, to attach those near a violation to it."""

    def __init__(self, tl: Timeline, window_ms: float) -> None:
        self.window = window_ms
        self.lines = tl.transitions
        self.times = {name: [float(e["t"]) for e in lines] for name, lines in tl.transitions.items()}

    def attach(self, v: Violation) -> Violation:
        if v.t is None or not v.consumers:
            return v
        near: list[Event] = []
        for name in v.consumers:
            times = self.times.get(name, [])
            lo = bisect.bisect_left(times, v.t - self.window)
            hi = bisect.bisect_right(times, v.t + self.window)
            near.extend(self.lines[name][lo:hi])
        near.sort(key=lambda e: float(e["t"]))
        return replace(v, transitions=tuple(near))


def _union(ranges: list[tuple[int, int]]) -> int:
    total, reach = 0, -1
    for first, last in sorted(ranges):
        if last > reach:
            total += last - max(first, reach + 1) + 1
            reach = last
    return total


def summarize(tl: Timeline, history: History | None = None) -> dict[str, Any]:
    """Totals, no verdicts: files and lines, consumers, records read (distinct, re-read), commits, handler
    calls, lines not understood."""
    consumers: dict[str, dict[str, Any]] = {}
    for c in tl.consumers.values():
        consumers[c.name] = dict(
            client=c.client,
            group=None if c.group is NoStart.UNKNOWN else c.group,
            started=c.group is not NoStart.UNKNOWN,
            records_read=0,
            reads=c.counts.get("read", 0),
            commits=0,
            commits_failed=0,
            assigned=c.counts.get("assigned", 0),
            revoked=c.counts.get("revoked", 0),
            lost=c.counts.get("lost", 0),
            session_expired=c.counts.get("session_expired", 0),
            handled=c.counts.get("handled", 0),
            generations=sorted(c.generations),
            closed=c.closed,
            first_t=c.first_t,
            last_t=c.last_t,
        )
    ranges: dict[TP, list[tuple[int, int]]] = defaultdict(list)
    records = span = 0
    for r in tl.reads:
        consumers[r.consumer]["records_read"] += r.count
        records += r.count
        span += r.last - r.first + 1
        ranges[r.tp].append((r.first, r.last))
    commit_lines: dict[int, tuple[str, bool]] = {}  # a commit line expands to several partitions
    for k in tl.commits:
        commit_lines[k.i] = (k.consumer, k.acked)
    for name, acked in commit_lines.values():
        consumers[name]["commits" if acked else "commits_failed"] += 1
    distinct = sum(_union(rs) for rs in ranges.values())
    out: dict[str, Any] = dict(
        consumers=consumers,
        groups=sorted({"(no group)" if c["group"] is None else c["group"] for c in consumers.values() if c["started"]}),
        lines=len(tl.events),
        records_read=records,
        distinct_offsets=distinct,
        rereads=span - distinct,  # offsets handed out again (by any consumer)
        partitions_read=sorted(fmt_tp(tp) for tp in ranges),
        commits=sum(1 for _, acked in commit_lines.values() if acked),
        commits_failed=sum(1 for _, acked in commit_lines.values() if not acked),
        committed_offsets=sum(1 for k in tl.commits if k.acked),
        handled=len(tl.handled),
        malformed=len(tl.malformed),
        malformed_sample=[f"{reason}: {dict(line)}"[:200] for reason, line in tl.malformed[:5]],
        unknown_events=tl.unknown_events,
        unknown=dict(tl.unknown.most_common()),
        source_lines=tl.sources,
    )
    if history is not None:
        out.update(
            files=len(history.files),
            file_lines=history.lines,
            unparseable=len(history.unparseable),
            torn=history.torn,
            damaged=len(history.damaged),
            unparseable_sample=[str(u) for u in history.unparseable[:5]],
        )
    return out
