"""Rule K: key order under a ParallelConsumer."""

from __future__ import annotations

import bisect
from collections import defaultdict

from .._model import TP, Handled, as_timeline, fmt_t, fmt_tp
from .._violation import Violation
from ._shared import Lines


def rule_k(lines: Lines) -> list[Violation]:
    """K: per consumer, partition, run (a ``parallel_restart`` of the partition begins a new one; a handler
    call belongs to the run it began in) and key digest (null: the records without a key, one lane), the
    ``handled`` lines neither overlap in time (``t_start`` .. ``t``) nor go down in offset (a retry of the
    same offset is in order). Under ``ordering="partition"`` (the restart line says) the whole partition is
    one lane; under ``"unordered"`` nothing is promised."""
    tl = as_timeline(lines)
    restarts: dict[tuple[str, TP], list[float]] = defaultdict(list)
    orderings: dict[tuple[str, TP], list[str]] = defaultdict(list)
    for s in sorted(tl.restarts, key=lambda s: s.t):
        restarts[(s.consumer, s.tp)].append(s.t)
        orderings[(s.consumer, s.tp)].append(s.ordering)
    lanes: dict[tuple[str, TP, int, str | None], list[Handled]] = defaultdict(list)
    for h in tl.handled:
        runs = restarts.get((h.consumer, h.tp), [])
        run = bisect.bisect_right(runs, h.t_start)
        # the run's ordering (a run before any restart line: key, the default): partition order is one
        # lane per partition, unordered promises no order
        ordering = orderings[(h.consumer, h.tp)][run - 1] if run else "key"
        if ordering == "unordered":
            continue
        lanes[(h.consumer, h.tp, run, h.key if ordering == "key" else "(partition)")].append(h)
    out = []
    for (name, tp, run, key), items in sorted(lanes.items(), key=lambda kv: (kv[0][:3], str(kv[0][3]))):
        items.sort(key=lambda h: (h.t_start, h.i))
        runs = restarts.get((name, tp), [])
        began = f"the run begun at {fmt_t(runs[run - 1])}" if run else "its first run"
        busy: Handled | None = None  # the call that ends last so far
        top: Handled | None = None  # the largest offset so far
        for h in items:
            if busy is not None and h.t_start < busy.t:
                out.append(
                    _k(
                        h,
                        f"handled offset {h.offset} from {fmt_t(h.t_start)} while offset {busy.offset} of that key "
                        f"was still being handled (until {fmt_t(busy.t)})",
                        key,
                        began,
                        busy,
                    )
                )
            if top is not None and h.offset < top.offset:
                out.append(
                    _k(
                        h,
                        f"handled offset {h.offset} (from {fmt_t(h.t_start)}) after offset {top.offset} of that key "
                        f"(from {fmt_t(top.t_start)})",
                        key,
                        began,
                        top,
                    )
                )
            if busy is None or h.t > busy.t:
                busy = h
            if top is None or h.offset > top.offset:
                top = h
    return out


def _k(h: Handled, what: str, key: str | None, began: str, other: Handled) -> Violation:
    return Violation(
        "K",
        f"{fmt_tp(h.tp)} key {'null' if key is None else key}: {h.consumer} {what}, in {began}",
        t=h.t_start,
        consumers=(h.consumer,),
        tp=h.tp,
        offsets=(min(h.offset, other.offset), max(h.offset, other.offset)),
        details=dict(handled=h, other=other),
    )
