"""``fsm-consumer demo``: a tour without Spark, on the embedded broker (the main job is ``fsm-consumer ingest``).

Starts a Tansu broker on loopback (``--broker kafka``: Apache Kafka, the reference, from the jars
``fsm-consumer broker fetch --kind kafka`` cached), fills a topic with records kafka-python encodes, reads it all back
with fsm_consumer (checking every record arrives once, in order per partition), renders the state
diagrams of the shipped specs, and prints what it did. Needs no running Kafka and no network.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..broker import BROKER_KINDS, KafkaNotFoundError, start_broker
from ..broker._kinds import describe
from ..machines import all_spec_paths, load_spec
from ..machines._diagram import have_dot, render_all
from ._help import plain

if TYPE_CHECKING:
    from ..broker._admin import LoopbackBroker


def _fill(
    broker: LoopbackBroker, topic: str, records: int, size: int, value: Callable[[int], bytes] | None = None
) -> dict[int, int]:
    """``records`` records of ``size`` bytes with 100 keys, encoded and partitioned by kafka-python as its
    producer would (murmur2 of the key, gzip batches of 64 KiB; the records come from the peer library, on
    purpose), appended a batch a partition per Produce request. Its KafkaProducer's send() took ~35 us a
    record: 7 s of the main job's 25 for the demo's 200k. ``value(i)``: record i's value instead of ``size``
    bytes (a typed topic's). Returns the last offset of each partition."""
    from kafka.partitioner.default import murmur2
    from kafka.record.memory_records import MemoryRecordsBuilder

    partitions = broker.topic_partitions(topic)
    if not partitions:
        raise RuntimeError(f"topic {topic!r} has no partitions with a leader")
    keys = [str(k).encode() for k in range(100)]
    where = [partitions[(murmur2(key) & 0x7FFFFFFF) % len(partitions)] for key in keys]

    def builder() -> MemoryRecordsBuilder:
        return MemoryRecordsBuilder(magic=2, compression_type=1, batch_size=64 * 1024)  # 1: gzip

    pad = b"x" * (size - 8)
    open_batches = {p: builder() for p in partitions}
    done: dict[int, list[tuple[bytes, int]]] = {p: [] for p in partitions}  # (batch, records) in order

    def seal(p: int) -> None:
        batch = open_batches[p]
        batch.close()
        done[p].append((bytes(batch.buffer()), batch.next_offset()))  # offsets count from 0: its record count

    for i in range(records):
        p = where[i % 100]
        data = (b"%08d" % i) + pad if value is None else value(i)
        record: dict[str, Any] = {"timestamp": None, "key": keys[i % 100], "value": data, "headers": []}
        if open_batches[p].append(**record) is None:  # full: this record opens the next batch
            seal(p)
            open_batches[p] = builder()
            open_batches[p].append(**record)
    for p, batch in open_batches.items():
        if batch.next_offset():
            seal(p)
    last: dict[int, int] = {}
    while any(done.values()):
        this_round = {p: queue.pop(0) for p, queue in done.items() if queue}
        base = broker.produce(topic, {p: batch for p, (batch, _) in this_round.items()})
        for p, (_, n) in this_round.items():
            last[p] = base[p] + n - 1
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
    ap = argparse.ArgumentParser(prog="fsm-consumer demo", description=plain(__doc__))
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
        last = _fill(broker, args.topic, args.records, args.record_size)
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
