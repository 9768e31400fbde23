"""One consumer client reading a whole topic, run in a child process so CPU and RSS are its own.

Each returns (records, records_in_first_batch, first_record_time, last_record_time); times are
time.monotonic(). Every client takes at most 10,000 records per call, so no client can swallow a whole
scenario in one call and the rate (after the first batch) compares like with like.
"""

from __future__ import annotations

import os
import time

BATCH = 10_000
HEADERS_ENV = "FSM_BENCH_HEADERS"  # set for a client's process when the records have headers: read them


def _timed(read_some, expect: int) -> tuple[int, int, float, float]:
    """Call ``read_some()`` (records returned by one call) until ``expect`` records came."""
    got, first, first_n, deadline = 0, None, 0, time.monotonic() + 300
    while got < expect and time.monotonic() < deadline:
        n = read_some()
        if n and first is None:
            first, first_n = time.monotonic(), n
        got += n
    last = time.monotonic()
    return got, first_n, first or last, last


def _fsm(bootstrap: str, topic: str, partitions: int, opts: dict):
    from fsm_consumer.consumer import Consumer
    from fsm_consumer.fetch import TopicPartition

    c = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **opts)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    return c


def run_fsm(bootstrap: str, topic: str, partitions: int, expect: int, opts: dict) -> tuple[int, int, float, float]:
    c = _fsm(bootstrap, topic, partitions, opts)
    try:
        return _timed(lambda: sum(len(r) for r in c.poll(timeout_ms=1000, max_records=BATCH).values()), expect)
    finally:
        c.close()


def run_fsm_columnar(
    bootstrap: str, topic: str, partitions: int, expect: int, opts: dict
) -> tuple[int, int, float, float]:
    c = _fsm(bootstrap, topic, partitions, opts)
    try:
        return _timed(lambda: c.poll_batch(timeout_ms=1000, max_records=BATCH).num_rows, expect)
    finally:
        c.close()


def run_kafka_python(
    bootstrap: str, topic: str, partitions: int, expect: int, opts: dict
) -> tuple[int, int, float, float]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, **opts)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    try:
        return _timed(lambda: sum(len(r) for r in c.poll(timeout_ms=1000, max_records=BATCH).values()), expect)
    finally:
        c.close()


def run_confluent(
    bootstrap: str, topic: str, partitions: int, expect: int, opts: dict
) -> tuple[int, int, float, float]:
    from confluent_kafka import Consumer, TopicPartition

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{time.time_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    conf.update(opts)
    c = Consumer(conf)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    if os.environ.get(HEADERS_ENV):  # it parses headers only when asked: the others hand them out

        def read_some() -> int:
            n = 0
            for m in c.consume(num_messages=BATCH, timeout=1.0):
                if m.error() is None:
                    m.headers()
                    n += 1
            return n

    else:

        def read_some() -> int:
            return sum(1 for m in c.consume(num_messages=BATCH, timeout=1.0) if m.error() is None)

    try:
        return _timed(read_some, expect)
    finally:
        c.close()


def run_aiokafka(bootstrap: str, topic: str, partitions: int, expect: int, opts: dict) -> tuple[int, int, float, float]:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main():
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest", **opts
        )
        await c.start()
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        got, first, first_n, deadline = 0, None, 0, time.monotonic() + 300
        try:
            while got < expect and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=1000, max_records=BATCH)
                n = sum(len(records) for records in batch.values())
                if n and first is None:
                    first, first_n = time.monotonic(), n
                got += n
        finally:
            last = time.monotonic()
            await c.stop()
        return got, first_n, first or last, last

    return asyncio.run(main())


def run_raw_fetch(
    bootstrap: str, topic: str, partitions: int, expect: int, opts: dict
) -> tuple[int, int, float, float]:
    """The wire limit of this stack: Fetch requests with the consumer's sizes, one in flight, through
    fsm_consumer's transport (framing and kafka-python's response parsing), and nothing of the records
    decoded past each batch header (its record count, and where the next fetch starts). What a consumer
    could reach if decoding and handing out records cost nothing."""
    import struct

    from kafka.protocol.consumer import FetchRequest

    from fsm_consumer._config import ConsumerConfig
    from fsm_consumer.transport import KafkaTransport

    config = ConsumerConfig.from_kwargs(bootstrap_servers=bootstrap)
    transport = KafkaTransport(config)
    head = struct.Struct(">qi")  # a batch's base offset and length (the bytes after these 12)
    delta = struct.Struct(">i")  # lastOffsetDelta at 23, recordCount at 57 (magic v2)
    offsets = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + 30
    node = transport.least_loaded_node()
    while node is None and time.monotonic() < deadline:  # a single broker: the bootstrap connection leads all
        transport.poll(10)
        node = transport.least_loaded_node()

    def read_some() -> int:
        parts = [
            FetchRequest.FetchTopic.FetchPartition(
                partition=p,
                current_leader_epoch=-1,
                fetch_offset=o,
                log_start_offset=-1,
                partition_max_bytes=config.max_partition_fetch_bytes,
            )
            for p, o in offsets.items()
        ]
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=1,
            # as the consumer asks: no more than the partitions' limits add up to
            max_bytes=min(config.fetch_max_bytes, partitions * config.max_partition_fetch_bytes),
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=parts)],
            forgotten_topics_data=[],
            rack_id="",
        )
        transport.send(request, node, max_version=12)
        done: list = []
        while not done:
            done = transport.poll(1000)
        if done[0].error is not None:
            raise done[0].error
        n = 0
        for answer in done[0].response.responses:
            for p in answer.partitions:
                data = p.records
                if not data:
                    continue
                pos, size = 0, len(data)
                while pos + 61 <= size:
                    base, length = head.unpack_from(data, pos)
                    if pos + 12 + length > size:
                        break  # a partial batch at the end of the answer
                    n += delta.unpack_from(data, pos + 57)[0]
                    offsets[p.partition_index] = base + delta.unpack_from(data, pos + 23)[0] + 1
                    pos += 12 + length
        return n

    try:
        return _timed(read_some, expect)
    finally:
        transport.close()


CLIENTS = {
    "fsm_consumer": (run_fsm, {}),
    "fsm_consumer(poll_batch)": (run_fsm_columnar, {}),
    "fsm_consumer(poll_batch fetch_ahead=False)": (run_fsm_columnar, {"fetch_ahead": False}),
    "fsm_consumer(fetch_ahead=False)": (run_fsm, {"fetch_ahead": False}),
    "kafka-python": (run_kafka_python, {}),
    "kafka-python(check_crcs=False)": (run_kafka_python, {"check_crcs": False}),
    "confluent-kafka(fetch.queue.backoff.ms=10)": (run_confluent, {"fetch.queue.backoff.ms": 10}),
    "confluent-kafka(defaults)": (run_confluent, {}),
    "aiokafka(getmany)": (run_aiokafka, {}),
    "java(KafkaConsumer)": (None, {}),  # tools/peers/JavaBench.java in its own JVM: see consume.run_child
    "raw Fetch (wire limit)": (run_raw_fetch, {}),
}
