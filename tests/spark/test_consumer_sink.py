"""ConsumerSink: a group Consumer's records appended to a parquet path, offsets committed after
each write. A crash between a write and its commit repeats that micro-batch only; a revocation
writes and commits before the partitions go."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from fsm_consumer import Consumer, ConsumerRebalanceListener, TopicPartition  # noqa: E402
from fsm_consumer.spark import ConsumerSink  # noqa: E402

pytestmark = pytest.mark.integration
HELPER = Path(__file__).with_name("sink_process.py")
# follower_sync_delay_ms: Tansu 0.6 wants the leader's SyncGroup first (see tests/integration/group)
FAST = dict(
    session_timeout_ms=3000,
    heartbeat_interval_ms=300,
    auto_offset_reset="earliest",
    request_timeout_ms=5000,
    follower_sync_delay_ms=400,
    enable_auto_commit=False,
)


def wait_until(check, timeout, what):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class SinkProcess:
    """sink_process.py in its own process group (with its Spark JVM): killed whole, also on failure."""

    def __init__(self, tmp_path, name, args, hold=None):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYSPARK_PYTHON": sys.executable}
        env.pop("SINK_HOLD_BATCH", None)
        if hold is not None:
            env["SINK_HOLD_BATCH"] = str(hold)
        self.stderr_path = tmp_path / f"{name}.stderr"
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(HELPER), *args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
                cwd=tmp_path,
                start_new_session=True,
            )
        self.events: list[dict] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def wait_for(self, ev, timeout):
        def seen():
            if self.proc.poll() is not None and not any(e["ev"] == ev for e in self.events):
                raise AssertionError(
                    f"sink process exited ({self.proc.returncode}) before {ev!r}; stderr:\n"
                    + self.stderr_path.read_text()[-3000:]
                )
            return any(e["ev"] == ev for e in self.events)

        wait_until(seen, timeout, f"{ev!r} from the sink process")
        return next(e for e in self.events if e["ev"] == ev)

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(5)


def test_a_crash_between_write_and_commit_repeats_only_that_batch(spark, broker, make_topic, produce, tmp_path):
    topic = make_topic(partitions=3)
    produced = {}
    for p in range(3):
        for (part, offset), i in zip(
            produce(topic, 400, partition=p, value=lambda i, p=p: f"{p}-{i}"), range(400), strict=True
        ):
            produced[(part, offset)] = f"{p}-{i}".encode()
    ends = {p: 1 + max(o for (q, o) in produced if q == p) for p in range(3)}
    path = str(tmp_path / "table")
    args = [broker.bootstrap_servers, f"g-{topic}", topic, path, json.dumps(ends), "250"]
    first = SinkProcess(tmp_path, "first", args, hold=2)
    try:
        held = first.wait_for("hold", 180)
    finally:
        first.kill()  # SIGKILL: batch 2 is written, its commit never sent
    assert [e["batch"] for e in first.events if e["ev"] == "written"] == [1]
    second = SinkProcess(tmp_path, "second", args)
    try:
        assert second.wait_for("done", 180)["caught_up"]
        assert second.proc.wait(60) == 0
    finally:
        second.kill()
    rows = spark.read.parquet(path).select("partition", "offset", "value").collect()
    counts = Counter((r.partition, r.offset) for r in rows)
    assert set(counts) == set(produced), "records missing from the table"
    assert all(produced[(r.partition, r.offset)] == r.value for r in rows)
    held_rows = {(int(p), o) for p, (first_offset, nxt) in held["offsets"].items() for o in range(first_offset, nxt)}
    duplicated = {key for key, n in counts.items() if n > 1}
    assert duplicated == held_rows and max(counts.values()) == 2, (
        f"duplicates only from the batch written but not committed: {sorted(duplicated - held_rows)[:10]}"
    )


class _Recorder(ConsumerRebalanceListener):
    """The user's listener: what the sink had done when the user's on_partitions_revoked ran."""

    def __init__(self):
        self.sink = None
        self.revocations = []

    def on_partitions_revoked(self, revoked):
        self.revocations.append((set(revoked), self.sink.pending_rows, dict(self.sink.committed)))


def test_revocation_writes_and_commits_before_the_partitions_go(spark, broker, make_topic, produce, tmp_path):
    from confluent_kafka import Consumer as PeerConsumer

    topic = make_topic(partitions=4)
    group = f"g-{topic}"
    for p in range(4):
        produce(topic, 50, partition=p)
    path = str(tmp_path / "table")
    consumer = Consumer(
        bootstrap_servers=broker.bootstrap_servers, group_id=group, partition_assignment_strategy=["range"], **FAST
    )
    recorder = _Recorder()
    # never due by size or time: only the revocation (and the final flush) writes
    sink = recorder.sink = ConsumerSink(consumer, spark, path, max_records=100_000, max_wait_ms=600_000)
    sink.subscribe([topic], listener=recorder)
    errors, peer_seen, peer_owned = [], [], set()
    stop_peer = threading.Event()

    def run_sink():
        try:
            sink.run()
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    def run_peer():
        pc = PeerConsumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": group,
                "session.timeout.ms": 3000,
                "heartbeat.interval.ms": 300,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "range",
                "enable.auto.commit": False,
            }
        )
        try:
            pc.subscribe([topic], on_assign=lambda c, ps: peer_owned.update(p.partition for p in ps))
            while not stop_peer.is_set():
                m = pc.poll(0.05)
                if m is not None and m.error() is None:
                    peer_seen.append((m.partition(), m.offset()))
        finally:
            pc.close()

    sink_thread = threading.Thread(target=run_sink, daemon=True)
    peer_thread = threading.Thread(target=run_peer, daemon=True)
    sink_thread.start()
    try:
        wait_until(lambda: sink.pending_rows == 200 or errors, 30, "the sink to hold all 200 records")
        assert not errors and not Path(path).exists()
        peer_thread.start()
        wait_until(
            lambda: len(peer_owned) == 2 and consumer.assignment() and len(consumer.assignment()) == 2 or errors,
            60,
            "the group to split the partitions",
        )
        assert not errors, errors
        revoked, pending, committed = recorder.revocations[0]
        assert revoked == {TopicPartition(topic, p) for p in range(4)}  # range is eager: all of them
        assert pending == 0 and committed == {TopicPartition(topic, p): 50 for p in range(4)}
        assert sink.batches_written == 1 and sink.rows_written == 200
        for p in range(4):
            produce(topic, 30, partition=p)
        wait_until(
            lambda: len(peer_seen) == 60 and sink.pending_rows == 60 or errors, 30, "the second records on both members"
        )
    finally:
        sink.stop()
        sink_thread.join(60)
        stop_peer.set()
        if peer_thread.ident is not None:
            peer_thread.join(30)
        consumer.close(timeout_ms=5000)
    assert not errors, errors
    assert not sink_thread.is_alive() and not peer_thread.is_alive()
    written = [(r.partition, r.offset) for r in spark.read.parquet(path).select("partition", "offset").collect()]
    everything = written + peer_seen
    assert len(everything) == len(set(everything)) == 320, "every record once: none lost, none repeated"
    assert {p for p, _ in peer_seen} == peer_owned and all(o >= 50 for _, o in peer_seen)


def test_refuses_what_would_lose_records(spark):
    def consumer(**config):
        return SimpleNamespace(config=SimpleNamespace(**{"group_id": "g", "enable_auto_commit": False, **config}))

    with pytest.raises(ValueError, match="enable_auto_commit=False"):
        ConsumerSink(consumer(enable_auto_commit=True), spark, "/x")
    with pytest.raises(ValueError, match="group_id"):
        ConsumerSink(consumer(group_id=None), spark, "/x")
    with pytest.raises(ValueError, match="exactly one of path and table"):
        ConsumerSink(consumer(), spark)
    if importlib.util.find_spec("delta") is None:
        with pytest.raises(ImportError, match="pip install delta-spark"):
            ConsumerSink(consumer(), spark, "/x", format="delta")
