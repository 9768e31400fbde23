"""The frame of a group scenario with member processes (``_network_run``): a topic, a steady producer,
members ``m0``, ``m1``, ... in their own processes, a watch over their lines; at the end a drain, every
process stopped and every consumer's history judged with the broker's own word on the commits. A scenario
drives the faults between ``start`` and ``finish``."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..history import CheckResult, check, load
from ._processes import MemberProcess, Watch, stop_all
from ._produce import Producer, create_topic, produced_file, produced_ranges, unacknowledged
from ._rereads import reread_bound

__all__ = ["GroupRun", "committed_offsets"]


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[tuple[str, int], int]:
    """What the broker holds for ``group`` after the run, asked by a peer (confluent-kafka): (topic,
    partition) -> offset, for the partitions with a committed offset."""
    from confluent_kafka import Consumer, TopicPartition

    peer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = peer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        peer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in got if tp.offset >= 0}


class GroupRun:
    """``start()`` creates the topic, starts producing ``rate`` records/s and ``members`` members (options:
    ``_member_process``'s, e.g. ``strategy``, ``session_timeout_ms``) and waits until all own partitions;
    ``bounce(slot)`` stops a member cleanly and starts its replacement under the same name; ``settle()``
    waits until every live member owns partitions again (``static``: each member a static one, its name its
    ``group_instance_id``; ``client``: whose member each slot runs, ``fsm`` or ``librdkafka``, one for all
    or one per slot in turn); ``finish()`` stops producing, drains, stops
    everyone and checks. ``bootstrap`` is the members' (a proxy's, say); ``direct`` (default the same)
    is where the topic is created, the records produced and the broker's word read. ``keys``: the records
    carry that many keys (rule K has lanes to check); ``limit``: the producer stops after that many.
    ``kill(slot)`` is ``bounce`` with SIGKILL: no leave, no last commit."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        out_dir: Path,
        *,
        members: int = 3,
        rate: float = 300.0,
        group: str | None = None,
        direct: str | None = None,
        static: bool = False,
        client: str | Sequence[str] = "fsm",
        log: Callable[[str], None] | None = None,
        keys: int | None = None,
        limit: int | None = None,
        **options: Any,
    ) -> None:
        self.bootstrap, self.direct = bootstrap, direct or bootstrap
        self.topic, self.partitions, self.out = topic, partitions, out_dir
        self.members, self.static = members, static
        self.group = group or f"g-{topic}"
        self.options = options
        # whose member each slot runs (``_processes.MODULES``): one client for all, or one per slot in turn
        # (a mixed group: this library's members beside librdkafka's)
        self.clients = (client,) if isinstance(client, str) else tuple(client)
        self.say = log or (lambda _: None)
        self.producer = Producer(self.direct, topic, rate, limit=limit, keys=keys)
        self.procs: list[MemberProcess] = []
        self.slots: list[MemberProcess] = []
        self.watch = Watch([], partitions)
        self.began = time.monotonic()
        self.context: dict[str, Any] = dict(
            members=members, partitions=partitions, group=self.group, static=static, client=client, **options
        )

    def _start(self, slot: int) -> MemberProcess:
        name = f"m{slot}"
        restarts = sum(1 for p in self.procs if p.name == name)
        p = MemberProcess(
            self.bootstrap,
            self.group,
            self.topic,
            name,
            self.out,
            stem=f"{name}-r{restarts}" if restarts else name,
            instance_id=name if self.static else None,
            client=self.clients[slot % len(self.clients)],
            **self.options,
        )
        self.procs.append(p)
        self.watch.add(p)
        return p

    def start(self, assign_timeout_s: float = 60.0, *, create: bool = True) -> None:
        """The topic (unless ``create`` is False: it exists), the producer, the members; then until every
        member owns partitions (a RuntimeError after ``assign_timeout_s``)."""
        self.out.mkdir(parents=True, exist_ok=True)
        if create:
            create_topic(self.direct, self.topic, self.partitions)
        self.producer.start()
        self.slots = [self._start(i) for i in range(self.members)]
        self.settle(assign_timeout_s, "every member to own partitions")
        self.say(f"all assigned: {self.watch.describe()}")

    def settle(self, timeout_s: float = 60.0, what: str | None = "the group to settle") -> bool:
        """Until every live member owns partitions and together they own them all (False on timeout
        without ``what``; with it, a RuntimeError)."""
        return self.watch.wait(lambda: self.watch.all_assigned(self.partitions), timeout_s, what)

    def bounce(self, slot: int, timeout_s: float = 20.0) -> MemberProcess:
        """SIGTERM the member in ``slot`` (it closes its consumer: a clean leave), wait for its exit, start
        its replacement (same name, so the same client id and, for a static member, instance id)."""
        old = self.slots[slot]
        old.signal(signal.SIGTERM)
        old.proc.wait(timeout_s)
        return self._replace(slot, time.monotonic())

    def kill(self, slot: int) -> MemberProcess:
        """SIGKILL the member in ``slot`` (gone at once: no leave, no commit; its partitions wait for its
        session to end) and start its replacement as ``bounce`` does."""
        old = self.slots[slot]
        at = time.monotonic()
        old.signal(signal.SIGKILL)
        old.proc.wait(10)
        return self._replace(slot, at)

    def _replace(self, slot: int, gone_at: float) -> MemberProcess:
        self.watch.retire(self.slots[slot], gone_at * 1000)
        self.slots[slot] = self._start(slot)
        return self.slots[slot]

    def add(self) -> MemberProcess:
        """One more member (the next slot): the group rebalances to take it in."""
        p = self._start(len(self.slots))
        self.slots.append(p)
        self.members += 1
        return p

    def finish(
        self,
        *,
        drain_timeout_s: float = 30.0,
        before_check: Callable[[], None] | None = None,
        commit_log: Callable[[str], list[tuple[str, int, int]]] | None = None,
    ) -> CheckResult:
        """Stop producing, wait until every produced record was read (at most ``drain_timeout_s``), stop
        everyone, run ``before_check`` (clear a proxy's faults, say), read the broker's committed offsets
        and, given ``commit_log`` (Apache Kafka), its commit log, and check every history."""
        produced: dict[tuple[str, int], set[int]] = {}
        try:
            self.producer.stop()
            produced = self.producer.delivered()
            self.say(f"produced {sum(map(len, produced.values()))} records; draining")
            t = time.monotonic()
            drained = self.watch.wait(lambda: self.watch.read_all(produced), drain_timeout_s, None)
            self.context.update(drained=drained, drain_s=round(time.monotonic() - t, 1))
        finally:
            self.producer.stop()
            self.context["exit_codes"] = stop_all(self.procs)
            self.context["delivery_errors"] = self.producer.errors[:5]
            if before_check is not None:
                before_check()
        counts = produced_ranges(produced)
        held = committed_offsets(self.direct, self.group, self.topic, self.partitions)
        log = commit_log(self.group) if commit_log is not None else None
        history = load([p.history for p in self.procs])
        result = check(history, produced=counts, broker_commits=log, broker_committed=held)
        self.context.update(
            produced=sum(map(len, produced.values())),
            produced_counts=produced_file(counts),
            produced_unacknowledged=unacknowledged(produced),
            broker_committed={f"{t}-{p}": o for (t, p), o in sorted(held.items())},
            broker_commit_log_entries=None if log is None else len(log),
            rereads=result.summary["rereads"],
            reread_bound=reread_bound(history),
            seconds=round(time.monotonic() - self.began, 1),
        )
        result.summary["context"] = self.context
        return result

    def stop(self) -> None:
        """Everything down, whatever happened (a ``finally`` for a run that failed before ``finish``)."""
        self.producer.stop()
        stop_all(self.procs)
