"""Issue 25's broker crashes: members of one group in their own processes while records flow; the broker is
killed with SIGKILL ``kills`` times and started again on the same port and data (Tansu on its S3 storage,
Apache Kafka with its log directory), each time once the group has settled. Then every consumer's history is
judged (L E D M C, with the broker's word on the commits): nothing acknowledged by the broker lost, no
partition read by two members at once, no commit backwards or falsely acknowledged across the crashes. Used
by tests/integration/group/test_group_broker_kill.py and tools/faults."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..broker._admin import LoopbackBroker
from ..history import CheckResult
from ._group_run import GroupRun

__all__ = ["run"]


def run(
    broker: LoopbackBroker,
    topic: str,
    partitions: int,
    out_dir: str | Path,
    *,
    kills: int = 5,
    every_s: float = 5.0,
    down_s: float = 1.0,
    members: int = 3,
    rate: float = 300.0,
    session_timeout_ms: int = 10_000,
    settle_timeout_s: float = 90.0,
    commit_log: Callable[[str], list[tuple[str, int, int]]] | None = None,
    log: Callable[[str], None] | None = None,
    client: str | Sequence[str] = "fsm",
) -> CheckResult:
    """``broker`` must keep its data over ``kill()``/``start()`` (Tansu: ``storage="s3"``). Every ``every_s``
    (once the group has settled again) the broker is killed, left down ``down_s``, started again.
    ``result.summary["context"]["crashes"]``: each crash's restart time and how long until the group owned
    every partition again and records flowed."""
    say = log or (lambda _: None)
    group = GroupRun(
        broker.bootstrap_servers,
        topic,
        partitions,
        Path(out_dir),
        client=client,
        members=members,
        rate=rate,
        log=say,
        strategy="cooperative-sticky",
        # a crash and restart take a few seconds: a session that outlives it keeps the members in the group
        session_timeout_ms=session_timeout_ms,
        request_timeout_ms=5000,
    )
    crashes: list[dict[str, Any]] = []
    try:
        group.start()
        for n in range(kills):
            time.sleep(every_s)
            read_before = sum(map(len, group.watch.read.values()))
            t = time.monotonic()
            broker.kill()
            time.sleep(down_s)
            broker.start()
            t_up = time.monotonic()

            def flowing(before: int = read_before) -> bool:  # the group whole again, and reading
                return group.watch.all_assigned(partitions) and sum(map(len, group.watch.read.values())) > before

            recovered = group.watch.wait(flowing, settle_timeout_s, None)
            crashes.append(
                dict(
                    restart_s=round(t_up - t, 2),
                    recovered_s=round(time.monotonic() - t, 2) if recovered else None,
                )
            )
            say(f"crash {n + 1}: {crashes[-1]}: {group.watch.describe()}")
        result = group.finish(commit_log=commit_log, drain_timeout_s=60.0)
    finally:
        group.stop()
    result.summary["context"].update(crashes=crashes, recovery_s=[c["recovered_s"] for c in crashes])
    return result
