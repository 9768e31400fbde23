"""Members of one cooperative-sticky group in their own processes while records flow, one of them frozen
(SIGSTOP) for twice the session timeout again and again; then the history checker (``fsm_consumer.history``,
rules L E D M C K) over the histories the members' consumers wrote (``history_path``). Used by
tests/integration/group/test_group_frozen_member.py (short) and tools/group-freeze-check (long). Needs
confluent-kafka (a dev dependency) to create the topic and produce.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from ..history import CheckResult
from ._group_run import GroupRun
from ._processes import Watch

__all__ = ["run"]


def run(
    bootstrap: str,
    topic: str,
    partitions: int,
    duration_s: float,
    session_timeout_ms: int,
    freeze_every_s: float,
    out_dir: str | os.PathLike,
    produce_rate: float,
    members: int = 3,
    *,
    heartbeat_interval_ms: int | None = None,
    max_poll_records: int | None = None,
    request_timeout_ms: int | None = None,
    commit: str = "every-poll",
    group: str | None = None,
    assign_timeout_s: float = 60.0,
    drain_timeout_s: float = 20.0,
    rotate: bool = False,
    freeze_s: float | None = None,
    records: int | None = None,
    create_topic: bool = True,
    log: Callable[[str], None] | None = None,
    commit_log: Callable[[str], list[tuple[str, int, int]]] | None = None,
    client: str = "fsm",
    strategy: str = "cooperative-sticky",
) -> CheckResult:
    """Create ``topic``, produce ``produce_rate`` records/s, start ``members`` member processes, and once
    all own partitions: steady for ``freeze_every_s`` (and until member 0 owns partitions again), member 0
    frozen for ``freeze_s`` (2 x ``session_timeout_ms``), again while a freeze fits in ``duration_s``.
    With ``rotate``, every member in turn is frozen for ``freeze_s``, one freeze beginning every
    ``freeze_every_s`` whoever owns what, so two may be frozen at once when ``freeze_s`` is longer (issue
    23's scenario). ``records`` stops the producer after that many. Then stop producing, wait (at most
    ``drain_timeout_s``) until every produced record was read, stop the members and check their histories
    (files in ``out_dir``). ``strategy="consumer"``: the members speak KIP-848 (Apache Kafka only), whose
    session the broker owns: ``session_timeout_ms`` (and ``heartbeat_interval_ms``, default a tenth of it) are
    set on the group (consumer.session.timeout.ms, consumer.heartbeat.interval.ms) before it forms. The other
    options go to ``_member_process``."""
    say = log or (lambda _: None)
    group = group or f"freeze-{topic}"
    if strategy == "consumer":
        interval = heartbeat_interval_ms or max(100, session_timeout_ms // 10)
        set_group_session(bootstrap, group, session_timeout_ms, interval)
    group_run = GroupRun(
        bootstrap,
        topic,
        partitions,
        Path(out_dir),
        members=members,
        rate=produce_rate,
        group=group,
        client=client,
        log=say,
        limit=records,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
        max_poll_records=max_poll_records,
        request_timeout_ms=request_timeout_ms,
        commit=commit,
        strategy=strategy,
    )
    watch = group_run.watch
    try:
        say(f"{members} members starting in group {group!r}")
        group_run.start(assign_timeout_s, create=create_topic)
        procs = group_run.slots
        freeze_s = freeze_s if freeze_s is not None else 2 * session_timeout_ms / 1000
        victim = procs[0]
        deadline = time.monotonic() + duration_s
        left = lambda: deadline - time.monotonic()  # noqa: E731
        freezes = freezes_owning = 0
        if rotate:
            freezes, freezes_owning = _rotate(procs, watch, freeze_s, freeze_every_s, left, say)
        while not rotate:  # member 0 only
            # steady for freeze_every_s, then until the victim owns partitions again (freezing a member
            # that owns nothing proves nothing), while a whole freeze still fits in the duration
            time.sleep(max(0.0, min(freeze_every_s, left())))
            watch.wait(lambda: bool(watch.owned[victim.key]), max(0.0, left() - freeze_s), None)
            if left() < freeze_s:
                break
            owning = sorted(p for _, p in watch.owned[victim.key])
            victim.signal(signal.SIGSTOP)
            freezes += 1
            freezes_owning += bool(owning)
            say(f"froze {victim.name} (#{freezes}, owning {owning}) for {freeze_s:g} s")
            time.sleep(freeze_s)
            victim.signal(signal.SIGCONT)
            watch.update()
            say(f"thawed {victim.name}: {watch.describe()}")
        if records is not None:  # the rest of what was asked for, at the same rate
            group_run.producer.wait_sent(records / produce_rate + 30)
        result = group_run.finish(drain_timeout_s=drain_timeout_s, commit_log=commit_log)
    finally:
        group_run.stop()
    result.summary["context"].update(freezes=freezes, freezes_owning=freezes_owning, frozen_s_each=freeze_s)
    return result


def _rotate(
    procs, watch: Watch, freeze_s: float, every_s: float, left: Callable[[], float], say: Callable[[str], None]
) -> tuple[int, int]:
    """Freeze each member in turn for ``freeze_s``, one freeze starting every ``every_s``, while a whole
    freeze fits in the time ``left()``; thaw each on time. Returns (freezes, freezes of an owner)."""
    thaw_at: dict[int, float] = {}
    freezes = owning = 0
    turn = 0
    next_at = time.monotonic() + every_s
    try:
        while thaw_at or left() >= freeze_s:
            now = time.monotonic()
            for i, at in list(thaw_at.items()):
                if now >= at:
                    procs[i].signal(signal.SIGCONT)
                    del thaw_at[i]
                    watch.update()
                    say(f"thawed {procs[i].name}: {watch.describe()}")
            if now >= next_at and left() >= freeze_s:
                i = turn % len(procs)
                turn += 1
                next_at += every_s
                if i not in thaw_at and len(thaw_at) < len(procs) - 1:  # someone stays awake
                    watch.update()
                    held = sorted(p for _, p in watch.owned[procs[i].key])
                    procs[i].signal(signal.SIGSTOP)
                    thaw_at[i] = now + freeze_s
                    freezes += 1
                    owning += bool(held)
                    say(
                        f"froze {procs[i].name} (#{freezes}, owning {held}) for {freeze_s:g} s; frozen now: "
                        f"{sorted(procs[j].name for j in thaw_at)}"
                    )
            time.sleep(0.05)
    finally:
        for i in thaw_at:
            procs[i].signal(signal.SIGCONT)
    return freezes, owning


def set_group_session(bootstrap: str, group: str, session_ms: int, heartbeat_ms: int) -> None:
    """The consumer protocol's session and heartbeat interval of one group (Apache Kafka 4.0+ group configs,
    within the broker's group.consumer.min/max bounds), set before its first member joins."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    settings = {"consumer.session.timeout.ms": str(session_ms), "consumer.heartbeat.interval.ms": str(heartbeat_ms)}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, configs=settings)])
    finally:
        admin.close()
