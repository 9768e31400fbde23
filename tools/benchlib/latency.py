"""tools/bench latency: end-to-end latency at a steady produce rate (default 10,000 records/s).

The producer (confluent-kafka, in this process) writes its send time (ns, CLOCK_MONOTONIC, shared by the
processes of this machine) into each value; each consumer runs in a process of its own (a Python consumer
sharing this interpreter's GIL with the producer would measure the GIL) and subtracts it on receipt.
The clients alternate, run after run; the report gives each client's median p50 and p99 over the runs.
The producer's first few records (its connection and metadata delay them 100-200 ms for any consumer)
are counted but not timed; on a new broker each client first runs untimed for 3 s (`_warm_up`: a cold
Apache Kafka delays the first client's records, whichever it is; not with --quick). Every run counts
the records the broker acknowledged to the producer and those the consumer received: a run where they
differ fails the benchmark (a latency over a partial set proves nothing).
"""

from __future__ import annotations

import copy
import multiprocessing
import statistics
import struct
import time
from pathlib import Path

_STAMP = struct.Struct(">q")
CLIENTS = ("fsm_consumer", "confluent-kafka")
SETTLE_S = 2.5  # after the consumer is positioned at the end of the log, before producing
TAIL_S = 10.0  # how long the consumer may take for the last records once the producer is done
WARMUP = 10  # records produced (and counted) before the timed stream
WARM_UP_S = 3.0  # each client's untimed run on a new broker (not with --quick)


def _produce_steady(bootstrap: str, topic: str, rate: int, seconds: float) -> int:
    """Produce at ``rate`` for ``seconds``; the number of records the broker acknowledged."""
    from confluent_kafka import Producer

    acked = 0

    def delivered(err, _msg) -> None:
        nonlocal acked
        if err is None:
            acked += 1

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    # warm-up: the producer's first records wait for its connection and metadata (100-200 ms, whoever
    # consumes); they are counted, not timed (stamp -1), and the measured stream starts after them
    for _ in range(WARMUP):
        p.produce(topic, value=_STAMP.pack(-1) + b"w" * 92, on_delivery=delivered)
    p.flush(30)
    time.sleep(0.5)
    interval = 1.0 / rate
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        target = start + n * interval
        now = time.monotonic()
        if now < target:
            time.sleep(min(target - now, 0.002))
            continue
        p.produce(topic, value=_STAMP.pack(time.monotonic_ns()) + b"x" * 92, on_delivery=delivered)
        n += 1
        if n % 200 == 0:
            p.poll(0)
    left = p.flush(30)
    if left:
        raise RuntimeError(f"{left} records still unacknowledged 30 s after the last was produced")
    return acked


def _receive(lat: list[int], produced, poll_once) -> None:
    """``poll_once()`` until every produced record is in ``lat``, or TAIL_S after the producer finished."""
    deadline = None
    while True:
        n = produced.value  # -1 while the producer runs
        if n >= 0:
            deadline = deadline or time.monotonic() + TAIL_S
            if len(lat) >= n or time.monotonic() > deadline:
                return
        poll_once()


def _latency(now_ns: int, value: bytes) -> int:
    """The record's latency in ns; -1 for a warm-up record (counted, not timed)."""
    sent = _STAMP.unpack_from(value)[0]
    return -1 if sent < 0 else now_ns - sent


def _consumer_main(kind: str, bootstrap: str, topic: str, ready, produced, out: str) -> None:
    """One consumer process: positioned at the end of the log, ``ready`` set; then records until all that
    were produced (``produced``, set by the parent once the producer is done) are in. Writes the latencies
    (ns, one per line) to ``out``."""
    lat: list[int] = []
    if kind == "fsm_consumer":
        from fsm_consumer import Consumer, TopicPartition

        c = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=100)
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.position(tp)
        ready.set()

        def poll_once() -> None:
            for records in c.poll(timeout_ms=100).values():
                now = time.monotonic_ns()
                lat.extend(_latency(now, r.value) for r in records)

    else:
        from confluent_kafka import OFFSET_END, Consumer
        from confluent_kafka import TopicPartition as CTopicPartition

        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"lat-{time.time_ns()}",
                "fetch.wait.max.ms": 100,
                "fetch.queue.backoff.ms": 10,
                "enable.auto.commit": False,
            }
        )
        c.assign([CTopicPartition(topic, 0, OFFSET_END)])  # like ours: no group join delay
        c.consume(num_messages=1, timeout=1.0)  # positioned at the end (nothing is produced yet)
        ready.set()

        def poll_once() -> None:
            for m in c.consume(num_messages=1000, timeout=0.1):
                if m.error() is None:
                    lat.append(_latency(time.monotonic_ns(), m.value()))

    try:
        _receive(lat, produced, poll_once)
    finally:
        c.close()
    Path(out).write_text("".join(f"{x}\n" for x in lat))


def _one_latency(args, broker, kind: str, run: int, tmp: Path) -> dict:
    topic = f"latency-{kind}-{run}-{time.time_ns()}"
    broker.create_topic(topic, partitions=1)
    ctx = multiprocessing.get_context("spawn")
    ready, produced = ctx.Event(), ctx.Value("q", -1)
    out = tmp / f"{topic}.txt"
    proc = ctx.Process(target=_consumer_main, args=(kind, broker.bootstrap_servers, topic, ready, produced, str(out)))
    proc.start()
    try:
        if not ready.wait(60):
            raise RuntimeError(f"{kind}: the consumer was not positioned within 60 s")
        time.sleep(SETTLE_S)
        acked = _produce_steady(broker.bootstrap_servers, topic, args.rate, args.seconds)
        produced.value = acked
        proc.join(TAIL_S + 30)
        if proc.exitcode != 0:
            raise RuntimeError(f"{kind}: the consumer process exited with {proc.exitcode}")
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
    got = [int(x) for x in out.read_text().split()]
    lat = sorted(x for x in got if x >= 0)
    row: dict = {"client": kind, "run": run + 1, "rate": args.rate, "produced": acked, "records": len(got)}
    if lat:
        row.update(
            p50_ms=round(lat[len(lat) // 2] / 1e6, 2),
            p99_ms=round(lat[int(len(lat) * 0.99)] / 1e6, 2),
            mean_ms=round(statistics.fmean(lat) / 1e6, 2),
        )
    return row


def bench_latency(args) -> list[dict]:
    """Per broker, ``args.runs`` runs of every client, alternating; one row per client and run, and a
    summary row per client (``"run": "median"``). Raises if any run received other than it produced."""
    import tempfile

    from fsm_consumer.broker import start_broker

    runs = getattr(args, "runs", 3)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        for broker_kind in args.brokers:
            with start_broker(broker_kind) as broker:
                if not getattr(args, "quick", False):
                    _warm_up(args, broker, Path(tmp))
                got = [
                    {"bench": "latency", "broker": broker_kind, **_one_latency(args, broker, kind, run, Path(tmp))}
                    for run in range(runs)
                    for kind in CLIENTS
                ]
            rows += got
            for kind in CLIENTS:
                mine = [r for r in got if r["client"] == kind and "p50_ms" in r]
                if mine:
                    rows.append(
                        {
                            "bench": "latency",
                            "broker": broker_kind,
                            "client": kind,
                            "run": "median",
                            "rate": args.rate,
                            "produced": sum(r["produced"] for r in mine),
                            "records": sum(r["records"] for r in mine),
                            "p50_ms": round(statistics.median(r["p50_ms"] for r in mine), 2),
                            "p99_ms": round(statistics.median(r["p99_ms"] for r in mine), 2),
                        }
                    )
    short = [r for r in rows if r["run"] != "median" and r["records"] != r["produced"]]
    if short:
        raise LatencyCountError(short, rows)
    return rows


def _warm_up(args, broker, tmp: Path) -> None:
    """An untimed run of each client on a new broker. Apache Kafka's first seconds of traffic run on a cold
    JVM: whichever client ran first had its records queue up for ~1.5 s (measured: fsm_consumer, fetching
    as soon as records arrive, p99 321 and 379 ms in a first run against 4-11 ms after; confluent-kafka
    first, 107 ms against 101), a cost of the broker's start, not of the client."""
    warm = copy.copy(args)
    warm.seconds = WARM_UP_S
    for kind in CLIENTS:
        _one_latency(warm, broker, kind, -1, tmp)


class LatencyCountError(Exception):
    """A run in which a consumer received other than the producer had acknowledged."""

    def __init__(self, short: list[dict], rows: list[dict]) -> None:
        self.rows = rows
        said = "; ".join(
            f"{r['broker']} {r['client']} run {r['run']}: produced {r['produced']}, received {r['records']}"
            for r in short
        )
        super().__init__(f"latency: records received differ from records produced: {said}")


def table(rows) -> str:
    out = [
        "| broker | client | run | produced records/s | produced | received | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.get('broker', 'tansu')} | {r['client']} | {r['run']} | {r.get('rate')} | {r['produced']} "
            f"| {r['records']} | {r.get('p50_ms')} | {r.get('p99_ms')} |"
        )
    return "\n".join(out)
