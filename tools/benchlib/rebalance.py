"""tools/bench rebalance: a fourth member joins a stable group of three; how long until the group is
stable again (every member assigned, all partitions covered), for fsm_consumer and confluent-kafka members
in the same run; and the time from subscribe() to the first record for one member."""

from __future__ import annotations

import statistics
import time

GROUP_CFG = dict(session_timeout_ms=3000, heartbeat_interval_ms=300)


class _Fsm:
    def __init__(self, bootstrap, group, topic, strategy, name):
        from fsm_consumer import Consumer
        self.c = Consumer(bootstrap_servers=bootstrap, group_id=group, client_id=name, auto_offset_reset="earliest",
                          partition_assignment_strategy=[strategy], follower_sync_delay_ms=400, **GROUP_CFG)
        self.c.subscribe([topic])

    def poll(self):
        return sum(len(v) for v in self.c.poll(timeout_ms=10).values())

    def owned(self):
        return {tp.partition for tp in self.c.assignment()}

    def settled(self):
        return self.c._group.membership.machine.state == "stable"

    def close(self):
        self.c.close(timeout_ms=3000)


class _Rd:
    def __init__(self, bootstrap, group, topic, strategy, name):
        from confluent_kafka import Consumer
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                           "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy,
                           "session.timeout.ms": 3000, "heartbeat.interval.ms": 300, "fetch.queue.backoff.ms": 10})
        self.c.subscribe([topic])

    def poll(self):
        m = self.c.poll(0.01)
        return 1 if m is not None and m.error() is None else 0

    def owned(self):
        return {p.partition for p in self.c.assignment()}

    def settled(self):
        return True  # librdkafka exposes no state: settled when assignments cover the topic

    def close(self):
        self.c.close()


KINDS = {"fsm_consumer": _Fsm, "confluent-kafka": _Rd}


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


def one_join(kind, strategy, bootstrap, topic, partitions, run):
    cls = KINDS[kind]
    group = f"rb-{kind}-{strategy}-{run}-{time.time_ns()}"
    members = [cls(bootstrap, group, topic, strategy, f"m{i}") for i in range(3)]
    try:
        if _spin_until(members, lambda: _covered(members, partitions), 60) is None:
            return None
        for _ in range(20):
            for m in members:
                m.poll()
        t0 = time.monotonic()
        members.append(cls(bootstrap, group, topic, strategy, "m3"))
        t1 = _spin_until(members, lambda: _covered(members, partitions), 60)
        return None if t1 is None else (t1 - t0) * 1000
    finally:
        for m in members:
            m.close()


def first_record(kind, bootstrap, topic, run):
    cls = KINDS[kind]
    t0 = time.monotonic()
    m = cls(bootstrap, f"fr-{kind}-{run}-{time.time_ns()}", topic, "range", "solo")
    try:
        t1 = _spin_until([m], lambda: False, 0) or None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if m.poll():
                return (time.monotonic() - t0) * 1000
        return None
    finally:
        m.close()


def bench_rebalance(args) -> list[dict]:
    from confluent_kafka import Producer

    from fsm_consumer.broker import EmbeddedBroker

    rows = []
    with EmbeddedBroker() as broker:
        topic = "rebalance"
        broker.create_topic(topic, partitions=args.partitions)
        p = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(1000):
            p.produce(topic, value=b"x" * 100, partition=i % args.partitions)
        p.flush()
        combos = [(k, s) for s in ("range", "cooperative-sticky") for k in KINDS]
        results = {c: [] for c in combos}
        firsts = {k: [] for k in KINDS}
        for run in range(args.runs):
            for combo in combos:  # alternate
                results[combo].append(one_join(combo[0], combo[1], broker.bootstrap_servers, topic, args.partitions, run))
            for k in KINDS:
                firsts[k].append(first_record(k, broker.bootstrap_servers, topic, run))
    for (kind, strategy), vals in results.items():
        ok = [v for v in vals if v is not None]
        rows.append({"bench": "rebalance", "client": kind, "strategy": strategy, "runs": len(vals),
                     "settled_runs": len(ok), "join_to_stable_ms": round(statistics.median(ok)) if ok else None})
    for kind, vals in firsts.items():
        ok = [v for v in vals if v is not None]
        rows.append({"bench": "first-record", "client": kind, "runs": len(vals),
                     "subscribe_to_first_record_ms": round(statistics.median(ok)) if ok else None})
    return rows


def table(rows) -> str:
    out = ["| client | strategy | 4th member joins: ms until stable (median) | settled runs |", "|---|---|---|---|"]
    for r in rows:
        if r["bench"] == "rebalance":
            out.append(f"| {r['client']} | {r['strategy']} | {r['join_to_stable_ms']} | {r['settled_runs']}/{r['runs']} |")
    out += ["", "| client | subscribe() to first record, ms (median) |", "|---|---|"]
    for r in rows:
        if r["bench"] == "first-record":
            out.append(f"| {r['client']} | {r['subscribe_to_first_record_ms']} |")
    return "\n".join(out)
