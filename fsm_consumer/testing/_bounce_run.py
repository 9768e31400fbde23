"""Issue 25's clean rolling bounce: members of one group in their own processes while records flow; each in
turn is stopped cleanly (SIGTERM: it closes its consumer) and started again under the same name, the next
only once the group has settled. A dynamic member leaves the group on close, so each bounce costs a
bounded number of rebalances (``REBALANCES_PER_BOUNCE``); a static member (``group_instance_id``) sends no
LeaveGroup and comes back within its session, so the broker hands it its old assignment: no rebalance at
all. Every consumer's history is judged (L E D M C). Used by tests/integration/group/test_group_bounce.py
(short) and tools/faults (long)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..history import CheckResult, load
from ._group_run import GroupRun
from ._processes import MemberProcess

__all__ = ["MODES", "REBALANCES_PER_BOUNCE", "UNSUPPORTED", "run"]

MODES = ("dynamic", "static")

#: the most generations one bounce may cost: a leave (one) and a join, which under cooperative-sticky
#: takes two (the partitions to move are revoked in the first, assigned in the follow-up)
REBALANCES_PER_BOUNCE = {"dynamic": 3, "static": 0}

#: (broker kind, mode) -> why the scenario cannot be judged there (none: both brokers carry every mode)
UNSUPPORTED: dict[tuple[str, str], str] = {}


def run(
    bootstrap: str,
    topic: str,
    partitions: int,
    mode: str,
    out_dir: str | Path,
    *,
    members: int = 3,
    rounds: int | None = None,
    rate: float = 300.0,
    session_timeout_ms: int = 10_000,
    settle_timeout_s: float = 60.0,
    commit_log: Callable[[str], list[tuple[str, int, int]]] | None = None,
    log: Callable[[str], None] | None = None,
    client: str | Sequence[str] = "fsm",
) -> CheckResult:
    """Bounce ``rounds`` members (default: each once), in turn. ``result.summary["context"]`` holds each
    bounce's rebalances (generations it cost, from the histories), how long the group took to settle
    again, and ``max_rebalances_per_bounce``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    say = log or (lambda _: None)
    static = mode == "static"
    group = GroupRun(
        bootstrap,
        topic,
        partitions,
        Path(out_dir),
        client=client,
        members=members,
        rate=rate,
        log=say,
        # range for static members: their subscription stays byte for byte the same across a restart
        strategy="range" if static else "cooperative-sticky",
        session_timeout_ms=session_timeout_ms,
        static=static,
    )
    group.context.update(mode=mode)
    bounces: list[dict[str, Any]] = []
    try:
        group.start()
        time.sleep(1.0)  # a settled group: the generation every bounce is measured from
        for n in range(rounds if rounds is not None else members):
            before = _generation(group)
            t = time.monotonic()
            new = group.bounce(n % members)

            def back(new: MemberProcess = new) -> bool:  # the replacement owns partitions, the group whole
                return bool(group.watch.owned[new.key]) and group.watch.all_assigned(partitions)

            settled = group.watch.wait(back, settle_timeout_s, None)
            time.sleep(1.0)  # a follow-up round, if any, shows in the generations
            after = _generation(group)
            bounces.append(
                dict(
                    member=new.name,
                    settled=settled,
                    settle_s=round(time.monotonic() - t - 1.0, 1),
                    rebalances=after - before,
                )
            )
            say(f"bounced {new.name}: {bounces[-1]}: {group.watch.describe()}")
        result = group.finish(commit_log=commit_log)
    finally:
        group.stop()
    result.summary["context"].update(
        bounces=bounces,
        max_rebalances_per_bounce=max((b["rebalances"] for b in bounces), default=0),
        allowed_rebalances_per_bounce=REBALANCES_PER_BOUNCE[mode],
    )
    return result


def _generation(group: GroupRun) -> int:
    """The largest generation any consumer of the run has been in so far (from the histories)."""
    events = load([p.history for p in group.procs]).events
    return max((int(e.get("generation", -1)) for e in events), default=-1)
