"""One share group (KIP-932) on Apache Kafka with three clients in it: fsm_consumer's ShareConsumer, Kafka's own
KafkaShareConsumer (tools/peers/JavaShareMember.java, in its own JVM) and confluent-kafka's ShareConsumer
(librdkafka's preview, on a thread).

Every record produced must be accepted exactly once across the three, counting only acceptances the member's
client confirmed: fsm_consumer's commit callback (which commit_sync() also runs) with error None, Java's
AcknowledgementCommitCallback with a null exception, confluent-kafka's acknowledgement commit callback with
exception None. Each of the three must have been handed some records, and the coordinator must show the three
members while they run.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from kafka.errors import GroupIdNotFoundError

from fsm_consumer.broker._kafka_jars import KAFKA_VERSION, cache_dir
from fsm_consumer.share import AcknowledgeType, ShareConsumer
from fsm_consumer.share._admin import ShareGroupAdmin, set_group_config

pytestmark = pytest.mark.brokers("kafka")

PEER_SOURCE = Path(__file__).parents[3] / "tools" / "peers" / "JavaShareMember.java"
TOTAL = 3000
MAX_POLL = 50  # each member's max poll records: what one fetch acquires (record_limit) or about it (librdkafka)

Offset = tuple[int, int]  # (partition, offset)


def compile_share_peer(kafka) -> Path:
    """The peer compiled with javac against the cached kafka-clients, into the cache keyed by its source (compiled
    into a fresh directory renamed into place, so two runs at once never see half a class); skips without javac."""
    javac = Path(kafka.java).with_name("javac")
    if not os.access(javac, os.X_OK):
        pytest.skip(f"no javac next to {kafka.java} (a JRE without the JDK): the Java share peer cannot be compiled")
    digest = hashlib.sha256(PEER_SOURCE.read_bytes()).hexdigest()[:12]
    classes = cache_dir() / f"share-peer-{KAFKA_VERSION}-{digest}"
    if (classes / "JavaShareMember.class").is_file():
        return classes
    building = classes.with_name(f"{classes.name}.{uuid.uuid4().hex[:8]}")
    building.mkdir(parents=True)
    done = subprocess.run(
        [str(javac), "-cp", f"{kafka.libs}/*", "-d", str(building), str(PEER_SOURCE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"javac could not compile {PEER_SOURCE}: {done.stderr[-2000:]}"
    try:
        building.rename(classes)
    except OSError:  # another run put it in place first
        shutil.rmtree(building, ignore_errors=True)
    return classes


class Peer:
    """What one member was handed (partition, offset, delivery count) and which acceptances its client confirmed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.delivered: list[tuple[int, int, int]] = []
        self.accepted: list[Offset] = []  # confirmed by the member's client
        self.failed: list[tuple[Offset, str]] = []  # acknowledgements its client reported failed
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def handed(self, partition: int, offset: int, count: int) -> None:
        with self.lock:
            self.delivered.append((partition, offset, count))

    def outcome(self, offsets: dict[int, set[int]], error: object) -> None:
        with self.lock:
            for partition, os_ in offsets.items():
                if error is None:
                    self.accepted.extend((partition, o) for o in os_)
                else:
                    self.failed.extend(((partition, o), str(error)) for o in os_)

    def confirmed(self) -> set[Offset]:
        with self.lock:
            return set(self.accepted)

    def summary(self) -> str:
        with self.lock:
            return (
                f"{self.name}: {len(self.delivered)} delivered, {len(self.accepted)} accepted, "
                f"{len(self.failed)} failed, errors {self.errors[:3]}"
            )


class FsmPeer(Peer):
    """fsm_consumer's ShareConsumer polling on its own thread."""

    def __init__(self, bootstrap: str, group: str, topic: str, mode: str) -> None:
        super().__init__("fsm")
        self.mode = mode
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(bootstrap, group, topic), daemon=True)
        self.thread.start()

    def _run(self, bootstrap: str, group: str, topic: str) -> None:
        try:
            with ShareConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                client_id="fsm-share-member",
                share_acknowledgement_mode=self.mode,
                share_acquire_mode="record_limit",
                max_poll_records=MAX_POLL,
            ) as consumer:
                consumer.set_acknowledgement_commit_callback(
                    lambda offsets, error: self.outcome({tp.partition: os_ for tp, os_ in offsets.items()}, error)
                )
                while not self._stop.is_set():
                    records = consumer.poll(timeout_ms=100)
                    for r in records:
                        self.handed(r.partition, r.offset, r.delivery_count)
                        if self.mode == "explicit":
                            consumer.acknowledge(r, AcknowledgeType.ACCEPT)
                    if records and self.mode == "explicit":
                        self._commit(consumer)
                self._commit(consumer)  # implicit: what the last poll() handed out
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def _commit(self, consumer: ShareConsumer) -> None:
        consumer.commit_sync(timeout_ms=10_000)  # its per-partition results: the callback saw them, with offsets

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)


class RdkafkaPeer(Peer):
    """confluent-kafka's ShareConsumer (librdkafka's KIP-932 preview) polling on its own thread. Its
    max.poll.records is only a hint to the broker (librdkafka has no record_limit acquire mode)."""

    def __init__(self, bootstrap: str, group: str, topic: str, mode: str) -> None:
        super().__init__("librdkafka")
        self.mode = mode
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(bootstrap, group, topic), daemon=True)
        self.thread.start()

    def _run(self, bootstrap: str, group: str, topic: str) -> None:
        from confluent_kafka import AcknowledgeType as CAck
        from confluent_kafka import ShareConsumer as CShare

        try:
            consumer = CShare(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": group,
                    "client.id": "rdkafka-share-member",
                    "share.acknowledgement.mode": self.mode,
                    "max.poll.records": MAX_POLL,
                    "log_level": 3,  # not the preview's warning on every start
                }
            )
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        try:
            # on this thread, from poll(), commit_sync() or close()
            consumer.set_acknowledgement_commit_callback(
                lambda offsets, error: self.outcome({tp.partition: set(os_) for tp, os_ in offsets.items()}, error)
            )
            consumer.subscribe([topic])
            while not self._stop.is_set():
                messages = consumer.poll(0.1)
                for m in messages:
                    if m.error() is not None:
                        self.errors.append(str(m.error()))
                        continue
                    self.handed(m.partition(), m.offset(), m.delivery_count())
                    if self.mode == "explicit":
                        consumer.acknowledge(m, CAck.ACCEPT)
                if self.mode == "explicit" and messages:
                    consumer.commit_sync(10.0)
            consumer.commit_sync(10.0)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)


class JavaPeer(Peer):
    """JavaShareMember in its own JVM, read through its JSON lines on a thread."""

    def __init__(self, kafka, classes: Path, group: str, topic: str, mode: str, log: Path) -> None:
        super().__init__("java")
        self.log = log
        self.closed = False
        with log.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [
                    kafka.java,
                    "-Xmx256m",
                    "-XX:TieredStopAtLevel=1",
                    "-Xshare:auto",
                    "-cp",
                    f"{classes}:{kafka.libs}/*",
                    "JavaShareMember",
                    kafka.bootstrap_servers,
                    group,
                    topic,
                    "forever",
                    mode,
                    str(MAX_POLL),
                    "record_limit",
                ],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            ev = json.loads(line)
            kind = ev["ev"]
            if kind == "record":
                self.handed(ev["p"], ev["o"], ev["n"])
            elif kind == "ack":
                self.outcome({ev["p"]: set(ev["offsets"])}, ev["error"])
            elif kind == "error":
                with self.lock:
                    self.errors.append(ev["error"])
            elif kind == "closed":
                self.closed = True

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # its shutdown hook wakes poll() up and close()s: acknowledgements, then leaving
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.reader.join(5)

    def stderr_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-1500:]
        except OSError:
            return ""


def _produce_in_steps(bootstrap: str, topic: str, partitions: int, total: int, step: int = 50) -> set[Offset]:
    """``total`` records over the partitions in rounds of ``step`` (each flushed, so each is a batch of its own
    or a few): while the three members fetch, each round goes to whoever asks, not one big batch to the first."""
    from confluent_kafka import Producer

    produced: set[Offset] = set()
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def report(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            produced.add((msg.partition(), msg.offset()))

    for start in range(0, total, step):
        for i in range(start, min(total, start + step)):
            producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions, on_delivery=report)
        assert producer.flush(10) == 0
        time.sleep(0.02)
    assert not errors, errors[:3]
    return produced


def _wait(condition, timeout_s: float, what: str, explain) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s:g} s for {what}: {explain()}")
        time.sleep(0.1)


def _latecomer(bootstrap: str, group: str, topic: str, partitions: int) -> tuple[list, bool]:
    """What a new fsm_consumer member of the group is handed within 2 s of getting its assignment (every partition,
    alone in the group), and whether it got it (within 10 s)."""
    with ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id="fsm-latecomer") as late:
        got: list[tuple[int, int, int]] = []
        deadline = time.monotonic() + 10
        assigned_at = None
        while time.monotonic() < (deadline if assigned_at is None else assigned_at + 2):
            got.extend((r.partition, r.offset, r.delivery_count) for r in late.poll(timeout_ms=200))
            if assigned_at is None and late.metrics_flat()["assigned-partitions"] == partitions:
                assigned_at = time.monotonic()
        return got, assigned_at is not None


@pytest.mark.parametrize(
    ("partitions", "fsm_mode", "java_mode", "rdkafka_mode"),
    [(1, "explicit", "implicit", "implicit"), (3, "implicit", "explicit", "explicit")],
    ids=["1-partition", "3-partitions"],
)
def test_fsm_java_and_librdkafka_members_share_one_group(
    broker, make_topic, tmp_path, partitions, fsm_mode, java_mode, rdkafka_mode
):
    """One partition: the three take turns on it, each fetch acquiring about MAX_POLL records. Three partitions:
    Kafka 4.2's share assignor ("simple") gives each member one partition of its own (it shares a partition only
    when there are more members than partitions), so this variant checks the three side by side, each on its own
    share session, with the acknowledgement modes swapped."""
    classes = compile_share_peer(broker)
    topic = make_topic(partitions=partitions)
    group = f"share-mixed-{uuid.uuid4().hex[:10]}"
    set_group_config(broker.bootstrap_servers, group, {"share.auto.offset.reset": "earliest"})
    bootstrap = broker.bootstrap_servers
    peers: list[Peer] = []
    with ShareGroupAdmin(bootstrap_servers=bootstrap, timeout_ms=10_000) as admin:
        try:
            java = JavaPeer(broker, classes, group, topic, java_mode, tmp_path / "java.stderr")
            peers.append(java)
            peers.append(FsmPeer(bootstrap, group, topic, fsm_mode))
            peers.append(RdkafkaPeer(bootstrap, group, topic, rdkafka_mode))

            def explain() -> str:
                return "; ".join(p.summary() for p in peers) + f"; java stderr: {java.stderr_tail()!r}"

            described: list = []

            def three_members_fetching() -> bool:
                """Three members, each holding its assignment (its epoch caught up with the group's assignment):
                records produced before would go to whoever fetches first, one big batch to one member."""
                try:
                    now = admin.describe_group(group)
                except GroupIdNotFoundError:  # until the first member joined
                    return False
                described[:] = [now]
                return len(now.members) == 3 and all(
                    m.assignment and m.epoch == now.assignment_epoch for m in now.members
                )

            started = time.monotonic()
            _wait(three_members_fetching, 40, "three members with their assignments", lambda: f"{described}")
            joined_s = time.monotonic() - started
            produced = _produce_in_steps(bootstrap, topic, partitions, TOTAL)

            def all_accepted() -> bool:
                return set().union(*(p.confirmed() for p in peers)) >= produced

            _wait(all_accepted, 40, "every record to be accepted", explain)
            drained_s = time.monotonic() - started - joined_s
            during = admin.describe_group(group)
        finally:
            for peer in reversed(peers):
                peer.stop()
        left: list = []

        def everyone_left() -> bool:  # each client leaves the group as it closes
            left[:] = [admin.describe_group(group)]
            return not left[0].members

        _wait(everyone_left, 10, "the three members to leave the group", lambda: f"{left}")
    # every record settled for the group: a new member finds none to deliver (one released or whose
    # acknowledgement was lost would come back to it)
    leftover, late_assigned = _latecomer(bootstrap, group, topic, partitions)
    print(f"joined in {joined_s:.1f} s, drained in {drained_s:.1f} s; " + "; ".join(p.summary() for p in peers))

    (joined,) = described
    for seen in (joined, during):
        assert sorted(m.client_id for m in seen.members) == [
            "fsm-share-member",
            "java-share-member",
            "rdkafka-share-member",
        ], seen
        assert all(m.subscribed_topics == (topic,) for m in seen.members), seen
        assert {tp.partition for m in seen.members for tp in m.assignment} == set(range(partitions)), seen
    assert len(produced) == TOTAL
    assert all(not p.errors for p in peers), explain()
    assert java.closed, f"the Java peer did not close cleanly: {java.stderr_tail()!r}"

    counts = collections.Counter(o for p in peers for o in p.accepted)
    twice = sorted(o for o, n in counts.items() if n > 1)
    assert not twice, f"{len(twice)} records accepted more than once, e.g. {twice[:5]}; {explain()}"
    assert set(counts) == produced, f"{len(produced - set(counts))} never accepted; {explain()}"
    for p in peers:
        assert p.delivered, f"{p.name} was handed no record: {explain()}"
        assert p.accepted, f"{p.name} accepted no record: {explain()}"
        assert {(part, o) for part, o, _ in p.delivered} >= set(p.accepted), f"{p.name} accepted what it never got"
    # each acquisition has its own delivery count: one record handed to two members (a lock ran out, a member
    # closed with it) carries a different count at each
    seen: dict[Offset, list[int]] = collections.defaultdict(list)
    for p in peers:
        for part, o, n in p.delivered:
            seen[(part, o)].append(n)
    reused = {o: ns for o, ns in seen.items() if min(ns) < 1 or len(set(ns)) != len(ns)}
    assert not reused, f"delivery counts not one per acquisition: {list(reused.items())[:5]}"
    assert late_assigned, "the latecomer got no assignment within 10 s: its finding nothing would prove nothing"
    assert leftover == [], f"records delivered again after all were accepted: {leftover[:10]}"
