"""Issue 25's slow rebalance callbacks: two members of one group in their own processes while records flow,
each one's ``on_partitions_revoked`` sleeping, then committing what it handed out (the usual last commit);
a third member joins, and the partitions it takes are revoked from the others.

* ``within``: the callback takes longer than the session but less than ``max_poll_interval_ms``: heartbeats
  go on from the background thread, the member stays in the group, and its commit in the callback is
  acknowledged;
* ``beyond``: it takes longer than ``max_poll_interval_ms``: the member leaves the group (its poll timer ran
  out), its partitions are lost, not revoked, and its commit in the callback fails.

Every consumer's history is judged (L E D M C). Used by tests/integration/group/test_group_callbacks.py and
tools/faults."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..history import CheckResult
from ._group_run import GroupRun

__all__ = ["MODES", "UNSUPPORTED", "run"]

MODES = ("within", "beyond")

#: (broker kind, mode) -> why the scenario cannot be judged there (none: both brokers carry every mode)
UNSUPPORTED: dict[tuple[str, str], str] = {}


def run(
    bootstrap: str,
    topic: str,
    partitions: int,
    mode: str,
    out_dir: str | Path,
    *,
    rate: float = 300.0,
    session_timeout_ms: int = 3000,
    settle_timeout_s: float = 90.0,
    commit_log: Callable[[str], list[tuple[str, int, int]]] | None = None,
    log: Callable[[str], None] | None = None,
    client: str | Sequence[str] = "fsm",
) -> CheckResult:
    """``within``: callbacks of 1.5 sessions under a poll interval of 4 sessions; ``beyond``: callbacks of
    1.5 poll intervals (of 4/3 sessions). ``result.summary["context"]["callbacks"]``: what the two slow members
    saw: their commits from the callback (acknowledged, failed) and the partitions they lost."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    poll_interval_ms = 4 * session_timeout_ms if mode == "within" else 4 * session_timeout_ms // 3
    sleep_ms = 1.5 * (session_timeout_ms if mode == "within" else poll_interval_ms)
    group = GroupRun(
        bootstrap,
        topic,
        partitions,
        Path(out_dir),
        client=client,
        members=2,
        rate=rate,
        log=log,
        strategy="cooperative-sticky",
        session_timeout_ms=session_timeout_ms,
        max_poll_interval_ms=poll_interval_ms,
        revoke_sleep_ms=sleep_ms,
    )
    group.context.update(mode=mode, revoke_sleep_ms=sleep_ms)
    try:
        group.start()
        slow = list(group.slots)
        joiner = group.add()
        t = time.monotonic()
        settled = group.watch.wait(
            lambda: bool(group.watch.owned[joiner.key]) and group.watch.all_assigned(partitions), settle_timeout_s, None
        )
        group.context.update(settled=settled, settle_s=round(time.monotonic() - t, 1))
        time.sleep(2.0)  # records flow to the settled group
        result = group.finish(commit_log=commit_log)
    finally:
        group.stop()
    result.summary["context"]["callbacks"] = {p.name: _seen(p.out) for p in slow}
    return result


def _seen(path: Path) -> dict[str, Any]:
    """From a member's own lines: its commits from the revocation callback and its lost partitions."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    in_callback = [e for e in lines if e.get("where") == "on_partitions_revoked"]
    return dict(
        revoked=sum(1 for e in lines if e["event"] == "revoked" and e["partitions"]),
        commits_in_callback=sum(1 for e in in_callback if e["event"] == "commit"),
        failed_in_callback=[e["error"] for e in in_callback if e["event"] == "commit_failed"],
        lost=sum(1 for e in lines if e["event"] == "lost" and e["partitions"]),
    )
