"""The main job, ``fsm-consumer ingest``, as a user runs it: in its own process, on its embedded broker
(no --bootstrap-servers), and on a two-process Spark standalone cluster (a master and a worker started
from the pyspark installation) against the session's broker."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")

from fsm_consumer.spark import StandaloneCluster  # noqa: E402


def run_ingest(start_ingest, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    proc = start_ingest(*args)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:  # the job and its JVM go together, also when the test fails
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def written(path: Path) -> list[tuple[int, int]]:
    files = sorted(p for p in path.rglob("*.parquet") if "_checkpoint" not in p.parts)
    assert files, f"no parquet files under {path}"
    rows = []
    for f in files:
        t = pq.read_table(f, columns=["partition", "offset"])
        rows += zip(t.column("partition").to_pylist(), t.column("offset").to_pylist(), strict=False)
    return rows


def test_ingest_on_its_embedded_broker_writes_every_record_once(tmp_path, start_ingest):
    out = tmp_path / "out"
    done = run_ingest(start_ingest, "--records", "20000", "--partitions", "4", "--to", str(out), "--master", "local[2]")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "done: 20,000 records" in done.stdout and "read them back" in done.stdout
    rows = written(out)
    assert len(rows) == 20_000 and len(set(rows)) == 20_000
    per_partition = {}
    for p, o in rows:
        per_partition.setdefault(p, []).append(o)
    assert sorted(per_partition) == [0, 1, 2, 3]
    assert all(sorted(v) == list(range(len(v))) for v in per_partition.values()), "no gaps, no duplicates"


def test_ingest_on_a_standalone_cluster(tmp_path, broker, make_topic, produce, start_ingest):
    topic = make_topic(partitions=3)
    produce(topic, 3000, value=lambda i: b"v%05d" % i)
    out = tmp_path / "out"
    with StandaloneCluster(workers=1, cores=2, memory="1g", workdir=str(tmp_path / "cluster")) as cluster:
        assert cluster.alive_workers() == 1
        done = run_ingest(
            start_ingest,
            "--bootstrap-servers",
            broker.bootstrap_servers,
            "--topic",
            topic,
            "--to",
            str(out),
            "--master",
            cluster.master_url,
            "--commit-to-group",
            f"ingest-{topic}",
        )
        assert done.returncode == 0, done.stdout[-3000:]
        # the executors ran on the worker: its work directory holds the application's executor logs
        assert any((tmp_path / "cluster" / "work").glob("app-*/*/stderr")), "no executor ran on the worker"
    rows = written(out)
    assert len(rows) == 3000 and len(set(rows)) == 3000
    from confluent_kafka import Consumer, TopicPartition

    peer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"ingest-{topic}"})
    try:
        committed = peer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    finally:
        peer.close()
    ends = {p: 0 for p in range(3)}  # the producer may leave a partition empty: its end, 0, is committed too
    for p, o in rows:
        ends[p] = max(ends.get(p, -1), o + 1)
    assert {c.partition: c.offset for c in committed} == ends, "the group is at the last batch's end"
