"""tools/bench share: share groups (KIP-932) on Apache Kafka: N members on ONE partition, each in a process of its
own (tools/benchlib/share_member.py; tools/peers/JavaShareBench.java for Kafka's KafkaShareConsumer), against a
consumer group of N members on the same partition (only one of them can own it).

Drain: R records pre-produced (in batches of --batch-records: a batch-optimized acquisition takes whole batches)
in one transaction left open, on a fresh topic with a fresh group that reads committed records only; the members
start, subscribe and poll (Java's joins at its first poll, and a member's poll leaves a fetch wanting that acquires
whatever it can once assigned: with the records written but not committed there is nothing to take early, for any
client). Once the coordinator shows all N assigned, the benchmark commits the transaction: "go". The time is from
go until the members together have processed R distinct records (each member's progress lines carry its wall
clock at the end of a poll's work). Latency: the members ready, a producer at --rate for --seconds; per record,
the end of its work minus its CreateTime.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
CLIENTS = {
    "fsm": "fsm_consumer ShareConsumer",
    "java": "Java KafkaShareConsumer",
    "confluent": "confluent-kafka ShareConsumer",
    "group": "fsm_consumer Consumer (consumer group)",
}
GROUP_MODE = "-"  # the consumer group's rows: no acknowledgement mode
LOCK_MS = 30_000  # the group's record lock (Kafka's default; the test broker's is 5 s): never the limit here
READY_S = 180  # 16 JVMs start on 2 cores: tens of seconds
SETTLE_S = 1.0  # after the coordinator shows every member assigned: each opens its share session, its fetch waits
WARM_UP_DRAINS = 2  # a fresh broker's first drains run slower (its JIT): the second still ran a third slower
STOP_S = 20  # a member's close() (acknowledgements, leaving) before it is killed


def default_records(work_ms: int) -> int:
    """R: one member's run bounded to a few seconds of work."""
    return 20_000 if work_ms == 0 else max(1000, 4000 // work_ms)


def records_for(work_ms: int, args) -> int:
    if args.records:
        return args.records
    return default_records(work_ms) // (4 if args.quick else 1)


def default_max_poll(work_ms: int) -> int:
    """max_poll_records: the clients' default without work; with work, about 50 ms of it a poll (as one sizes
    polls to the members and the lock: 500 records of 10 ms each would keep 490 from the other members)."""
    return 500 if work_ms == 0 else max(10, 50 // work_ms)


class Tally:
    """The distinct offsets the members of a run processed, kept as their lines come (the benchmark only counts:
    it shares the 2 cores with the members)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: set[int] = set()

    def add(self, ranges: list[list[int]]) -> None:
        with self.lock:
            for first, last in ranges:
                self.seen.update(range(first, last + 1))


class Member:
    """One member process (its own session: Ctrl-C reaches the benchmark, which stops it), its lines read on a
    thread."""

    def __init__(self, cmd: list[str], log: Path, tally: Tally) -> None:
        self.log = log
        self.tally = tally
        with log.open("wb") as err:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
        self.ready = threading.Event()
        self.events: list[dict] = []  # progress lines ("p"), in order
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            ev = json.loads(line)
            kind = ev["ev"]
            if kind == "ready":
                self.ready.set()
            elif kind == "p":
                with self.lock:
                    self.events.append(ev)
                self.tally.add(ev["o"])
            elif kind == "error":
                self.errors.append(ev["error"])

    def send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # it exited: its log says why

    def stop(self) -> None:
        """After send("stop"): wait for it to close, else kill its process group."""
        try:
            self.proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.kill()
        self.reader.join(5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def why(self) -> str:
        tail = self.log.read_text(errors="replace")[-800:] if self.log.exists() else ""
        return f"exit {self.proc.poll()}, errors {self.errors[:2]}, stderr {tail!r}"


def _command(client: str, bootstrap: str, group: str, topic: str, mode: str, work: int, args, latency: bool):
    from .java import peer_command

    mode = "implicit" if mode == GROUP_MODE else mode
    rest = [mode, str(work), str(args.max_poll), args.acquire_mode, "1" if latency else "0"]
    if client == "java":
        # full JIT (Java's best); a serial GC: no GC threads fighting 16 members and the broker for 2 cores
        return peer_command("JavaShareBench", bootstrap, group, topic, *rest, heap="256m", flags=("-XX:+UseSerialGC",))
    return [sys.executable, str(HERE / "bench"), "_share_member", client, bootstrap, group, topic, *rest]


def _group_ready(client: str, bootstrap: str, group: str, n: int, timeout_s: float) -> None:
    """Until the coordinator shows the N members with their assignment (a share group: each at the group's
    assignment epoch; a consumer group: Stable with N members), so that no member's join is timed."""
    deadline = time.monotonic() + timeout_s
    seen = None
    if client == "group":
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            while time.monotonic() < deadline:
                seen = admin.describe_groups([group])[group]
                if seen.get("group_state") == "Stable" and len(seen.get("members", ())) == n:
                    return
                time.sleep(0.1)
        finally:
            admin.close()
    else:
        from kafka.errors import GroupIdNotFoundError

        from fsm_consumer.share._admin import ShareGroupAdmin

        with ShareGroupAdmin(bootstrap_servers=bootstrap, timeout_ms=10_000) as admin:
            while time.monotonic() < deadline:
                try:
                    seen = admin.describe_group(group)
                except GroupIdNotFoundError:  # until the first member joined
                    seen = None
                if seen and len(seen.members) == n:
                    if all(m.assignment and m.epoch == seen.assignment_epoch for m in seen.members):
                        return
                time.sleep(0.1)
    raise RuntimeError(f"{group}: the coordinator did not show {n} assigned members within {timeout_s:g} s: {seen}")


def _fill_uncommitted(bootstrap: str, topic: str, records: int, batch_records: int):
    """``records`` of 100 B in batches of ``batch_records``, in a transaction left open: the producer, whose
    commit_transaction() is the drain's go."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-share-{topic}",
            "transaction.timeout.ms": 600_000,  # 16 JVMs may take minutes to join on 2 cores
            "linger.ms": 20,
            "batch.num.messages": batch_records,
        }
    )
    p.init_transactions(30)
    p.begin_transaction()
    value = b"x" * 100
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError(f"{topic}: the records were not all written within 120 s")
    return p


def _cpu_ms(pids: list[int]) -> float:
    """User and system CPU of the processes (their threads), from /proc, in ms."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # exited
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total * 1000 / os.sysconf("SC_CLK_TCK")


def _finished_at(members: list[Member], target: int) -> tuple[float | None, int, int]:
    """(wall ms at which the members together had processed ``target`` distinct offsets, or None; distinct
    offsets processed; records processed in all, repeats included)."""
    events = []
    for m in members:
        with m.lock:
            events += m.events
    events.sort(key=lambda ev: ev["t"])
    seen: set[int] = set()
    total = 0
    at = None
    for ev in events:
        for first, last in ev["o"]:
            seen.update(range(first, last + 1))
            total += last - first + 1
        if at is None and len(seen) >= target:
            at = ev["t"]
    return at, len(seen), total


def one_run(broker, client: str, mode: str, n: int, work: int, args, tmp: Path, latency: bool = False) -> dict:
    """One drain (or, with ``latency``, one steady-rate run) on a fresh topic and group."""
    from fsm_consumer.share._admin import set_group_config

    bootstrap = broker.bootstrap_servers
    tag = f"{client}-{mode.strip('-') or 'group'}-{n}-{work}-{time.time_ns()}"
    topic, group = f"share-{tag}", f"bench-{tag}"
    broker.create_topic(topic, partitions=1)
    if client != "group":  # before anyone joins: a share group starts at the log's end by default
        settings = {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"}
        set_group_config(bootstrap, group, {**settings, "share.record.lock.duration.ms": LOCK_MS})
    records = records_for(work, args)
    producer = None if latency else _fill_uncommitted(bootstrap, topic, records, args.batch_records)
    row = {
        "bench": "share-latency" if latency else "share",
        "client": client,
        "mode": mode,
        "members": n,
        "work_ms": work,
        "max_poll_records": args.max_poll,
        "acquire_mode": args.acquire_mode if client in ("fsm", "java") else None,
    }
    members: list[Member] = []
    tally = Tally()
    try:
        for i in range(n):
            cmd = _command(client, bootstrap, group, topic, mode, work, args, latency)
            members.append(Member(cmd, tmp / f"{tag}-{i}.stderr", tally))
        deadline = time.monotonic() + READY_S
        for m in members:
            while not m.ready.wait(0.2):
                if m.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{client} member did not get ready: {m.why()}")
        _group_ready(client, bootstrap, group, n, 60)
        time.sleep(SETTLE_S)
        cpu_before = _cpu_ms([m.proc.pid for m in members]), _cpu_ms([broker.pid])
        go = time.time() * 1000
        if producer is not None:
            producer.commit_transaction(30)
            row["commit_ms"] = round(time.time() * 1000 - go, 1)
            producer = None
        if latency:
            from .latency import _produce_steady

            records = _produce_steady(bootstrap, topic, args.rate, args.seconds)
            limit = time.monotonic() + 60 + args.seconds  # a member slower than the rate works off its backlog
        else:
            limit = time.monotonic() + 60 + 2 * records * work / 1000
        while len(tally.seen) < records and time.monotonic() < limit:
            if all(m.proc.poll() is not None for m in members):
                break
            time.sleep(0.05)
        # CPU from the go to the drain's end (seen within 50 ms): the members' together, and the broker's
        row["members_cpu_ms"] = round(_cpu_ms([m.proc.pid for m in members]) - cpu_before[0], 1)
        row["broker_cpu_ms"] = round(_cpu_ms([broker.pid]) - cpu_before[1], 1)
    finally:
        if producer is not None:  # a run that failed before its go
            producer.abort_transaction(10)
        for m in members:
            m.send("stop")
        for m in members:
            m.stop()
    end, distinct, total = _finished_at(members, records)
    row.update(records=records, processed=distinct, repeats=total - distinct)
    row["active_members"] = sum(1 for m in members if m.events)
    if end is None:
        row["error"] = f"{distinct} of {records} processed; " + "; ".join(m.why() for m in members if m.errors)[:600]
        row["records_per_s"] = None
    elif latency:
        lat = sorted(x for m in members for ev in m.events for x in ev.get("lat", ()))
        row.update(rate=args.rate, seconds=args.seconds)
        row.update(p50_ms=round(lat[len(lat) // 2], 1), p99_ms=round(lat[int(len(lat) * 0.99)], 1))
    else:
        row["elapsed_s"] = round((end - go) / 1000, 3)
        row["records_per_s"] = round(records / max(end - go, 1) * 1000)
        # the start apart from the rest: the first records processed after the go, and the rate from then on
        first = min(ev["t"] for m in members for ev in m.events)
        row["first_ms"] = round(first - go, 1)
        row["after_first_per_s"] = round(records / max(end - first, 1) * 1000)
    return row


def _plan(args) -> tuple[list[tuple[str, str, int, int]], list[tuple[str, str, int, int]]]:
    """(drain runs, latency runs) as (client, mode, N, W ms), the clients alternating innermost."""
    clients = args.clients.split(",")
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        raise SystemExit(f"unknown share clients {unknown}; known: {', '.join(CLIENTS)}")
    modes = args.modes.split(",")
    drains = []
    for work in map(int, args.work.split(",")):
        for mode in modes:
            for n in map(int, args.members.split(",")):
                for c in clients:
                    if c != "group":
                        drains.append((c, mode, n, work))
                    elif mode == modes[0]:  # the consumer group has no acknowledgement mode: once
                        drains.append((c, GROUP_MODE, n, work))
    lat = [
        (c, GROUP_MODE if c == "group" else "implicit", n, args.latency_work)
        for n in map(int, args.latency_members.split(",") if args.latency_members else ())
        for c in clients
    ]
    return drains, lat


def bench_share(args) -> list[dict]:
    from fsm_consumer.broker import start_broker

    from .java import java_missing

    if java_missing():
        raise SystemExit(f"tools/bench share needs Apache Kafka and Java: {java_missing()}")
    drains, lat = _plan(args)
    got: dict[tuple, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-share-") as tmp, start_broker("kafka") as broker:
        _warm_up(broker, drains + lat, args, Path(tmp))
        for latency, plan in ((False, drains), (True, lat)):
            for run in range(args.runs):
                for client, mode, n, work in _in_turn(plan, run):  # the clients alternate, run after run
                    args.max_poll = args.max_poll_records or default_max_poll(work)
                    try:
                        row = one_run(broker, client, mode, n, work, args, Path(tmp), latency)
                    except Exception as exc:  # noqa: BLE001 - a run that could not start: reported, the rest go on
                        row = {"bench": "share-latency" if latency else "share", "client": client, "mode": mode}
                        row.update(members=n, work_ms=work, max_poll_records=args.max_poll, records_per_s=None)
                        row["error"] = f"{type(exc).__name__}: {exc}"[:800]
                    print(f"# run {run + 1}: {_said(row)}", file=sys.stderr)
                    got.setdefault((latency, client, mode, n, work), []).append(row)
    return [_median(rs) for rs in got.values()]


def _in_turn(plan: list[tuple[str, str, int, int]], run: int) -> list[tuple[str, str, int, int]]:
    """``plan`` with the clients of each cell (mode, N, W) rotated by ``run``: a broker still getting faster run
    after run (its JIT) would otherwise favour whichever client always goes last (the first sets had fsm first in
    every cell, each run a little slower than confluent-kafka's right after it on the same broker)."""
    cells: list[list[tuple[str, str, int, int]]] = []
    for step in plan:
        first = cells[-1][0] if cells else None
        # a cell: one mode, N and W (the consumer group's row, without a mode, goes with the first mode's)
        if first is not None and step[2:] == first[2:] and step[1] in (first[1], GROUP_MODE):
            cells[-1].append(step)
        else:
            cells.append([step])
    return [step for cell in cells for step in cell[run % len(cell) :] + cell[: run % len(cell)]]


def _warm_up(broker, plan: list[tuple[str, str, int, int]], args, tmp: Path) -> None:
    """WARM_UP_DRAINS drains by one member, not counted, before the measured runs. A fresh broker's JVM compiles
    its share paths during its first drains: the client measured first would pay for it (its first run was the
    slowest of its cell in every set before this, by up to half)."""
    shared = [(c, m) for c, m, _, _ in plan if c != "group"]
    if not shared:
        return
    client, mode = shared[0]
    args.max_poll = args.max_poll_records or default_max_poll(0)
    for _ in range(WARM_UP_DRAINS):
        try:
            row = one_run(broker, client, mode, 1, 0, args, tmp)
        except Exception as exc:  # noqa: BLE001 - the measured runs say what fails; this only warms the broker
            row = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        print(f"# warm-up (not counted): {row.get('records_per_s') or row.get('error')}", file=sys.stderr)


def _median(rs: list[dict]) -> dict:
    """One row of the runs of one (client, mode, N, W): the median's (records/s, or p50 and p99), each run's too."""
    ok = [r for r in rs if not r.get("error")]
    if len(rs) == 1 or not ok:
        return rs[0]
    key = "p50_ms" if rs[0]["bench"] == "share-latency" else "records_per_s"
    ok.sort(key=lambda r: r[key])
    row = dict(ok[len(ok) // 2])
    row.update(runs=len(rs), complete_runs=len(ok), per_run=[r.get(key) for r in rs])
    if key == "p50_ms":
        row["p50_ms"] = statistics.median(r["p50_ms"] for r in ok)
        row["p99_ms"] = statistics.median(r["p99_ms"] for r in ok)
    else:
        row["records_per_s"] = round(statistics.median(r["records_per_s"] for r in ok))
        row["first_ms"] = statistics.median(r["first_ms"] for r in ok)
        for cpu in ("members_cpu_ms", "broker_cpu_ms"):
            row[cpu] = statistics.median(r[cpu] for r in ok)
    return row


def _said(r: dict) -> str:
    what = f"{r['bench']} {r['client']} {r['mode']} N={r['members']} W={r['work_ms']} ms"
    if r.get("error"):
        return f"{what}: FAILED {r['error']}"
    if r["bench"] == "share-latency":
        return f"{what}: p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms over {r['processed']} records"
    return (
        f"{what}: {r['records_per_s']:,} records/s ({r['records']} in {r['elapsed_s']} s, {r['active_members']} active;"
        f" first records at {r.get('first_ms')} ms, {r.get('after_first_per_s', 0):,} records/s from then; CPU ms"
        f" members {r.get('members_cpu_ms')}, broker {r.get('broker_cpu_ms')})"
    )
