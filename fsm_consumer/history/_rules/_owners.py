"""Rule E: a record is handed out only by a member that owns its partition."""

from __future__ import annotations

from collections import defaultdict

from .._model import TP, Read, fmt_range, fmt_tp
from .._ownership import Kind, Model, Verdict
from .._violation import Violation
from ._shared import Lines, model_of, span, times


def rule_e(lines: Lines, model: Model | None = None) -> list[Violation]:
    """E: every read lies within its member's ownership of the partition as its group meant it
    (``_ownership``: one owner per partition per group at any moment, whatever the generations), but the one
    poll under way when that ownership ended, within that poll's ``max_records`` (never committed: rule C).
    Reported per member, partition and kind: reads by a member that never owned the partition, reads in an
    ownership its group had already given to a newer round, and reads after the ownership ended that the
    allowance does not cover (a poll begun after it ended, or more records than the poll could take)."""
    m = model_of(lines, model)
    found: dict[tuple[str, TP, Kind, int], list[Verdict]] = defaultdict(list)
    for v in m.violations():
        o = v.owned
        found[(v.read.consumer, v.read.tp, v.kind, -1 if o is None else o.interval.start_i)].append(v)
    out = []
    for (name, tp, kind, _), vs in sorted(found.items(), key=lambda kv: kv[1][0].read.i):
        reads = [v.read for v in vs]
        lo, hi = span(reads)
        records = sum(r.count for r in reads)
        what = (
            f"{fmt_tp(tp)}: {name} handed out offsets {fmt_range(lo, hi)} ({records} records in {len(reads)} "
            f"reads at {times(reads)}, generation {_gens(reads)})"
        )
        o = vs[0].owned
        if kind is Kind.UNOWNED:
            message = f"{what}, but it had never been assigned the partition (no assigned line before)"
            others: tuple[str, ...] = ()
        elif kind is Kind.VOID:
            assert o is not None and o.void_by is not None
            message = f"{what} in an ownership that was {o.ended()}"
            others = (o.void_by.consumer,)
        else:
            assert o is not None
            message = f"{what} after {o.ended()}, and {vs[0].why}"
            others = (o.cut_by.consumer,) if o.cut_by is not None else ()
        out.append(
            Violation(
                "E",
                message,
                t=reads[0].t,
                consumers=(name, *others),
                tp=tp,
                offsets=(lo, hi),
                details=dict(reader=name, kind=kind.value, reads=len(reads), records=records, owned=o),
            )
        )
    return out


def _gens(reads: list[Read]) -> str:
    return "/".join(map(str, sorted({r.generation for r in reads})))


def stale_polls(lines: Lines, model: Model | None = None) -> list[Read]:
    """The reads E's allowance covered: each of the one poll under way when its member's ownership ended,
    handed out after it, within the poll's ``max_records``."""
    m = model_of(lines, model)
    return [v.read for v in m.verdicts.values() if v.kind is Kind.ALLOWED]


def stale_figures(model: Model) -> dict[str, int]:
    """E's allowance as figures: the polls it covered and the records of the largest (all its partitions)."""
    return dict(polls=len(model.allowed_polls), max_records=max(model.allowed_polls.values(), default=0))


__all__ = ["rule_e", "stale_figures", "stale_polls"]
