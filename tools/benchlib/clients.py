"""One consumer client reading a whole topic, run in a child process so CPU and RSS are its own.

Each returns (records, first_record_time, last_record_time); times are time.monotonic().
"""

from __future__ import annotations

import time


def run_fsm(bootstrap: str, topic: str, partitions: int, expect: int, opts: dict) -> tuple[int, float, float]:
    from fsm_consumer.consumer import Consumer
    from fsm_consumer.fetch import TopicPartition

    c = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **opts)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    got, first, deadline = 0, None, time.monotonic() + 300
    while got < expect and time.monotonic() < deadline:
        batch = c.poll(timeout_ms=1000, max_records=100_000)
        if batch and first is None:
            first = time.monotonic()
        for records in batch.values():
            got += len(records)
    last = time.monotonic()
    c.close()
    return got, first or last, last


def run_kafka_python(bootstrap: str, topic: str, partitions: int, expect: int, opts: dict) -> tuple[int, float, float]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, **opts)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    got, first, deadline = 0, None, time.monotonic() + 300
    while got < expect and time.monotonic() < deadline:
        batch = c.poll(timeout_ms=1000, max_records=100_000)
        if batch and first is None:
            first = time.monotonic()
        for records in batch.values():
            got += len(records)
    last = time.monotonic()
    c.close()
    return got, first or last, last


def run_confluent(bootstrap: str, topic: str, partitions: int, expect: int, opts: dict) -> tuple[int, float, float]:
    from confluent_kafka import Consumer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}", "enable.auto.commit": False,
            "auto.offset.reset": "earliest"}
    conf.update(opts)
    c = Consumer(conf)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, first, deadline = 0, None, time.monotonic() + 300
    while got < expect and time.monotonic() < deadline:
        msgs = c.consume(num_messages=10_000, timeout=1.0)
        if msgs and first is None:
            first = time.monotonic()
        for m in msgs:
            if m.error() is None:
                got += 1
    last = time.monotonic()
    c.close()
    return got, first or last, last


CLIENTS = {
    "fsm_consumer": (run_fsm, {}),
    "kafka-python": (run_kafka_python, {}),
    "kafka-python(check_crcs=False)": (run_kafka_python, {"check_crcs": False}),
    "confluent-kafka(fetch.queue.backoff.ms=10)": (run_confluent, {"fetch.queue.backoff.ms": 10}),
    "confluent-kafka(defaults)": (run_confluent, {}),
}
