"""``fsm-consumer demo``: the main job on the embedded broker.

Starts a Tansu broker on loopback (``--broker kafka``: Apache Kafka, the reference, from the jars
``fsm-consumer broker fetch --kind kafka`` cached), fills a topic with kafka-python's producer, reads it all back
with fsm_consumer (checking every record arrives once, in order per partition), renders the state
diagrams of the shipped specs, and prints what it did. Needs no running Kafka and no network.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..broker import BROKER_KINDS, KafkaNotFoundError, start_broker
from ..broker._kinds import describe
from ..machines import all_spec_paths, load_spec
from ..machines._diagram import have_dot, render_all


def _fill(bootstrap: str, topic: str, records: int, size: int) -> dict[int, int]:
    from kafka import KafkaProducer  # the producer comes from the peer library, on purpose

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, compression_type="gzip", batch_size=64 * 1024)
    last: dict[int, int] = {}
    try:
        futures = [
            producer.send(topic, key=str(i % 100).encode(), value=(b"%08d" % i) + b"x" * (size - 8))
            for i in range(records)
        ]
        producer.flush()
        for f in futures:
            meta = f.get(timeout=30)
            last[meta.partition] = max(last.get(meta.partition, -1), meta.offset)
    finally:
        producer.close()
    return last


def _read_back(bootstrap: str, topic: str, partitions: int, expected: int) -> tuple[int, float, dict[str, Any]]:
    from ..consumer import Consumer
    from ..fetch import TopicPartition

    tps = [TopicPartition(topic, p) for p in range(partitions)]
    seen: dict[int, int] = {}
    t0 = time.monotonic()
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", client_id="fsm-consumer-demo") as c:
        c.assign(tps)
        got = 0
        while got < expected and time.monotonic() - t0 < 60:
            for tp, records in c.poll(timeout_ms=500).items():
                for r in records:
                    if r.offset != seen.get(tp.partition, -1) + 1:
                        raise RuntimeError(f"{tp}: offset {r.offset} after {seen.get(tp.partition, -1)}")
                    seen[tp.partition] = r.offset
                got += len(records)
        metrics = c.metrics_flat()
    return got, time.monotonic() - t0, metrics


def demo(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="fsm-consumer demo", description=__doc__)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--topic", default="demo")
    ap.add_argument("--out", default="fsm-demo", help="where the diagrams go (default: ./fsm-demo)")
    ap.add_argument(
        "--broker",
        choices=BROKER_KINDS,
        default="tansu",
        help="tansu (default: embedded, starts in milliseconds) or kafka (Apache Kafka, the reference)",
    )
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    try:
        broker = start_broker(args.broker)
    except KafkaNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with broker:
        print(f"broker: {describe(broker)}")
        broker.create_topic(args.topic, partitions=args.partitions)
        t1 = time.monotonic()
        last = _fill(broker.bootstrap_servers, args.topic, args.records, args.record_size)
        took = time.monotonic() - t1
        print(
            f"topic {args.topic!r}: {args.records} records of {args.record_size} B in {took:.2f} s; "
            f"last offset per partition {dict(sorted(last.items()))}"
        )
        if sum(v + 1 for v in last.values()) != args.records:
            print("error: the broker acknowledged a different number of records than were sent")
            return 1
        got, took, metrics = _read_back(broker.bootstrap_servers, args.topic, args.partitions, args.records)
        print(
            f"fsm_consumer read {got} records in {took:.2f} s ({got / max(took, 1e-9):,.0f} records/s), "
            f"in order per partition; fetch buffer peak {metrics['fetch-buffer-bytes-peak'] / 1e6:.1f} MB"
        )
        if got != args.records:
            print(f"error: expected {args.records} records, read {got}")
            return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    svg = have_dot()
    if not svg:
        print("note: Graphviz's dot is not installed (apt-get install graphviz): writing .dot and .mmd, no .svg")
    for path in all_spec_paths():
        spec = load_spec(path)
        for suffix, content in render_all(spec, svg=svg).items():
            (out / f"{spec.machine}{suffix}").write_text(content, encoding="utf-8")
        print(
            f"diagram: {out / spec.machine}.{'svg' if svg else 'dot'} ({len(spec.states)} states, "
            f"{len(spec.transitions)} transitions)"
        )
    print(f"done in {time.monotonic() - t0:.1f} s; the broker is stopped")
    return 0
