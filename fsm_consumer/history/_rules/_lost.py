"""Rule L: nothing is lost."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from .._model import TP, GroupKey, Read, as_timeline, fmt_group, fmt_range, fmt_t, fmt_tp
from .._violation import Violation
from ._shared import Lines

Produced = int | list[tuple[int, int]]  # a count (offsets 0..count-1) or the [first, last] ranges produced


def normalize_produced(produced: Mapping[Any, Any]) -> dict[TP, Produced]:
    """``{"topic": {"partition": count or [[first, last], ...]}}`` (the ``--produced`` file) or ``{(topic,
    partition): count or ranges}`` -> ``{(topic, partition): count or sorted ranges}``: a count says offsets
    ``0..count-1`` were produced; ranges name the offsets acknowledged to the producer exactly (a broker crash
    may leave an offset that was never acknowledged, or that it never kept). ValueError on anything else."""
    out: dict[TP, Produced] = {}

    def put(topic: object, partition: object, value: object) -> None:
        if isinstance(partition, str) and partition.strip().lstrip("-").isdigit():
            partition = int(partition)
        if not isinstance(topic, str) or isinstance(partition, bool) or not isinstance(partition, int):
            raise ValueError(f"not a topic and a partition: {topic!r}, {partition!r}")
        if isinstance(value, list | tuple):
            out[(topic, partition)] = _ranges(f"{topic}-{partition}", value)
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"{topic}-{partition}: what was produced is neither a count nor [first, last] ranges: {value!r}"
            )
        out[(topic, partition)] = value

    for key, value in produced.items():
        if isinstance(key, tuple) and len(key) == 2:
            put(key[0], key[1], value)
        elif isinstance(key, str) and isinstance(value, Mapping):
            for partition, count in value.items():
                put(key, partition, count)
        else:
            raise ValueError(f'expected {{"topic": {{"partition": count}}}}, got {key!r}: {value!r}')
    return out


def _ranges(where: str, value: Sequence[Any]) -> list[tuple[int, int]]:
    ranges = []
    for item in value:
        if (
            not isinstance(item, list | tuple)
            or len(item) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in item)
            or item[0] > item[1]
        ):
            raise ValueError(f"{where}: a range produced is not [first, last] offsets: {item!r}")
        ranges.append((int(item[0]), int(item[1])))
    return sorted(ranges)


def as_ranges(produced: Produced) -> list[tuple[int, int]]:
    if isinstance(produced, int):
        return [(0, produced - 1)] if produced else []
    return produced


def _fmt_ranges(ranges: list[tuple[int, int]]) -> str:
    shown = ", ".join(fmt_range(lo, hi) for lo, hi in ranges[:5])
    return shown + (f" and {len(ranges) - 5} more ranges" if len(ranges) > 5 else "")


def _missing(reads: Sequence[Read], ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``ranges`` no read handed out (a read's gaps hold no record: they cover nothing)."""
    covered = sorted(run for r in reads for run in r.ranges())
    out = []
    for lo, hi in ranges:
        nxt = lo  # the lowest offset of this range not yet known covered
        for first, last in covered:
            if last < nxt:
                continue
            if first > hi:
                break
            if first > nxt:
                out.append((nxt, first - 1))
            nxt = max(nxt, last + 1)
            if nxt > hi:
                break
        if nxt <= hi:
            out.append((nxt, hi))
    return out


def rule_l(lines: Lines, produced: Mapping[Any, Any] | None) -> list[Violation]:
    """L: every offset ``0..count-1`` of each partition produced was handed out (lies in a ``read``'s
    ``offsets`` and not in its ``gaps``) by some consumer of each group that read or was assigned the topic;
    a produced partition of a topic no consumer touched is lost whole (unless a share group read it: rule S
    judges share groups). Without ``produced``, nothing (check()
    reports L as not checked)."""
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
        if not r.fault():  # a line that does not hold together vouches for no offset (rule M reports it)
            reads[(group, r.tp)].append(r)
    for v in tl.intervals:
        touched[group_of[v.consumer]].add(v.tp[0])
    shared = {line.tp[0] for line in tl.share}  # topics share groups read: rule S judges those groups
    out = []
    for tp, value in sorted(counts.items()):
        ranges = as_ranges(value)
        n = sum(hi - lo + 1 for lo, hi in ranges)
        if n == 0:
            continue
        groups = sorted((g for g, topics in touched.items() if tp[0] in topics), key=str)
        if not groups and tp[0] in shared:
            continue
        if not groups:
            out.append(
                Violation(
                    "L",
                    f"{fmt_tp(tp)}: offsets {_fmt_ranges(ranges)} (all {n} records produced) were handed out by no "
                    "consumer: "
                    f"none read topic {tp[0]!r} or was assigned a partition of it",
                    tp=tp,
                    offsets=(ranges[0][0], ranges[-1][1]),
                    details=dict(produced=n, missing=ranges, group=None),
                )
            )
            continue
        for group in groups:
            mine = reads.get((group, tp), [])
            missing = _missing(mine, ranges)
            if not missing:
                continue
            total = sum(hi - lo + 1 for lo, hi in missing)
            shown = _fmt_ranges(missing)
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
