"""tools/bench latency: end-to-end latency at a steady produce rate (default 10,000 records/s).

The producer writes its send time (ns, monotonic clock shared by the processes on this machine via
CLOCK_MONOTONIC) into each value; the consumer subtracts it on receipt. Reports p50 and p99 per client.
"""

from __future__ import annotations

import statistics
import struct
import threading
import time

_STAMP = struct.Struct(">q")


def _produce_steady(bootstrap, topic, rate, seconds, stop):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    interval = 1.0 / rate
    start = time.monotonic()
    n = 0
    while not stop.is_set() and time.monotonic() - start < seconds:
        target = start + n * interval
        now = time.monotonic()
        if now < target:
            time.sleep(min(target - now, 0.002))
            continue
        p.produce(topic, value=_STAMP.pack(time.monotonic_ns()) + b"x" * 92)
        n += 1
        if n % 200 == 0:
            p.poll(0)
    p.flush(10)


def _consume(kind, bootstrap, topic, seconds):
    lat = []
    deadline = time.monotonic() + seconds
    if kind == "fsm_consumer":
        from fsm_consumer import Consumer, TopicPartition

        c = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=100)
        c.assign([TopicPartition(topic, 0)])
        c.position(TopicPartition(topic, 0))
        while time.monotonic() < deadline:
            for records in c.poll(timeout_ms=100).values():
                now = time.monotonic_ns()
                lat.extend(now - _STAMP.unpack_from(r.value)[0] for r in records)
        c.close()
    else:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"lat-{time.time_ns()}",
                "fetch.wait.max.ms": 100,
                "fetch.queue.backoff.ms": 10,
            }
        )
        c.assign([TopicPartition(topic, 0, OFFSET_END)])  # like ours: no group join delay
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.1):
                if m.error() is None:
                    lat.append(time.monotonic_ns() - _STAMP.unpack_from(m.value())[0])
        c.close()
    return lat


def bench_latency(args) -> list[dict]:
    from fsm_consumer.broker import start_broker

    rows = []
    for broker_kind in args.brokers:
        with start_broker(broker_kind) as broker:
            for kind in ("fsm_consumer", "confluent-kafka"):
                rows.append({"bench": "latency", "broker": broker_kind, **_one_latency(args, broker, kind)})
    return rows


def _one_latency(args, broker, kind: str) -> dict:
    topic = f"latency-{kind}"
    broker.create_topic(topic, partitions=1)
    stop = threading.Event()
    result = {}
    consumer = threading.Thread(
        target=lambda: result.setdefault("lat", _consume(kind, broker.bootstrap_servers, topic, args.seconds + 5))
    )  # 2.5 s to settle, 2.5 s for the last records
    consumer.start()
    time.sleep(2.5)  # let the consumer settle at the end of the log
    _produce_steady(broker.bootstrap_servers, topic, args.rate, args.seconds, stop)
    consumer.join()
    lat = sorted(result.get("lat", []))
    if not lat:
        return {"client": kind, "records": 0}
    return {
        "client": kind,
        "rate": args.rate,
        "records": len(lat),
        "p50_ms": round(lat[len(lat) // 2] / 1e6, 2),
        "p99_ms": round(lat[int(len(lat) * 0.99)] / 1e6, 2),
        "mean_ms": round(statistics.fmean(lat) / 1e6, 2),
    }


def table(rows) -> str:
    out = ["| broker | client | produced records/s | received | p50 ms | p99 ms |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r.get('broker', 'tansu')} | {r['client']} | {r.get('rate')} | {r['records']} "
            f"| {r.get('p50_ms')} | {r.get('p99_ms')} |"
        )
    return "\n".join(out)
