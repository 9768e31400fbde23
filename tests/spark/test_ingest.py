"""The main job, ``fsm-consumer ingest``, as a user runs it: in its own process, on its embedded broker
(no --bootstrap-servers), and on a two-process Spark standalone cluster (a master and a worker started
from the pyspark installation) against the session's broker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")

from fsm_consumer.spark import StandaloneCluster  # noqa: E402


def run_ingest(start_ingest, *args: str, timeout: float = 240, **how: bool) -> subprocess.CompletedProcess:
    proc = start_ingest(*args, **how)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:  # the job and its JVM go together, also when the test fails
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def committed_rows(out) -> int:
    """Rows of the files the file sink's log lists (``_spark_metadata``: what committed batches wrote)."""
    log = out / "_spark_metadata"
    paths = []
    for entry in sorted(log.glob("[0-9]*")) if log.is_dir() else []:
        for line in entry.read_text().splitlines()[1:]:  # the first line is the log's version
            paths.append(json.loads(line)["path"])
    return sum(pq.ParquetFile(path.removeprefix("file:")).metadata.num_rows for path in paths)


def written(path: Path) -> list[tuple[int, int]]:
    files = sorted(p for p in path.rglob("*.parquet") if "_checkpoint" not in p.parts)
    assert files, f"no parquet files under {path}"
    rows = []
    for f in files:
        t = pq.read_table(f, columns=["partition", "offset"])
        rows += zip(t.column("partition").to_pylist(), t.column("offset").to_pylist(), strict=False)
    return rows


def test_ingest_on_its_embedded_broker_writes_every_record_once_run_after_run(tmp_path, start_ingest):
    """Run twice into one directory: the second run's embedded broker is new and so is its data, so the
    first run's checkpoint belongs to other records: it starts afresh, says so, moves the first output aside
    (never deletes it), and its summary counts what it wrote."""
    out = tmp_path / "out"
    args = ("--records", "20000", "--partitions", "4", "--to", str(out), "--master", "local[2]")
    done = run_ingest(start_ingest, *args)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "done: this run wrote 20,000 records (20,000 in the output now" in done.stdout, done.stdout[-3000:]
    assert "read them back" in done.stdout and "starting afresh" not in done.stdout
    again = run_ingest(start_ingest, *args)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "starting afresh: this run's embedded broker is new" in again.stdout, again.stdout[-3000:]
    assert "done: this run wrote 20,000 records (20,000 in the output now" in again.stdout, again.stdout[-3000:]
    (previous,) = tmp_path.glob("out.previous-*")
    assert len(written(previous)) == 20_000  # the first run's output, kept
    rows = written(out)
    assert len(rows) == 20_000 and len(set(rows)) == 20_000
    per_partition = {}
    for p, o in rows:
        per_partition.setdefault(p, []).append(o)
    assert sorted(per_partition) == [0, 1, 2, 3]
    assert all(sorted(v) == list(range(len(v))) for v in per_partition.values()), "no gaps, no duplicates"


# On the reference broker only (a cluster's master, worker and executors: ~45 s a broker; CI's 45 minutes):
# what reads the broker is the same source as in local mode, whose tests run on both brokers
@pytest.mark.brokers("kafka")
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


# On the reference broker only (six Spark jobs, a minute a broker; CI's 45 minutes): the check reads topic ids
# and the cluster id from Metadata the same way on both; on Tansu, a new embedded broker's fresh start
# (test_ingest_on_its_embedded_broker_...) and test_ingest_parts.py's cases exercise it
@pytest.mark.brokers("kafka")
def test_a_checkpoint_of_other_data_is_an_error_and_fresh_starts_over(
    tmp_path, broker, make_topic, produce, start_ingest
):
    """Against a cluster (--bootstrap-servers): the checkpoint records the topic and its id; a run on
    another topic, or on the topic deleted and created again with fewer records, is refused naming both,
    and --fresh starts over (the old output moved aside); the same topic again resumes and writes only what
    is new."""
    from confluent_kafka.admin import AdminClient, NewTopic

    first = make_topic(partitions=2)
    produce(first, 600)
    out = tmp_path / "out"

    def ingest(topic: str, *more: str) -> subprocess.CompletedProcess:
        return run_ingest(
            start_ingest, "--bootstrap-servers", broker.bootstrap_servers, "--topic", topic, "--to", str(out), *more
        )

    done = ingest(first)
    assert done.returncode == 0 and "this run wrote 600 records" in done.stdout, done.stdout[-3000:]
    produce(first, 50)
    resumed = ingest(first)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "resuming from the checkpoint" in resumed.stdout
    assert "this run wrote 50 records (650 in the output now" in resumed.stdout, resumed.stdout[-3000:]

    other = make_topic(partitions=2)
    produce(other, 10)
    refused = ingest(other)
    assert refused.returncode == 2, refused.stdout[-3000:]
    assert f"was written reading topic {first!r}" in refused.stdout and f"reads topic {other!r}" in refused.stdout
    assert "--fresh" in refused.stdout and "Traceback" not in refused.stdout

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.delete_topics([first])[first].result(30)
    deadline = time.monotonic() + 30
    while True:  # the broker may take a moment to forget the old topic
        try:
            admin.create_topics([NewTopic(first, 2)])[first].result(30)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    produce(first, 20)  # fewer records than the checkpoint's offsets
    recreated = ingest(first)
    assert recreated.returncode == 2, recreated.stdout[-3000:]
    assert "its offsets belong to other records" in recreated.stdout, recreated.stdout[-3000:]
    fresh = ingest(first, "--fresh")
    assert fresh.returncode == 0, fresh.stdout[-3000:]
    assert (
        "starting afresh: --fresh" in fresh.stdout and "this run wrote 20 records (20 in the output now" in fresh.stdout
    )
    assert len(list(tmp_path.glob("out.previous-*"))) == 1


def test_a_piped_run_shows_progress_within_its_batch_and_no_warnings(tmp_path, start_ingest):
    """A user's run (their environment, output piped, not --quiet): the whole topic is one availableNow
    batch, yet progress lines move through it (records read of records planned, rate, time left); and
    nothing a user did not ask for: no Spark startup warnings, no pandas FutureWarning, no traceback."""
    out = tmp_path / "out"
    done = run_ingest(
        start_ingest,
        "--records",
        "150000",
        "--partitions",
        "2",
        "--to",
        str(out),
        "--master",
        "local[1]",
        "--progress-every",
        "0.25",
        quiet=False,
        as_a_user=True,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("progress: ")]
    within = [
        line for line in lines if re.match(r"progress: (?!0 of)[\d,]+ of 150,000 records read \((?!100%)\d+%\)", line)
    ]
    assert within, "no progress line inside the batch:\n" + "\n".join(lines[:40])
    assert "records/s" in within[0] and "s left" in " ".join(within)
    assert re.match(
        r"progress: 150,000 records read in [\d.]+ s, [\d,]+ records/s on average; batches done 1$", lines[-1]
    )
    assert "spark: starting" in done.stdout and "planning the first batch" in done.stdout  # no silent Spark start
    noise = [
        line
        for line in done.stdout.splitlines()
        if re.search(r"WARN|[Ww]arning|NativeCodeLoader|hostname|log level|Traceback", line)
    ]
    assert noise == [], "\n".join(noise)
