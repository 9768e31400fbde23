"""One group on Apache Kafka: two fsm_consumer members, a librdkafka member and Kafka's own Java consumer."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "group"))  # importlib mode: the group harness

from group_harness import Member, assert_disjoint, describe, wait_until  # noqa: E402

from fsm_consumer.broker import KafkaBroker  # noqa: E402

pytestmark = pytest.mark.brokers("kafka")

PEER_SOURCE = Path(__file__).parents[3] / "tools" / "peers" / "JavaMember.java"
PARTITIONS = 8
TOTAL = 100_000


def compile_peer(kafka: KafkaBroker, into: Path) -> Path:
    javac = Path(kafka.java).with_name("javac")
    done = subprocess.run(
        [str(javac), "-cp", f"{kafka.libs}/*", "-d", str(into), str(PEER_SOURCE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return into


class Ownership:
    """What a peer owned when (intervals [partition, start, end], as the group harness's members) and consumed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.intervals: list[list] = []
        self.open: dict[int, list] = {}
        self.consumed: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def opened(self, partitions) -> None:
        now = time.monotonic()
        with self.lock:
            for p in partitions:
                self.open[p] = iv = [p, now, None]
                self.intervals.append(iv)

    def closed(self, partitions) -> None:
        now = time.monotonic()
        with self.lock:
            for p in list(partitions):
                iv = self.open.pop(p, None)
                if iv is not None:
                    iv[2] = now

    def owned(self) -> set[int]:
        with self.lock:
            return set(self.open)


class JavaPeer(Ownership):
    """JavaMember in its own JVM, read through its JSON lines; ownership timed as the lines arrive."""

    def __init__(self, kafka: KafkaBroker, classes: Path, group: str, topic: str, strategy: str) -> None:
        super().__init__("java")
        self.proc = subprocess.Popen(
            [
                kafka.java,
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                "-cp",
                f"{classes}:{kafka.libs}/*",
                "JavaMember",
                kafka.bootstrap_servers,
                group,
                topic,
                strategy,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            ev = json.loads(line)
            if ev["ev"] == "assigned":
                self.opened(ev["parts"])
            elif ev["ev"] in ("revoked", "lost"):
                self.closed(ev["parts"])
            elif ev["ev"] == "records":
                with self.lock:
                    self.consumed.extend((ev["p"], o) for o in ev["offsets"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # the shutdown hook closes the consumer (revoking, committing, leaving)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.reader.join(5)
        self.closed(self.owned())


class RdkafkaPeer(Ownership):
    """A confluent-kafka (librdkafka) member polling on its own thread."""

    def __init__(self, kafka: KafkaBroker, group: str, topic: str, strategy: str) -> None:
        from confluent_kafka import Consumer as PeerConsumer

        super().__init__("librdkafka")
        self._stop = threading.Event()
        self.consumer = PeerConsumer(
            {
                "bootstrap.servers": kafka.bootstrap_servers,
                "group.id": group,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": strategy,
                "client.id": "librdkafka-member",
                "auto.commit.interval.ms": 200,
            }
        )
        # with cooperative-sticky the callbacks carry the increments; with eager, the whole set
        self.consumer.subscribe(
            [topic],
            on_assign=lambda c, ps: self.opened(tp.partition for tp in ps),
            on_revoke=lambda c, ps: self.closed(tp.partition for tp in ps),
            on_lost=lambda c, ps: self.closed(tp.partition for tp in ps),
        )
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for m in self.consumer.consume(num_messages=1000, timeout=0.05):
                if m.error() is None:
                    with self.lock:
                        self.consumed.append((m.partition(), m.offset()))
        self.consumer.close()  # revokes (callback), commits, leaves

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.closed(self.owned())


def produce_spread(kafka: KafkaBroker, topic: str, count: int) -> set[tuple[int, int]]:
    from confluent_kafka import Producer

    delivered: set[tuple[int, int]] = set()
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 10})

    def report(err, msg):
        assert err is None, err
        delivered.add((msg.partition(), msg.offset()))

    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v", partition=i % PARTITIONS, on_delivery=report)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return delivered


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_fsm_librdkafka_and_java_members_share_a_group(kafka, strategy, tmp_path):
    topic = f"mixed-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    classes = compile_peer(kafka, tmp_path)
    produced = produce_spread(kafka, topic, TOTAL // 2)
    members: list = []
    try:
        fsm = [
            Member(
                kafka.bootstrap_servers,
                group,
                topic,
                f"fsm{i}",
                partition_assignment_strategy=[strategy],
                session_timeout_ms=10000,
                heartbeat_interval_ms=1000,
                follower_sync_delay_ms=0,
            )
            for i in range(2)
        ]
        members += fsm
        members.append(RdkafkaPeer(kafka, group, topic, strategy))
        members.append(JavaPeer(kafka, classes, group, topic, strategy))

        def settled() -> bool:
            owned = [m.owned() for m in members]
            return (
                all(m.state == "stable" for m in fsm)
                and all(owned)
                and sorted(p for o in owned for p in o) == list(range(PARTITIONS))
            )

        def explain() -> str:
            return f"{describe(fsm)}; peers own {[sorted(m.owned()) for m in members[2:]]}"

        wait_until(settled, 90, "four members owning disjoint partitions that cover the topic", explain)
        produced |= produce_spread(kafka, topic, TOTAL - TOTAL // 2)

        def consumed() -> set:
            return {x for m in members for x in list(m.consumed)}

        wait_until(
            lambda: consumed() >= produced,
            90,
            "every record to be consumed",
            lambda: f"{len(consumed() & produced)} of {len(produced)}; {explain()}",
        )
        final = [m.owned() for m in members]
    finally:
        for m in members:
            m.stop()
    assert len(produced) == TOTAL
    assert sorted(p for o in final for p in o) == list(range(PARTITIONS)), "disjoint and complete"
    assert all(final), "every member, ours, librdkafka's and Java's, owned something"
    assert all(m.consumed for m in members), "every member consumed"
    assert_disjoint(members)
