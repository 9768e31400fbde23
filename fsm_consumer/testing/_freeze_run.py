"""Members of one cooperative-sticky group in their own processes while records flow, one of them frozen
(SIGSTOP) for twice the session timeout again and again; then the history checker (``fsm_consumer.history``,
rules L E D M C K) over the histories the members' consumers wrote (``history_path``). Used by
tests/integration/group/test_group_frozen_member.py (short) and tools/group-freeze-check (long). Needs
confluent-kafka (a dev dependency) to create the topic and produce.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from ..history import CheckResult, check, load

__all__ = ["run"]

_ROOT = Path(__file__).resolve().parent.parent.parent  # the directory holding the fsm_consumer package


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
) -> CheckResult:
    """Create ``topic``, produce ``produce_rate`` records/s, start ``members`` member processes, and once
    all own partitions: steady for ``freeze_every_s`` (and until member 0 owns partitions again), member 0
    frozen for ``freeze_s`` (2 x ``session_timeout_ms``), again while a freeze fits in ``duration_s``.
    With ``rotate``, every member in turn is frozen for ``freeze_s``, one freeze beginning every
    ``freeze_every_s`` whoever owns what, so two may be frozen at once when ``freeze_s`` is longer (issue
    23's scenario). ``records`` stops the producer after that many. Then stop producing, wait (at most
    ``drain_timeout_s``) until every produced record was read, stop the members and check their histories
    (files in ``out_dir``). The other options go to ``_member_process``."""
    say = log or (lambda _: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    group = group or f"freeze-{topic}"
    if create_topic:
        _create_topic(bootstrap, topic, partitions)
    producer = _Producer(bootstrap, topic, produce_rate, limit=records)
    procs: list[_MemberProcess] = []
    context: dict = {}
    try:
        producer.start()
        for i in range(members):
            procs.append(
                _MemberProcess(
                    bootstrap,
                    group,
                    topic,
                    f"m{i}",
                    out,
                    session_timeout_ms=session_timeout_ms,
                    heartbeat_interval_ms=heartbeat_interval_ms,
                    max_poll_records=max_poll_records,
                    request_timeout_ms=request_timeout_ms,
                    commit=commit,
                )
            )
        watch = _Watch(procs)
        say(f"{members} members started in group {group!r}; waiting for all to own partitions")
        watch.wait(lambda: watch.all_assigned(partitions), assign_timeout_s, "every member to own partitions")
        say(f"all assigned: {watch.describe()}")
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
            watch.wait(lambda: bool(watch.owned[victim.name]), max(0.0, left() - freeze_s), None)
            if left() < freeze_s:
                break
            owning = sorted(p for _, p in watch.owned[victim.name])
            victim.signal(signal.SIGSTOP)
            freezes += 1
            freezes_owning += bool(owning)
            say(f"froze {victim.name} (#{freezes}, owning {owning}) for {freeze_s:g} s")
            time.sleep(freeze_s)
            victim.signal(signal.SIGCONT)
            watch.update()
            say(f"thawed {victim.name}: {watch.describe()}")
        if records is not None:  # the rest of what was asked for, at the same rate
            producer.wait_sent(records / produce_rate + 30)
        producer.stop()
        produced = producer.delivered()
        say(f"produced {sum(map(len, produced.values()))} records; draining")
        started = time.monotonic()
        drained = watch.wait(lambda: watch.read_all(produced), drain_timeout_s, None)
        context.update(
            freezes=freezes,
            freezes_owning=freezes_owning,
            frozen_s_each=freeze_s,
            drained=drained,
            drain_s=round(time.monotonic() - started, 1),
            delivery_errors=producer.errors[:5],
        )
        say(f"drained: {drained} after {context['drain_s']} s: {watch.describe()}")
    finally:
        producer.stop()
        context["exit_codes"] = _stop_all(procs)
    # a plain producer's records of a new topic sit at offsets 0..n-1: rule L takes the counts
    counts = {tp: (max(offsets) + 1 if offsets else 0) for tp, offsets in produced.items()}
    broker_commits = commit_log(group) if commit_log is not None else None  # the broker's own word (Kafka)
    result = check(load([f"{p.out}.lib" for p in procs]), produced=counts, broker_commits=broker_commits)
    context.update(
        members=members,
        partitions=partitions,
        session_timeout_ms=session_timeout_ms,
        group=group,
        produced=sum(map(len, produced.values())),
        produced_not_contiguous=sum(counts[tp] - len(offsets) for tp, offsets in produced.items()),
        broker_commit_log_entries=None if broker_commits is None else len(broker_commits),
    )
    result.summary["context"] = context
    return result


def _create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 10.0) -> None:
    """Create ``topic`` (or accept that it exists) and wait until every partition has a leader."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
    try:
        future.result(timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic!r}: metadata shows {meta} after {timeout_s} s")
        time.sleep(0.05)


def _rotate(
    procs, watch: _Watch, freeze_s: float, every_s: float, left: Callable[[], float], say: Callable[[str], None]
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
                    held = sorted(p for _, p in watch.owned[procs[i].name])
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


class _Producer:
    """Produces small keyed records at a steady rate on its own thread (at most ``limit`` of them);
    remembers what was delivered."""

    def __init__(self, bootstrap: str, topic: str, rate: float, limit: int | None = None) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 30000})
        self._topic, self._rate, self._limit = topic, rate, limit
        self._delivered: dict[tuple[str, int], set[int]] = defaultdict(set)
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="freeze-run-producer", daemon=True)
        self._flushed = False
        self.sent = 0

    def start(self) -> None:
        self._thread.start()

    def _report(self, err, msg) -> None:  # librdkafka's delivery callback, inside poll()/flush()
        with self._lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                self._delivered[(msg.topic(), msg.partition())].add(msg.offset())

    def _loop(self) -> None:
        began, sent = time.monotonic(), 0
        while not self._stopping.is_set():
            due = int((time.monotonic() - began) * self._rate)
            if self._limit is not None:
                due = min(due, self._limit)
            while sent < due:
                try:
                    self._producer.produce(
                        self._topic, key=b"k%d" % sent, value=b"v%d" % sent, on_delivery=self._report
                    )
                except BufferError:  # the local queue is full: let deliveries drain it
                    break
                sent += 1
            self.sent = sent
            self._producer.poll(0)
            time.sleep(0.01)

    def wait_sent(self, timeout_s: float) -> None:
        """Until the ``limit`` records were handed to the producer (bounded)."""
        deadline = time.monotonic() + timeout_s
        while self.sent < (self._limit or 0) and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop producing and wait for outstanding deliveries. Idempotent."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(5)
        if not self._flushed and not self._thread.is_alive():
            self._flushed = True
            left = self._producer.flush(15)
            if left:
                self.errors.append(f"{left} records still undelivered after 15 s")

    def delivered(self) -> dict[tuple[str, int], set[int]]:
        with self._lock:
            return {tp: set(offsets) for tp, offsets in self._delivered.items()}


class _MemberProcess:
    """``python -m fsm_consumer.testing._member_process`` in its own process group (signals reach only it)."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, out_dir: Path, **options) -> None:
        self.name = name
        self.out = out_dir / f"{name}.jsonl"
        for stale in (self.out, Path(f"{self.out}.lib")):  # histories append: a rerun must start empty
            stale.unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "fsm_consumer.testing._member_process",
            "--bootstrap",
            bootstrap,
            "--group",
            group,
            "--topic",
            topic,
            "--name",
            name,
            "--out",
            str(self.out),
        ]
        for key, value in options.items():
            if value is not None:
                argv += [f"--{key.replace('_', '-')}", str(value)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))}
        self._stderr = open(out_dir / f"{name}.stderr", "w")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr, env=env, process_group=0
        )

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:  # it already exited
            pass

    def stderr_tail(self, n: int = 5) -> str:
        self._stderr.flush()
        lines = Path(self._stderr.name).read_text(errors="replace").splitlines()
        return " | ".join(lines[-n:])

    def close_log(self) -> None:
        self._stderr.close()


def _stop_all(procs: list[_MemberProcess], grace_s: float = 10.0) -> dict[str, int | None]:
    """SIGCONT (a stopped process would not act on SIGTERM), SIGTERM, wait, SIGKILL what is left."""
    for p in procs:
        p.signal(signal.SIGCONT)
        p.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    codes: dict[str, int | None] = {}
    for p in procs:
        try:
            codes[p.name] = p.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.signal(signal.SIGKILL)
            codes[p.name] = p.proc.wait(5)
        p.close_log()
    return codes


class _Watch:
    """Follows the members' history files as they grow: who owns what, which offsets were read."""

    def __init__(self, procs: list[_MemberProcess]) -> None:
        self._procs = procs
        self._pos = {p.name: 0 for p in procs}
        self.owned: dict[str, set[tuple[str, int]]] = {p.name: set() for p in procs}
        self.read: dict[tuple[str, int], set[int]] = defaultdict(set)

    def update(self) -> None:
        for p in self._procs:
            if not p.out.exists():
                continue
            with open(p.out, encoding="utf-8") as f:
                f.seek(self._pos[p.name])
                chunk = f.read()
            complete = chunk[: chunk.rfind("\n") + 1]  # a half-written last line waits for the next update
            self._pos[p.name] += len(complete.encode("utf-8"))
            for line in complete.splitlines():
                e = json.loads(line)
                kind = e["event"]
                if kind == "assigned":
                    self.owned[p.name].update(tuple(tp) for tp in e["partitions"])
                elif kind in ("revoked", "lost"):
                    self.owned[p.name].difference_update(tuple(tp) for tp in e["partitions"])
                elif kind == "read":
                    first, last = e["offsets"]
                    self.read[tuple(e["tp"])].update(range(first, last + 1))

    def all_assigned(self, partitions: int) -> bool:
        owned = list(self.owned.values())
        return all(owned) and len(set().union(*owned)) == partitions

    def read_all(self, produced: dict[tuple[str, int], set[int]]) -> bool:
        return all(offsets <= self.read[tp] for tp, offsets in produced.items())

    def describe(self) -> str:
        return "; ".join(f"{name} owns {sorted(p for _, p in owned)}" for name, owned in self.owned.items())

    def wait(self, predicate: Callable[[], bool], timeout_s: float, what: str | None) -> bool:
        """Poll the files until ``predicate``; on timeout raise naming ``what`` (or return False if None)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.update()
            if predicate():
                return True
            dead = [p for p in self._procs if p.proc.poll() is not None]
            if time.monotonic() > deadline or (dead and what is not None):
                if what is None:
                    return False
                why = "a member exited" if dead else f"timed out after {timeout_s} s"
                raise RuntimeError(
                    f"{why} waiting for {what}: {self.describe()}; "
                    + "; ".join(f"{p.name} exit {p.proc.poll()} stderr: {p.stderr_tail()}" for p in self._procs)
                )
            time.sleep(0.1)
