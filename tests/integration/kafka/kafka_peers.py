"""The peers of the Apache Kafka group tests: Kafka's own Java consumer (tools/peers/JavaMember.java, in its
own JVM) and a confluent-kafka (librdkafka) member, each recording what it owned when and consumed, as the
group harness's fsm_consumer members do; and a producer spreading records over the partitions."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

from fsm_consumer.broker import KafkaBroker

PEER_SOURCE = Path(__file__).parents[3] / "tools" / "peers" / "JavaMember.java"


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
    """A confluent-kafka (librdkafka) member polling on its own thread; ``strategy`` as JavaMember's."""

    def __init__(self, kafka: KafkaBroker, group: str, topic: str, strategy: str) -> None:
        from confluent_kafka import Consumer as PeerConsumer

        super().__init__("librdkafka")
        self._stop = threading.Event()
        settings = {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "client.id": "librdkafka-member",
            "auto.commit.interval.ms": 200,
        }
        if strategy.startswith("consumer"):  # KIP-848: the broker assigns and times the session
            settings["group.protocol"] = "consumer"
            if ":" in strategy:
                settings["group.remote.assignor"] = strategy.split(":", 1)[1]
        else:
            settings.update(
                {"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000, "partition.assignment.strategy": strategy}
            )
        self.consumer = PeerConsumer(settings)
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


def produce_spread(kafka: KafkaBroker, topic: str, count: int, partitions: int = 8) -> set[tuple[int, int]]:
    from confluent_kafka import Producer

    delivered: set[tuple[int, int]] = set()
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 10})

    def report(err, msg):
        assert err is None, err
        delivered.add((msg.partition(), msg.offset()))

    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v", partition=i % partitions, on_delivery=report)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return delivered
