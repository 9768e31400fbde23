"""Issue 25's network faults, through a ``FaultProxy`` the broker advertises (every connection of the
members goes through it): members of one group in their own processes while records flow, then

* ``resets``: round after round, connections reset in the middle of a frame (the request's: the broker
  never sees it whole; the answer's: the broker acted and the member cannot know) of OffsetCommit, Fetch,
  JoinGroup and SyncGroup (a clean bounce of one member makes the group rebalance so that they are sent)
  and Heartbeat, and a stretch of latency on every member's answers. Never a false commit success: every
  acknowledged commit is in the broker's commit log (Apache Kafka) and none is above what the broker holds
  in the end (rule C's broker checks).
* ``blackhole``: one member's traffic swallowed both ways for longer than its session, then let through
  again: it must lose its partitions (lost, not revoked: it cannot reach the group to give them back), the
  others take them over, nothing it commits after its session ran out is acknowledged, and it rejoins.

Then every consumer's history is judged (L E D M C K). Used by tests/integration/group/test_group_network.py
(short) and tools/faults (long)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..history import CheckResult, load
from ._group_run import GroupRun
from ._proxy import FaultProxy

__all__ = ["MODES", "ROUNDS", "run"]

MODES = ("resets", "blackhole")

#: one round of ``resets``: (name, [(API, direction, times)], a bounce to make the group rebalance)
ROUNDS: list[tuple[str, list[tuple[str, str, int]], bool]] = [
    ("commit", [("OffsetCommit", "response", 2), ("OffsetCommit", "request", 1)], False),
    ("fetch", [("Fetch", "response", 2), ("Fetch", "request", 1)], False),
    (
        "rebalance",
        [
            ("JoinGroup", "response", 1),
            ("SyncGroup", "response", 1),
            ("JoinGroup", "request", 1),
            ("SyncGroup", "request", 1),
        ],
        True,
    ),
    ("heartbeat", [("Heartbeat", "response", 1)], False),
    ("latency", [], False),
]


def run(
    proxy: FaultProxy,
    direct: str,
    topic: str,
    partitions: int,
    mode: str,
    out_dir: str | Path,
    *,
    rounds: int = 5,
    members: int = 3,
    rate: float = 300.0,
    session_timeout_ms: int = 6000,
    latency_ms: float = 400.0,
    round_timeout_s: float = 20.0,
    commit_log: Callable[[str], list[tuple[str, int, int]]] | None = None,
    log: Callable[[str], None] | None = None,
    client: str | Sequence[str] = "fsm",
) -> CheckResult:
    """``proxy``: in front of the broker and advertised by it; ``direct``: the broker's own listener (topic,
    producer, the broker's word). ``rounds`` of ``ROUNDS`` in turn (``resets``), or one blackhole of
    ``m1`` for two sessions (``blackhole``). ``result.summary["context"]`` holds what was done: the resets
    carried out by API and direction, the rounds, the blackhole's times and what the member saw."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    say = log or (lambda _: None)
    group = GroupRun(
        proxy.bootstrap_servers,
        topic,
        partitions,
        Path(out_dir),
        client=client,
        members=members,
        rate=rate,
        direct=direct,
        log=say,
        strategy="cooperative-sticky",
        session_timeout_ms=session_timeout_ms,
        # a blackholed request is answered by nothing: a member gives up on it after this, not the default 30 s
        request_timeout_ms=5000,
    )
    group.context.update(mode=mode)
    try:
        group.start()
        if mode == "resets":
            _resets(group, proxy, rounds, latency_ms, round_timeout_s, say)
        else:
            _blackhole(group, proxy, session_timeout_ms, say)
        result = group.finish(before_check=proxy.clear, commit_log=commit_log)
    finally:
        proxy.clear()
        group.stop()
    done = Counter(f"{r.api} {r.direction}" for r in proxy.resets_done)
    result.summary["context"].update(resets_done=dict(sorted(done.items())), swallowed=dict(proxy.swallowed))
    if mode == "blackhole":
        result.summary["context"]["blackhole"].update(_victim_view(group, "m1"))
    return result


def _resets(
    group: GroupRun,
    proxy: FaultProxy,
    rounds: int,
    latency_ms: float,
    round_timeout_s: float,
    say: Callable[[str], None],
) -> None:
    log: list[dict[str, Any]] = []
    for n in range(rounds):
        name, resets, bounce = ROUNDS[n % len(ROUNDS)]
        before = len(proxy.resets_done)
        for api, direction, times in resets:
            proxy.reset(api, direction=direction, times=times)  # type: ignore[arg-type]
        began = time.monotonic()
        if bounce:
            group.bounce(n % group.members)
        if name == "latency":
            for slot in range(group.members):
                proxy.latency(latency_ms, client=f"m{slot}")
            time.sleep(round_timeout_s / 4)
        else:
            deadline = began + round_timeout_s
            while proxy.pending_resets() and time.monotonic() < deadline:
                group.watch.update()
                time.sleep(0.1)
        unfired = proxy.pending_resets()
        proxy.clear()
        settled = group.settle(60, None)
        entry = dict(
            round=name,
            resets=len(proxy.resets_done) - before,
            unfired=unfired,
            settled=settled,
            seconds=round(time.monotonic() - began, 1),
        )
        log.append(entry)
        say(f"round {n + 1} ({name}): {entry}: {group.watch.describe()}")
    group.context.update(rounds=log)


def _blackhole(group: GroupRun, proxy: FaultProxy, session_timeout_ms: int, say: Callable[[str], None]) -> None:
    victim = group.slots[1]
    owned = sorted(part for _, part in group.watch.owned[victim.key])
    t0 = time.monotonic()
    proxy.blackhole(victim.name)
    say(f"blackholed {victim.name} (owning {owned})")

    def others_own_all() -> bool:
        rest = [p for p in group.watch.live() if p is not victim]
        return len(set().union(*(group.watch.owned[p.key] for p in rest))) == group.partitions

    taken_over = group.watch.wait(others_own_all, 4 * session_timeout_ms / 1000 + 20, None)
    t_taken = time.monotonic()
    lost = group.watch.wait(lambda: not group.watch.owned[victim.key], 4 * session_timeout_ms / 1000 + 20, None)
    t_lost = time.monotonic()
    time.sleep(max(0.0, t0 + 2 * session_timeout_ms / 1000 - time.monotonic()))  # at least two sessions
    proxy.heal(victim.name)
    t_heal = time.monotonic()
    rejoined = group.settle(60, None)
    say(f"healed {victim.name}; taken over {taken_over}, lost {lost}, rejoined {rejoined}: {group.watch.describe()}")
    group.context["blackhole"] = dict(
        victim=victim.name,
        owned=owned,
        others_took_over_s=round(t_taken - t0, 2) if taken_over else None,
        victim_gave_up_s=round(t_lost - t0, 2) if lost else None,
        healed_at_s=round(t_heal - t0, 2),
        rejoined_s=round(time.monotonic() - t_heal, 2) if rejoined else None,
        t0_ms=round(t0 * 1000, 3),
        heal_ms=round(t_heal * 1000, 3),
    )


def _victim_view(group: GroupRun, name: str) -> dict[str, Any]:
    """From the victim's own history, over the blackhole: how it gave its partitions up (revoked or lost),
    and its commits acknowledged from one session after the blackhole began until it owned partitions again."""
    bh = group.context["blackhole"]
    proc = next(p for p in group.procs if p.name == name)
    events = load([proc.history]).events
    session_ms = float(group.options["session_timeout_ms"])
    t0, heal = bh.pop("t0_ms"), bh.pop("heal_ms")
    during = [e for e in events if t0 <= float(e["t"]) <= heal + 60_000]
    gave_up = [e["event"] for e in during if e["event"] in ("revoked", "lost") and e.get("partitions")]
    back = next(
        (float(e["t"]) for e in during if e["event"] == "assigned" and float(e["t"]) > heal and e.get("partitions")),
        None,
    )
    acked = [
        e
        for e in during
        if e["event"] == "commit"
        and not e.get("error")
        and float(e["t"]) >= t0 + session_ms
        and (back is None or float(e["t"]) < back)
    ]
    return dict(gave_up_by=gave_up[:1], commits_acknowledged_while_out=len(acked))
