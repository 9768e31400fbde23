"""tools/bench rebalance: a fourth member joins a stable group of three; how long until the group is
stable again (every member assigned, all partitions covered), for fsm_consumer, confluent-kafka and Kafka's
Java consumer (tools/peers/JavaMember.java) members in the same run, on each broker; while records are
produced steadily, the largest gap in delivery of a partition that
stays with its member (what cooperative-sticky and the consumer protocol promise); and the time from
subscribe() to the first record for one member. Strategies: the classic protocol's range (eager) and
cooperative-sticky, and "consumer", the consumer group protocol (KIP-848: the broker assigns; Apache Kafka
only, its heartbeat interval the broker's group.consumer.heartbeat.interval.ms)."""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections import defaultdict

GROUP_CFG = dict(session_timeout_ms=3000, heartbeat_interval_ms=300)
FETCH_WAIT_MS = 500  # both clients' default fetch wait (fetch_max_wait_ms, fetch.wait.max.ms)
RATE = 1000  # records/s produced across the partitions during a join
KIP848 = "consumer"  # the strategy name that means group_protocol="consumer"
_BROKER_HEARTBEAT_MS = 1000  # KafkaBroker's group.consumer.heartbeat.interval.ms


class _Fsm:
    # Tansu 0.6 fails a follower's SyncGroup that reaches it before the leader's (tests/integration/group), so
    # followers wait this long there; Apache Kafka holds a follower's SyncGroup until the leader's: none
    follower_sync_delay_ms = 0

    def __init__(self, bootstrap, group, topic, strategy, name):
        from fsm_consumer import Consumer

        if strategy == KIP848:
            group_cfg: dict = {"group_protocol": "consumer"}
        else:
            delay = self.follower_sync_delay_ms
            group_cfg = dict(partition_assignment_strategy=[strategy], follower_sync_delay_ms=delay, **GROUP_CFG)
        self.c = Consumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=name, auto_offset_reset="earliest", **group_cfg
        )
        self.c.subscribe([topic])
        self.deliveries = defaultdict(list)  # partition: times records came

    def poll(self):
        batch = self.c.poll(timeout_ms=10)
        now = time.monotonic()
        for tp in batch:
            self.deliveries[tp.partition].append(now)
        return sum(len(v) for v in batch.values())

    def owned(self):
        return {tp.partition for tp in self.c.assignment()}

    def settled(self):
        return self.c._group.membership.machine.state == "stable"

    def close(self):
        self.c.close(timeout_ms=3000)


class _Rd:
    def __init__(self, bootstrap, group, topic, strategy, name):
        from confluent_kafka import Consumer

        settings = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 10,
        }
        if strategy == KIP848:
            settings["group.protocol"] = "consumer"
        else:
            settings.update(
                {"partition.assignment.strategy": strategy, "session.timeout.ms": 3000, "heartbeat.interval.ms": 300}
            )
        self.c = Consumer(settings)
        self.c.subscribe([topic])
        self.deliveries = defaultdict(list)

    def poll(self):
        got = [m for m in self.c.consume(500, 0.01) if m.error() is None]
        now = time.monotonic()
        for p in {m.partition() for m in got}:
            self.deliveries[p].append(now)
        return len(got)

    def owned(self):
        return {p.partition for p in self.c.assignment()}

    def settled(self):
        return True  # librdkafka exposes no state: settled when assignments cover the topic

    def close(self):
        self.c.close()


class _Java:
    """JavaMember in its own JVM, read through its JSON lines on a thread; ready once the JVM is up, so
    the join is timed from its subscribe() as for the others, not from the JVM's start."""

    def __init__(self, bootstrap, group, topic, strategy, name):
        import json
        import subprocess

        from .java import peer_command

        self._json = json
        self.proc = subprocess.Popen(
            peer_command(
                "JavaMember",
                bootstrap,
                group,
                topic,
                strategy,
                str(GROUP_CFG["session_timeout_ms"]),
                str(GROUP_CFG["heartbeat_interval_ms"]),
                heap="256m",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.deliveries = defaultdict(list)
        self._owned: set[int] = set()
        self._received = 0
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self.ready_at = None
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(60):
            self.close()
            raise RuntimeError("JavaMember did not start within 60 s")

    def _read(self):
        for line in self.proc.stdout:
            ev = self._json.loads(line)
            now = time.monotonic()
            with self._lock:
                if ev["ev"] == "subscribing":
                    self.ready_at = now
                    self._ready.set()
                elif ev["ev"] == "assigned":
                    self._owned |= set(ev["parts"])
                elif ev["ev"] in ("revoked", "lost"):
                    self._owned -= set(ev["parts"])
                elif ev["ev"] == "records":
                    self.deliveries[ev["p"]].append(now)
                    self._received += len(ev["offsets"])

    def poll(self):
        time.sleep(0.002)  # the JVM polls itself; keep this thread from spinning
        with self._lock:
            n, self._received = self._received, 0
        return n

    def owned(self):
        with self._lock:
            return set(self._owned)

    def settled(self):
        return True  # as librdkafka: settled when assignments cover the topic

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except Exception:
                self.proc.kill()
                self.proc.wait()


KINDS = {"fsm_consumer": _Fsm, "confluent-kafka": _Rd, "java": _Java}


def _spin_until(members, pred, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if pred():
            return time.monotonic()
    return None


def _covered(members, partitions):
    owned = [m.owned() for m in members]
    flat = sorted(p for o in owned for p in o)
    return flat == list(range(partitions)) and all(owned) and all(m.settled() for m in members)


def _feed(bootstrap, topic, partitions, stop):
    """Produce RATE records/s round the partitions until ``stop`` is set."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    i = 0
    start = time.monotonic()
    while not stop.is_set():
        p.produce(topic, value=b"x" * 100, partition=i % partitions)
        i += 1
        p.poll(0)
        ahead = start + i / RATE - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    p.flush(5)


def _largest_gap(members, before, t0, t1):
    """The largest gap (ms) between deliveries of a partition owned by the same member before and after."""
    gaps = []
    for m, owned in zip(members, before, strict=False):
        for p in owned & m.owned():
            times = [t for t in m.deliveries[p] if t0 <= t <= t1]
            edges = [t0, *times, t1]
            gaps.append(max(b - a for a, b in zip(edges, edges[1:], strict=False)))
    return round(max(gaps) * 1000) if gaps else None


def _made_aside(cls, *args):
    """A member constructed on another thread (making one takes a while): the others keep polling meanwhile."""
    made = []
    t = threading.Thread(target=lambda: made.append(cls(*args)), daemon=True)
    t.start()
    return t, made


def one_join(kind, strategy, bootstrap, topic, partitions, run):
    """(ms from the 4th member's start until the group is stable, largest delivery gap ms of a partition that
    stayed). The members are polled in turn from this thread (librdkafka consumers polled from threads of
    their own wedged Tansu 0.6 here); each poll waits at most 10 ms."""
    cls = KINDS[kind]
    group = f"rb-{kind}-{strategy}-{run}-{time.time_ns()}"
    members = [cls(bootstrap, group, topic, strategy, f"m{i}") for i in range(3)]
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(bootstrap, topic, partitions, stop), daemon=True)
    feeder.start()
    try:
        if _spin_until(members, lambda: _covered(members, partitions), 60) is None:
            return None, None
        _spin_until(members, lambda: False, 1.0)  # steady delivery before the join
        before = [m.owned() for m in members]
        t0 = time.monotonic()
        maker, made = _made_aside(cls, bootstrap, group, topic, strategy, "m3")
        if _spin_until(members, lambda: bool(made), 30) is None:
            return None, None
        maker.join()
        members.append(made[0])
        t0 = max(t0, getattr(made[0], "ready_at", None) or t0)  # a JVM's start is not the join
        t1 = _spin_until(members, lambda: _covered(members, partitions), 60)
        if t1 is None:
            return None, None
        _spin_until(members, lambda: False, 0.5)
        return (t1 - t0) * 1000, _largest_gap(members[:3], before, t0, t1)
    finally:
        stop.set()
        feeder.join(10)
        for m in members:
            m.close()


def first_record(kind, bootstrap, topic, run):
    cls = KINDS[kind]
    t0 = time.monotonic()
    m = cls(bootstrap, f"fr-{kind}-{run}-{time.time_ns()}", topic, "range", "solo")
    t0 = getattr(m, "ready_at", None) or t0  # a JVM's start is not the subscribe
    try:
        _spin_until([m], lambda: False, 0) or None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if m.poll():
                return (time.monotonic() - t0) * 1000
        return None
    finally:
        m.close()


def bench_rebalance(args) -> list[dict]:
    from .java import java_missing

    kinds = [k for k in KINDS if k != "java" or not java_missing()]
    if "java" not in kinds:
        print(f"# Kafka's Java consumer left out: {java_missing()}", file=sys.stderr)
    rows = []
    for broker_kind in args.brokers:
        rows += [{"broker": broker_kind, **r} for r in _rebalance_on(broker_kind, kinds, args)]
    return rows


def _rebalance_on(broker_kind, kinds, args) -> list[dict]:
    from confluent_kafka import Producer

    from fsm_consumer.broker import start_broker

    rows = []
    _Fsm.follower_sync_delay_ms = 400 if broker_kind == "tansu" else 0
    with start_broker(broker_kind) as broker:
        topic = "rebalance"
        broker.create_topic(topic, partitions=args.partitions)
        p = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(1000):
            p.produce(topic, value=b"x" * 100, partition=i % args.partitions)
        p.flush()
        del p  # closed now, not when the broker is gone (librdkafka would log the disconnect)
        strategies = [s for s in args.strategies.split(",") if s != KIP848 or broker_kind == "kafka"]
        if len(strategies) < len(args.strategies.split(",")):
            print("# the consumer protocol left out on Tansu 0.6: it has no ConsumerGroupHeartbeat", file=sys.stderr)
        combos = [(k, s) for s in strategies for k in kinds]
        results = {c: [] for c in combos}
        firsts = {k: [] for k in kinds}
        for run in range(args.runs):
            for combo in combos:  # alternate
                results[combo].append(
                    one_join(combo[0], combo[1], broker.bootstrap_servers, topic, args.partitions, run)
                )
                print(f"# {broker_kind} run {run + 1} {combo[0]} {combo[1]}: {results[combo][-1]}", file=sys.stderr)
            for k in kinds:
                firsts[k].append(first_record(k, broker.bootstrap_servers, topic, run))
    for (kind, strategy), vals in results.items():
        ok = [v for v, _ in vals if v is not None]
        gaps = [g for _, g in vals if g is not None]
        rows.append(
            {
                "bench": "rebalance",
                "client": kind,
                "strategy": strategy,
                "runs": len(vals),
                "settled_runs": len(ok),
                "join_to_stable_ms": round(statistics.median(ok)) if ok else None,
                "stayed_gap_ms": max(gaps) if gaps else None,
                "gap_bound_ms": (_BROKER_HEARTBEAT_MS if strategy == KIP848 else GROUP_CFG["heartbeat_interval_ms"])
                + FETCH_WAIT_MS,
            }
        )
    for kind, vals in firsts.items():
        ok = [v for v in vals if v is not None]
        rows.append(
            {
                "bench": "first-record",
                "client": kind,
                "runs": len(vals),
                "subscribe_to_first_record_ms": round(statistics.median(ok)) if ok else None,
            }
        )
    return rows


def table(rows) -> str:
    out = [
        "| broker | client | strategy | 4th member joins: ms until stable (median) | largest delivery gap of a "
        "partition that stayed, ms (max over runs; bound: heartbeat interval + fetch wait) | settled runs |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["bench"] == "rebalance":
            out.append(
                f"| {r['broker']} | {r['client']} | {r['strategy']} | {r['join_to_stable_ms']} | {r['stayed_gap_ms']} "
                f"(bound {r['gap_bound_ms']}) | {r['settled_runs']}/{r['runs']} |"
            )
    out += ["", "| broker | client | subscribe() to first record, ms (median) |", "|---|---|---|"]
    for r in rows:
        if r["bench"] == "first-record":
            out.append(f"| {r['broker']} | {r['client']} | {r['subscribe_to_first_record_ms']} |")
    return "\n".join(out)
