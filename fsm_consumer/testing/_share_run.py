"""Members of one share group (KIP-932, Apache Kafka 4.2) in their own processes, several on each partition,
while records flow, faults dealt to them; then the history checker's share rules (H N A S, docs/histories.md)
over the histories their consumers wrote. Used by tools/faults (scenario ``share``).

Modes (``MODES``):
  kill    a member killed with SIGKILL every ``every_s`` and replaced: the broker releases what it held when
          its connection drops, the others have those records counting up;
  freeze  each member in turn frozen with SIGSTOP for ``freeze_s`` (longer than the record lock): its locks run
          out, its records go to the others, its late acknowledgements are reported failed when it thaws;
  restart the broker stopped and started again on its data (``restart``, a broker of the run's own): every
          share session ends with its connection, what the members held is theirs no more.
Explicit members release every 7th record at its first delivery and reject every 31st, so redeliveries and
rejections happen whatever the faults. Needs confluent-kafka (a dev dependency) to create the topic and produce.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..history import CheckResult, check, load
from ._processes import MemberProcess, stop_all
from ._produce import Producer, create_topic, produced_file, produced_ranges

__all__ = ["MODES", "UNSUPPORTED", "run"]

MODES = ("kill", "freeze", "restart")
UNSUPPORTED = {("tansu", m): "Tansu 0.6 has no share groups (KIP-932): Apache Kafka 4.2+ only" for m in MODES}
RELEASE_EVERY, REJECT_EVERY = 7, 31


def _settled(procs: list[MemberProcess]) -> set[tuple[int, int]]:
    """(partition, offset) of every record a member's broker-confirmed ACCEPT or REJECT settled."""
    out: set[tuple[int, int]] = set()
    for p in procs:
        try:
            text = p.out.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            try:
                e = json.loads(line)
            except ValueError:  # a killed member's torn last line
                continue
            if e.get("event") == "settled":
                out.update((e["partition"], o) for o in e["offsets"])
    return out


def broker_settled(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """Per partition, the offset below which the broker holds every record of ``group`` settled: the end when
    it counts no lag, else its share-partition start offset (which may lag a state write: lower, never higher)."""
    from ..share import ShareGroupAdmin

    with ShareGroupAdmin(bootstrap) as admin:
        offsets = admin.describe_offsets(group)
    out = {}
    for tp, o in offsets.items():
        if o.lag == 0 and o.end_offset is not None:
            out[(tp.topic, tp.partition)] = o.end_offset
        elif o.start_offset is not None:
            out[(tp.topic, tp.partition)] = o.start_offset
    return out


def run(
    bootstrap: str,
    group: str,
    partitions: int,
    mode: str,
    out_dir: str | os.PathLike,
    *,
    members: int = 4,
    duration_s: float = 30.0,
    every_s: float = 4.0,
    rate: float = 200.0,
    lock_ms: int = 2000,
    freeze_s: float | None = None,
    drain_timeout_s: float = 60.0,
    restart: Callable[[], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> CheckResult:
    """Create a topic of ``partitions`` and the group (lock ``lock_ms``, reading from the earliest), produce
    ``rate`` records/s for ``duration_s`` while ``members`` explicit members read and ``mode``'s fault strikes
    every ``every_s``; then stop producing, wait (at most ``drain_timeout_s``) until every record produced is
    settled, stop the members and check their histories."""
    from ..share._admin import set_group_config

    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is none of {', '.join(MODES)}")
    if mode == "restart" and restart is None:
        raise ValueError("mode 'restart' needs restart=, the broker's restart (a broker of the run's own)")
    say = log or (lambda _: None)
    out = Path(out_dir)
    topic = f"{group}-t"
    freeze_s = freeze_s if freeze_s is not None else 2.5 * lock_ms / 1000
    create_topic(bootstrap, topic, partitions)
    set_group_config(
        bootstrap, group, {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(lock_ms)}
    )
    options: dict[str, Any] = dict(
        client="share", mode="explicit", release_every=RELEASE_EVERY, reject_every=REJECT_EVERY, max_poll_records=20
    )
    procs = [MemberProcess(bootstrap, group, topic, f"s{i}", out, **options) for i in range(members)]
    everyone = list(procs)
    producer = Producer(bootstrap, topic, rate)
    faults = 0
    restarts: list[tuple[float, float]] = []  # (down from, up at) in the histories' clock (monotonic ms)
    try:
        producer.start()
        say(f"{members} share members on {partitions} partition(s) of {topic!r}, {mode} every {every_s:g} s")
        deadline = time.monotonic() + duration_s
        turn = 0
        while time.monotonic() + every_s < deadline:
            time.sleep(every_s)
            slot = turn % len(procs)
            turn += 1
            victim = procs[slot]
            if mode == "kill":
                victim.signal(signal.SIGKILL)
                victim.proc.wait(10)
                stem = f"{victim.name}-{uuid.uuid4().hex[:4]}"
                procs[slot] = MemberProcess(bootstrap, group, topic, victim.name, out, stem=stem, **options)
                everyone.append(procs[slot])
                say(f"killed {victim.key}, replaced by {stem}")
            elif mode == "restart":
                assert restart is not None
                t = time.monotonic()
                restart()
                restarts.append((t * 1000.0, time.monotonic() * 1000.0))
                say(f"broker restarted in {time.monotonic() - t:.1f} s")
            else:
                victim.signal(signal.SIGSTOP)
                say(f"froze {victim.key} for {freeze_s:g} s (its {lock_ms} ms locks run out)")
                time.sleep(freeze_s)
                victim.signal(signal.SIGCONT)
            faults += 1
        producer.stop()
        produced = producer.delivered()
        wanted = {(p, o) for (_, p), offsets in produced.items() for o in offsets}
        began = time.monotonic()
        ends = {tp: max(offsets) + 1 for tp, offsets in produced.items() if offsets}

        def done() -> bool:
            if wanted <= _settled(everyone):
                return True
            # records acknowledged by a member killed before it read the answer: settled, but only the broker knows
            held = broker_settled(bootstrap, group)
            return all(held.get(tp, -1) >= end for tp, end in ends.items())

        while not done() and time.monotonic() - began < drain_timeout_s:
            time.sleep(0.5)
        settled = _settled(everyone)
        word = broker_settled(bootstrap, group)
        drained = wanted <= settled or all(word.get(tp, -1) >= end for tp, end in ends.items())
        drain_s = round(time.monotonic() - began, 1)
        say(f"{len(wanted & settled)} of {len(wanted)} records settled by the members' word, the broker's: {word}")
    finally:
        producer.stop()
        codes = stop_all(everyone)
    files = [Path(p.history) for p in everyone if Path(p.history).exists()]
    ranges = produced_ranges(produced)
    result = check(load(files), produced=produced_file(ranges), share_settled=word, broker_restarts=restarts)
    history = (result.inputs or {}).get("history")
    redelivered = sum(
        last - first + 1
        for line in (history.events if history is not None else [])
        if line.get("event") == "share_handed"
        for first, last, count in line["records"]
        if count > 1
    )
    result.summary["context"] = dict(
        share=True,
        produced=len(wanted),
        produced_counts=produced_file(ranges),
        drained=drained,
        drain_s=drain_s,
        faults=faults,
        fault=mode,
        members_started=len(everyone),
        redeliveries=redelivered,
        exit_codes=codes,
        rereads=0,
        reread_bound=0,
    )
    return result
