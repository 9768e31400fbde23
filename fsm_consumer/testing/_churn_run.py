"""Issue 25's member churn: members of one group in their own processes while records flow; every few
seconds one member is killed with SIGKILL and a replacement started under the same name (client id) and,
for static membership, the same ``group_instance_id``; then stop producing, drain, stop everyone and
judge every consumer's history (the killed ones' too) with ``fsm_consumer.history``'s checker. Used by
tests/integration/group/test_group_churn.py (short) and tools/faults (long). Needs confluent-kafka (a
dev dependency) to create the topic and produce.

Modes (``MODES``): ``eager`` (range assignor), ``cooperative`` (cooperative-sticky), ``static``
(cooperative-sticky, each member a static one: ``group_instance_id`` = its name; not on Tansu 0.6, see
``UNSUPPORTED``), ``consumer`` (the consumer group protocol, KIP-848; Apache Kafka only) and ``parallel``
(cooperative-sticky, each member a ``ParallelConsumer`` with
``ordering="key"`` over its consumer; the records have ``keys`` keys, so rule K has lanes to check).
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..history import CheckResult
from ._group_run import GroupRun

__all__ = ["MODES", "UNSUPPORTED", "Mode", "run"]


@dataclass(frozen=True)
class Mode:
    strategy: str
    static: bool = False
    parallel: bool = False


MODES: dict[str, Mode] = {
    "eager": Mode("range"),
    "cooperative": Mode("cooperative-sticky"),
    "static": Mode("cooperative-sticky", static=True),
    "parallel": Mode("cooperative-sticky", parallel=True),
    "consumer": Mode("consumer"),  # the consumer group protocol (KIP-848): the broker assigns
}


#: (broker kind, mode) -> why the scenario cannot be judged there: a broker's limit, not the client's
UNSUPPORTED: dict[tuple[str, str], str] = {
    ("tansu", "consumer"): "Tansu 0.6 has no consumer group protocol (KIP-848: no ConsumerGroupHeartbeat API)",
    ("tansu", "static"): (
        "Tansu 0.6 hands a static member's replacement its predecessor's member id, and takes it back only if "
        "its JoinGroup metadata is byte for byte its predecessor's last: a cooperative-sticky subscription "
        "carries the owned partitions and the generation, so after any rebalance it differs, the group goes "
        "to Forming without a new generation, the others never rejoin, and the replacement's SyncGroup is held "
        "and fails, again and again (its partitions are never read again); and three static members with a "
        "3 s session never settle at all, librdkafka's neither"
    ),
}


def run(
    bootstrap: str,
    topic: str,
    partitions: int,
    mode: str,
    duration_s: float,
    kill_every_s: float,
    out_dir: str | os.PathLike[str],
    produce_rate: float,
    members: int = 3,
    *,
    session_timeout_ms: int = 3000,
    heartbeat_interval_ms: int | None = None,
    workers: int = 4,
    handler_sleep_ms: float = 2.0,
    keys: int = 64,
    group: str | None = None,
    assign_timeout_s: float = 60.0,
    recovery_timeout_s: float | None = None,
    drain_timeout_s: float = 30.0,
    create_topic: bool = True,
    commit_log: Callable[[str], list[tuple[str, int, int]]] | None = None,
    log: Callable[[str], None] | None = None,
    client: str = "fsm",
) -> CheckResult:
    """Create ``topic`` (``partitions``), produce ``produce_rate`` keyed records/s, start ``members``
    member processes (``m0``, ``m1``, ...) and once all own partitions, for ``duration_s``: every
    ``kill_every_s`` seconds (counted from the last kill, and once the group has settled again: every
    live member owning partitions, every partition owned) kill the next member in turn with SIGKILL and
    start its replacement at once (same name; its files ``mN-rK.*``). Then wait for the last kill's
    recovery (at most ``recovery_timeout_s``, default 4 sessions), stop producing, wait (at most
    ``drain_timeout_s``) until every produced record was read, stop everyone and check every member's
    history. ``commit_log(group)``: the broker's own commit log for rule C (Apache Kafka).

    ``result.summary["context"]`` holds ``kills`` (how many), ``kill_log`` (each: the victim, when, what
    it owned, whether it led the group, its replacement, ``recovered_s`` (from the kill to when live
    members owned every partition again, from the members' own lines), ``taken_over_by`` (partition ->
    its owners then)), ``replacements`` (started) and ``replacements_owning`` (of those, ones that came to
    own partitions), ``recovery_s`` (every kill's), ``produced``, ``produced_counts`` (for
    ``check-history --produced``), ``drained``, ``rereads`` and ``reread_bound`` (``_rereads``), the exit
    codes and the settings."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    how = MODES[mode]
    say = log or (lambda _: None)
    group_run = GroupRun(
        bootstrap,
        topic,
        partitions,
        Path(out_dir),
        members=members,
        rate=produce_rate,
        group=group or f"churn-{topic}",
        static=how.static,
        client=client,
        log=say,
        keys=keys,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
        strategy=how.strategy,
        parallel=workers if how.parallel else None,
        handler_sleep_ms=handler_sleep_ms if how.parallel else None,
    )
    watch = group_run.watch
    kills: list[dict[str, Any]] = []
    began = time.monotonic()

    def note() -> bool:
        """Every kill's recovery, once it came; True when all have recovered."""
        times = [t for t, _ in watch.wholes]
        for k in kills:
            if k["recovered_s"] is None:
                n = bisect.bisect_left(times, k["t_ms"])
                if n < len(times):
                    t, owners = watch.wholes[n]
                    k["recovered_s"] = round((t - k["t_ms"]) / 1000, 2)
                    k["taken_over_by"] = {part: owners.get(part, []) for part in k["owned"]}
        return all(k["recovered_s"] is not None for k in kills)

    def tracking() -> bool:  # a wait that only follows the members (and notes recoveries) until it times out
        note()
        return False

    try:
        say(f"{members} members ({mode}: {how}) starting in group {group_run.group!r}")
        group_run.start(assign_timeout_s, create=create_topic)
        deadline = time.monotonic() + duration_s
        next_kill = time.monotonic() + kill_every_s
        while True:
            watch.wait(tracking, max(0.0, min(next_kill, deadline) - time.monotonic()), None)
            # settled (the last kill recovered, every live member owning partitions) while time is left
            if time.monotonic() >= deadline or not watch.wait(
                lambda: note() and watch.all_assigned(partitions), deadline - time.monotonic(), None
            ):
                break
            slot = len(kills) % members
            victim = group_run.slots[slot]
            leader = watch.leader.get(victim.key, False)
            owned = sorted(part for _, part in watch.owned[victim.key])
            t_kill = time.monotonic()
            replacement = group_run.kill(slot)
            kill: dict[str, Any] = dict(
                slot=slot,
                victim=victim.key,
                at_s=round(t_kill - began, 2),
                t_ms=round(t_kill * 1000, 3),
                owned=owned,
                leader=leader,
                replacement=replacement.key,
                recovered_s=0.0 if watch.whole_since is not None else None,  # it owned nothing another did not
                taken_over_by=None,
            )
            kills.append(kill)
            what = f"owning {owned}" + (", the leader" if leader else "")
            say(f"killed {victim.key} (#{len(kills)}, {what}); started {replacement.key}: {watch.describe()}")
            next_kill = t_kill + kill_every_s
        recovery_timeout_s = recovery_timeout_s or max(10.0, 4 * session_timeout_ms / 1000)
        recovered = watch.wait(note, recovery_timeout_s, None)
        say(f"churn over after {len(kills)} kills; recovered: {recovered}: {watch.describe()}")
        result = group_run.finish(drain_timeout_s=drain_timeout_s, commit_log=commit_log)
    finally:
        group_run.stop()
    for k in kills:
        k.pop("t_ms")
    result.summary["context"].update(
        mode=mode,
        strategy=how.strategy,
        parallel=how.parallel,
        kills=len(kills),
        kills_owning=sum(1 for k in kills if k["owned"]),
        replacements=len(kills),
        replacements_owning=sum(1 for k in kills if k["replacement"] in watch.ever_owned),
        recovery_s=[k["recovered_s"] for k in kills],
        kill_log=kills,
        kill_every_s=kill_every_s,
    )
    return result
