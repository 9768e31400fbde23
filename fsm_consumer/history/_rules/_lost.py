"""Rule L: nothing is lost."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from .._model import TP, GroupKey, Read, as_timeline, fmt_group, fmt_range, fmt_t, fmt_tp
from .._violation import Violation
from ._shared import Lines


def normalize_produced(produced: Mapping[Any, Any]) -> dict[TP, int]:
    """``{"topic": {"partition": count}}`` (the ``--produced`` file) or ``{(topic, partition): count}`` ->
    ``{(topic, partition): count}``; raises ValueError on anything else."""
    out: dict[TP, int] = {}

    def put(topic: object, partition: object, count: object) -> None:
        if isinstance(partition, str) and partition.strip().lstrip("-").isdigit():
            partition = int(partition)
        if not isinstance(topic, str) or isinstance(partition, bool) or not isinstance(partition, int):
            raise ValueError(f"not a topic and a partition: {topic!r}, {partition!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{topic}-{partition}: the count produced is not a whole number: {count!r}")
        out[(topic, partition)] = count

    for key, value in produced.items():
        if isinstance(key, tuple) and len(key) == 2:
            put(key[0], key[1], value)
        elif isinstance(key, str) and isinstance(value, Mapping):
            for partition, count in value.items():
                put(key, partition, count)
        else:
            raise ValueError(f'expected {{"topic": {{"partition": count}}}}, got {key!r}: {value!r}')
    return out


def _missing(reads: Sequence[Read], n: int) -> list[tuple[int, int]]:
    """The ranges of ``0..n-1`` no read covers."""
    out = []
    nxt = 0  # the lowest offset not yet covered
    for r in sorted(reads, key=lambda r: r.first):
        if r.first > nxt:
            out.append((nxt, min(r.first, n) - 1))
        nxt = max(nxt, r.last + 1)
        if nxt >= n:
            break
    if nxt < n:
        out.append((nxt, n - 1))
    return [(lo, hi) for lo, hi in out if lo <= hi]


def rule_l(lines: Lines, produced: Mapping[Any, Any] | None) -> list[Violation]:
    """L: every offset ``0..count-1`` of each partition produced was handed out (lies in a ``read``'s
    ``offsets``) by some consumer of each group that read or was assigned the topic; a produced partition
    of a topic no consumer touched is lost whole. Without ``produced``, nothing (check() reports L as not
    checked)."""
    if produced is None:
        return []
    tl = as_timeline(lines)
    counts = normalize_produced(produced)
    group_of = {c.name: c.group for c in tl.consumers.values()}
    touched: dict[GroupKey, set[str]] = defaultdict(set)
    reads: dict[tuple[GroupKey, TP], list[Read]] = defaultdict(list)
    for r in tl.reads:
        group = group_of[r.consumer]
        touched[group].add(r.tp[0])
        reads[(group, r.tp)].append(r)
    for v in tl.intervals:
        touched[group_of[v.consumer]].add(v.tp[0])
    out = []
    for tp, n in sorted(counts.items()):
        if n == 0:
            continue
        groups = sorted((g for g, topics in touched.items() if tp[0] in topics), key=str)
        if not groups:
            out.append(
                Violation(
                    "L",
                    f"{fmt_tp(tp)}: offsets 0..{n - 1} (all {n} records produced) were handed out by no consumer: "
                    f"none read topic {tp[0]!r} or was assigned a partition of it",
                    tp=tp,
                    offsets=(0, n - 1),
                    details=dict(produced=n, missing=[(0, n - 1)], group=None),
                )
            )
            continue
        for group in groups:
            mine = reads.get((group, tp), [])
            missing = _missing(mine, n)
            if not missing:
                continue
            total = sum(hi - lo + 1 for lo, hi in missing)
            shown = ", ".join(fmt_range(lo, hi) for lo, hi in missing[:5])
            if len(missing) > 5:
                shown += f" and {len(missing) - 5} more ranges"
            lo, hi = missing[0]
            past = min((r for r in mine if r.first > hi), key=lambda r: r.i, default=None)
            if not mine:
                where = "no consumer of it read this partition"
            else:
                where = f"the highest offset read is {max(r.last for r in mine)}"
                if past is not None:
                    where += (
                        f"; {past.consumer} read {fmt_range(past.first, past.last)} "
                        f"(from position {past.start}) past offset {lo} at {fmt_t(past.t)}"
                    )
            out.append(
                Violation(
                    "L",
                    f"{fmt_tp(tp)}: {total} of {n} records produced never handed out in {fmt_group(group)}: "
                    f"offsets {shown} ({where})",
                    t=None if past is None else past.t,
                    consumers=() if past is None else (past.consumer,),
                    tp=tp,
                    offsets=(lo, missing[-1][1]),
                    details=dict(produced=n, missing=missing, group=group, never_handed_out=total),
                )
            )
    return out
