"""The records of a scenario run (``_freeze_run``, ``_churn_run``): the topic, created and waited for, and a
producer that writes small keyed records at a steady rate on its own thread and remembers what was
delivered (rule L's counts). Needs confluent-kafka (a dev dependency)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

__all__ = ["Producer", "create_topic", "produced_file", "produced_ranges", "unacknowledged"]


def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 10.0) -> None:
    """Create ``topic`` (or accept that it exists) and wait until every partition has a leader."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
    try:
        future.result(timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    deadline = time.monotonic() + timeout_s
    while True:
        meta = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 for p in meta.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {topic!r}: metadata shows {meta} after {timeout_s} s")
        time.sleep(0.05)


class Producer:
    """Produces small keyed records at a steady rate on its own thread (at most ``limit`` of them);
    remembers what was delivered. Record ``n`` has the value ``v<n>`` and the key ``k<n>``, or, with
    ``keys``, ``k<n % keys>``: that many keys, each spread over many records (what key order is about)."""

    def __init__(
        self, bootstrap: str, topic: str, rate: float, limit: int | None = None, keys: int | None = None
    ) -> None:
        from confluent_kafka import Producer as Librdkafka

        self._producer = Librdkafka({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 30000})
        self._topic, self._rate, self._limit, self._keys = topic, rate, limit, keys
        self._delivered: dict[tuple[str, int], set[int]] = defaultdict(set)
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scenario-producer", daemon=True)
        self._flushed = False
        self.sent = 0

    def start(self) -> None:
        self._thread.start()

    def _report(self, err: Any, msg: Any) -> None:  # librdkafka's delivery callback, inside poll()/flush()
        with self._lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                self._delivered[(msg.topic(), msg.partition())].add(msg.offset())

    def _loop(self) -> None:
        began, sent = time.monotonic(), 0
        while not self._stopping.is_set():
            due = int((time.monotonic() - began) * self._rate)
            if self._limit is not None:
                due = min(due, self._limit)
            while sent < due:
                key = b"k%d" % (sent % self._keys if self._keys else sent)
                try:
                    self._producer.produce(self._topic, key=key, value=b"v%d" % sent, on_delivery=self._report)
                except BufferError:  # the local queue is full: let deliveries drain it
                    break
                sent += 1
            self.sent = sent
            self._producer.poll(0)
            time.sleep(0.01)

    def wait_sent(self, timeout_s: float) -> None:
        """Until the ``limit`` records were handed to the producer (bounded)."""
        deadline = time.monotonic() + timeout_s
        while self.sent < (self._limit or 0) and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop producing and wait for outstanding deliveries. Idempotent."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(5)
        if not self._flushed and not self._thread.is_alive():
            self._flushed = True
            left = self._producer.flush(15)
            if left:
                self.errors.append(f"{left} records still undelivered after 15 s")

    def delivered(self) -> dict[tuple[str, int], set[int]]:
        with self._lock:
            return {tp: set(offsets) for tp, offsets in self._delivered.items()}


Ranges = list[tuple[int, int]]


def produced_ranges(produced: dict[tuple[str, int], set[int]]) -> dict[tuple[str, int], Ranges]:
    """Rule L's input: the ``[first, last]`` runs of the offsets acknowledged to the producer. Not a count
    (offsets ``0..n-1``): when a broker crashes under a write it may hand out an offset whose answer never
    came back, and keep the record or not; only what was acknowledged is known to be there."""
    out: dict[tuple[str, int], Ranges] = {}
    for tp, offsets in produced.items():
        runs: Ranges = []
        for o in sorted(offsets):
            if runs and o == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], o)
            else:
                runs.append((o, o))
        out[tp] = runs
    return out


def produced_file(ranges: dict[tuple[str, int], Ranges]) -> dict[str, dict[str, list[list[int]]]]:
    """As ``fsm-consumer check-history --produced`` reads it: ``{"topic": {"partition": [[first, last], ...]}}``."""
    out: dict[str, dict[str, list[list[int]]]] = {}
    for (topic, partition), runs in sorted(ranges.items()):
        out.setdefault(topic, {})[str(partition)] = [list(r) for r in runs]
    return out


def unacknowledged(produced: dict[tuple[str, int], set[int]]) -> int:
    """Offsets below each partition's last acknowledged one that were never acknowledged to the producer
    (a broker crash under a write leaves such gaps): counted beside rule L, which needs only the others."""
    return sum(max(o) + 1 - len(o) for o in produced.values() if o)
