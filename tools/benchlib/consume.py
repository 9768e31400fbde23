"""tools/bench consume: the same topic read by each client, alternately, on Tansu and on Apache Kafka."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .clients import CLIENTS, HEADERS_ENV
from .java import java_missing, peer_command

HERE = Path(__file__).resolve().parent.parent
LARGE = 1_000_000  # the producer's batch size of scenarios A to C: batches of about 1 MB
# scenario E's header on every record: a W3C trace context, as OpenTelemetry's instrumentation adds
TRACE = ("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


def fill(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    size: int,
    compression: str,
    batch_bytes: int = LARGE,
    headers: bool = False,
) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "batch.size": batch_bytes,
            "compression.type": compression,
            "queue.buffering.max.messages": 500_000,
        }
    )
    value = b"x" * size
    trace = [TRACE] if headers else None
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, partition=i % partitions, headers=trace)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(120)


# what each client imports, so its baseline RSS counts the interpreter and the library, not the consuming
LIBRARIES = {
    "fsm_consumer": "fsm_consumer.consumer",
    "kafka-python": "kafka",
    "confluent-kafka": "confluent_kafka",
    "aiokafka": "aiokafka",
    "raw Fetch": "fsm_consumer.transport",
}


def _status_mb(field: str) -> float:
    """VmRSS or VmHWM (peak RSS since exec: ru_maxrss of a child also counts the parent it forked from)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def child(argv: list[str]) -> int:
    """Run one client; print its figures as JSON (the parent adds the whole child's CPU from wait4)."""
    import importlib

    name, bootstrap, topic, partitions, expect = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    fn, opts = CLIENTS[name]
    importlib.import_module(next(m for prefix, m in LIBRARIES.items() if name.startswith(prefix)))
    if "poll_batch" in name:
        importlib.import_module("pyarrow")
    baseline = _status_mb("VmRSS")
    cpu0 = time.process_time()  # every thread of the process (librdkafka's too), from here: not the imports
    t0 = time.monotonic()
    got, first_n, first, last = fn(bootstrap, topic, partitions, expect, opts)
    print(
        json.dumps(
            {
                "records": got,
                "rate_records": got - first_n,
                "first_s": first - t0,
                "span_s": max(last - first, 1e-9),
                "total_s": last - t0,
                "cpu_s": time.process_time() - cpu0,
                "baseline_rss_mb": baseline,
                "peak_rss_mb": _status_mb("VmHWM"),
            }
        )
    )
    return 0


def run_child(name: str, bootstrap: str, topic: str, partitions: int, expect: int, headers: bool = False) -> dict:
    if CLIENTS[name][0] is None:  # Kafka's Java consumer: the JVM's own process (it reads headers eagerly)
        cmd = peer_command("JavaBench", bootstrap, topic, str(partitions), str(expect))
    else:
        cmd = [sys.executable, str(HERE / "bench"), "_child", name, bootstrap, topic, str(partitions), str(expect)]
    env = {**os.environ, HEADERS_ENV: "1"} if headers else None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:  # e.g. a client without the codec: reported, not fatal
        result = {
            "records": 0,
            "rate_records": 0,
            "first_s": 0.0,
            "span_s": 1e-9,
            "total_s": 0.0,
            "baseline_rss_mb": 0.0,
            "peak_rss_mb": usage.ru_maxrss / 1024,
            "error": f"exit {proc.returncode}",
        }
    else:
        result = json.loads(lines[-1])
    result["cpu_total_s"] = usage.ru_utime + usage.ru_stime  # with the interpreter's start and the imports
    result.setdefault("cpu_s", result["cpu_total_s"])
    return result


SCENARIOS = {  # name: (records, size, compression, batch bytes, headers); --quick divides records by 10
    "A": (1_000_000, 100, "none", LARGE, False),
    "B": (200_000, 1000, "none", LARGE, False),
    "C": (1_000_000, 100, "lz4", LARGE, False),
    # B as Java's and kafka-python's producers write it by default (batch.size 16 KiB): 16 records a batch
    "D": (200_000, 1000, "none", 16_384, False),
    # D with a tracing header on every record (TRACE), every client reading it
    "E": (200_000, 1000, "none", 16_384, True),
}


WIRE_LIMIT = "raw Fetch (wire limit)"  # in uncompressed scenarios only


def bench_scenarios(args) -> list[dict]:
    names = list(SCENARIOS) if args.scenario == "all" else args.scenario.split(",")
    rows = []
    for kind in args.brokers:
        for i, name in enumerate(names):
            records, size, compression, batch_bytes, headers = SCENARIOS[name]
            clients = args.clients.split(",") if args.clients else list(CLIENTS)
            if args.quick:
                records //= 10
                # a smoke: every peer's adapter runs in the first scenario; the others only need this
                # library's decoders over their record shapes (and the wire limit where there is one)
                if i and not args.clients:
                    clients = [c for c in CLIENTS if c.startswith("fsm_consumer") or c == WIRE_LIMIT]
            args.records, args.size, args.compression, args.batch_bytes = records, size, compression, batch_bytes
            args.headers = headers
            for r in bench_consume(args, kind, clients):
                r["scenario"] = name
                rows.append(r)
    return rows


def bench_consume(args, kind: str = "tansu", clients: list[str] | None = None) -> list[dict]:
    """Every client of ``clients`` (default: ``args.clients``, else all) over one topic on a new broker."""
    if clients is None:
        clients = args.clients.split(",") if args.clients else list(CLIENTS)
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        raise SystemExit(f"unknown clients {unknown}; known: {', '.join(CLIENTS)}")
    missing = java_missing()
    if missing and any(CLIENTS[c][0] is None for c in clients):
        print(f"# Kafka's Java consumer left out: {missing}", file=sys.stderr)
        clients = [c for c in clients if CLIENTS[c][0] is not None]
    if args.compression != "none":  # it reads compressed batches without inflating them: no limit of a consumer
        clients = [c for c in clients if c != WIRE_LIMIT]
    from fsm_consumer.broker import start_broker

    rows = []
    with start_broker(kind) as broker:
        batch_bytes = args.batch_bytes
        topic = f"bench-{args.records}x{args.size}-{args.compression}"
        topic += f"-{batch_bytes}" if batch_bytes != LARGE else ""
        topic += "-headers" if args.headers else ""
        broker.create_topic(topic, partitions=args.partitions)
        t = time.monotonic()
        fill(
            broker.bootstrap_servers,
            topic,
            args.partitions,
            args.records,
            args.size,
            args.compression,
            batch_bytes,
            args.headers,
        )
        print(
            f"# filled {topic}: {args.records} x {args.size} B ({args.compression}, batches up to {batch_bytes} B) "
            f"in {time.monotonic() - t:.1f} s",
            file=sys.stderr,
        )
        runs: dict[str, list[dict]] = {c: [] for c in clients}
        for i in range(args.runs):
            for c in clients:  # alternate: A B C A B C ...
                r = run_child(c, broker.bootstrap_servers, topic, args.partitions, args.records, args.headers)
                runs[c].append(r)
                print(
                    f"# {kind} run {i + 1} {c}: {r['rate_records'] / r['span_s']:,.0f} rec/s, cpu {r['cpu_s']:.2f} s",
                    file=sys.stderr,
                )
    for c, rs in runs.items():
        ok = [r for r in rs if r["records"] >= args.records]
        # each round's rate (None: the run missed records), for the median and the same-round shares below
        rates = [r["rate_records"] / r["span_s"] if r in ok else None for r in rs]
        rate = statistics.median([x for x in rates if x is not None]) if ok else 0.0
        rows.append(
            {
                "bench": "consume",
                "broker": kind,
                "client": c,
                "records": args.records,
                "size": args.size,
                "compression": args.compression,
                "batch_bytes": batch_bytes,
                "headers": args.headers,
                "runs": len(rs),
                "complete_runs": len(ok),
                "records_per_s": round(rate),
                "mb_per_s": round(rate * args.size / 1e6, 1),
                "cpu_s_per_million": round(statistics.median([r["cpu_s"] for r in rs]) * 1e6 / args.records, 2),
                "peak_rss_mb": round(max(r["peak_rss_mb"] for r in rs), 1),
                "baseline_rss_mb": round(statistics.median([r["baseline_rss_mb"] for r in rs]), 1),
                "first_record_s": round(statistics.median([r["first_s"] for r in rs]), 3),
                "per_run": [None if x is None else round(x) for x in rates],
            }
        )
    limit = next((r for r in rows if r["client"] == WIRE_LIMIT), None)
    for r in rows:
        if limit is not None and r is not limit and limit["records_per_s"]:
            # the target is a share of the limit measured in the same run: medians, and round by round
            r["wire_share"] = round(r["records_per_s"] / limit["records_per_s"], 2)
            r["wire_share_per_run"] = [
                round(a / b, 2) if a and b else None for a, b in zip(r["per_run"], limit["per_run"], strict=True)
            ]
    for key, name in (("fsm_ratio", "fsm_consumer"), ("batch_ratio", "fsm_consumer(poll_batch)")):
        ours = next((r for r in rows if r["client"] == name), None)
        for r in rows:
            r[key] = round(ours["records_per_s"] / r["records_per_s"], 2) if ours and r["records_per_s"] else None
    return rows


def table(rows: list[dict]) -> str:
    head = (
        "| broker | scenario | client | records/s | MB/s | CPU s per 1M | peak RSS MB (baseline) | first record s "
        "| poll() / client | poll_batch() / client |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r.get('broker', 'tansu')} | {r.get('scenario', '-')} "
            f"({r['records']:,} x {r['size']} B, {r['compression']}{_batches(r)}) | "
            f"{r['client']} | {r['records_per_s']:,} | {r['mb_per_s']} | {r['cpu_s_per_million']} | "
            f"{r['peak_rss_mb']} ({r.get('baseline_rss_mb', '-')}) | {r['first_record_s']} | "
            f"{r['fsm_ratio']} | {r.get('batch_ratio')} |"
        )
    shares = [r for r in rows if r.get("wire_share") is not None]
    if shares:
        lines.append("")
        lines.append("share of the wire limit (the raw Fetch loop) in the same run: of the medians; per round")
        for r in shares:
            per = ", ".join("-" if x is None else f"{x:.0%}" for x in r["wire_share_per_run"])
            where = f"{r.get('broker', 'tansu')} {r.get('scenario', '-')} {r['client']}"
            lines.append(f"- {where}: {r['wire_share']:.0%}; {per}")
    return "\n".join(lines)


def _batches(row: dict) -> str:
    """How the topic was produced, where not in large batches or with headers."""
    size = row.get("batch_bytes", LARGE)
    return ("" if size == LARGE else f", {size // 1024} KiB batches") + (
        ", a header per record" if row.get("headers") else ""
    )


def chart(rows: list[dict], path: Path) -> bool:
    """A grouped bar chart of records/s per scenario and client; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False

    def group(r: dict) -> str:
        return f"{r.get('scenario', '-')} on {r.get('broker', 'tansu')}"

    scenarios = sorted({group(r) for r in rows})
    clients = list(dict.fromkeys(r["client"] for r in rows))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(len(clients), 1)
    for i, client in enumerate(clients):
        vals = [
            next((r["records_per_s"] for r in rows if r["client"] == client and group(r) == s), 0) for s in scenarios
        ]
        ax.bar([x + i * width for x in range(len(scenarios))], vals, width, label=client)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(scenarios))], scenarios)
    ax.set_ylabel("records/s (median)")
    ax.set_title("consume throughput (same run, alternating clients)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True
