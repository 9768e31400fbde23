"""Commits under faults while partitions change hands: members of one group in their own processes while records
flow, their OffsetCommits held back (past the request timeout: lost), answered with retriable errors after the
broker applied them (``_member_process --commit-faults``), while members are bounced in turn (each clean close
revokes and commits, each join moves partitions). The commits are the library's auto-commit (``auto``), or
``commit_async()`` after every poll beside it (``async``); under the classic protocol (cooperative-sticky) or
the consumer protocol (``consumer-auto``, ``consumer-async``: KIP-848, Apache Kafka only). What it would find
is a partition released before its commit landed (a new owner reading below it, the group's offset moving
back) and a retried commit overtaking a newer one. Every consumer's history is judged (L E D M C)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from ..history import CheckResult
from ._group_run import GroupRun

__all__ = ["MODES", "UNSUPPORTED", "run"]

MODES = ("auto", "async", "consumer-auto", "consumer-async")

#: (broker kind, mode) -> why the scenario cannot be judged there
UNSUPPORTED: dict[tuple[str, str], str] = {
    ("tansu", "consumer-auto"): "Tansu 0.6 has no consumer group protocol (KIP-848)",
    ("tansu", "consumer-async"): "Tansu 0.6 has no consumer group protocol (KIP-848)",
}


def run(
    bootstrap: str,
    topic: str,
    partitions: int,
    mode: str,
    out_dir: str | Path,
    *,
    duration_s: float = 30.0,
    bounce_every_s: float = 4.0,
    min_bounces: int = 2,
    members: int = 3,
    rate: float = 300.0,
    session_timeout_ms: int = 6000,
    settle_timeout_s: float = 60.0,
    commit_log: Callable[[str], list[tuple[str, int, int]]] | None = None,
    log: Callable[[str], None] | None = None,
    client: str | Sequence[str] = "fsm",
) -> CheckResult:
    """For ``duration_s``, every ``bounce_every_s`` (once the group has settled), bounce the next member; at
    least ``min_bounces`` times, however long a slow rebalance keeps the group from settling (a loaded machine
    once let one settle take the whole duration, and the run moved no partition a second time)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    say = log or (lambda _: None)
    consumer_protocol = mode.startswith("consumer")
    group = GroupRun(
        bootstrap,
        topic,
        partitions,
        Path(out_dir),
        client=client,
        members=members,
        rate=rate,
        log=say,
        strategy="consumer" if consumer_protocol else "cooperative-sticky",
        session_timeout_ms=session_timeout_ms,
        commit=mode.removeprefix("consumer-"),
        commit_faults="on",
        auto_commit_interval_ms=300,
        request_timeout_ms=2000,
    )
    group.context.update(mode=mode, bounce_every_s=bounce_every_s)
    bounces = 0
    try:
        group.start()
        end = time.monotonic() + duration_s
        while bounces < min_bounces or time.monotonic() < end:
            time.sleep(bounce_every_s)
            new = group.bounce(bounces % members)
            bounces += 1
            if not group.settle(settle_timeout_s, None):
                say(f"the group did not settle within {settle_timeout_s:.0f} s")
            say(f"bounced {new.name} (#{bounces}): {group.watch.describe()}")
        result = group.finish(commit_log=commit_log)
    finally:
        group.stop()
    result.summary["context"].update(
        members_bounced=bounces, commit_faults=dict(sorted(_faults(Path(out_dir)).items()))
    )
    return result


def _faults(out_dir: Path) -> Counter[str]:
    """The commit faults the member processes switched on, by kind, from their histories' "commit_fault" lines."""
    kinds: Counter[str] = Counter()
    for path in out_dir.glob("m*.jsonl"):
        for raw in path.read_text().splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # a line torn by a kill is the checker's business
            if line.get("event") == "commit_fault":
                kinds[line.get("kind", "?")] += 1
    return kinds
