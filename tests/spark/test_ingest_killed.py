"""Issue 25's Spark scenario: ``fsm-consumer ingest`` killed with SIGKILL in the middle of a micro-batch (its
offsets written to the checkpoint, its commit not) and started again on the same checkpoint: the output, as
Spark's file sink defines it (the files its ``_spark_metadata`` log names), holds every record produced
exactly once: the batch under way when the job died is planned again with the same ranges and read again
whole, none of its records twice. The source's history (option historyPath) shows it, and the checker
(fsm_consumer.history) over its readers' histories finds every record produced handed out (L), positions
without gaps (M)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fsm_consumer.history import check, load
from fsm_consumer.testing._produce import produced_ranges

pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.integration


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:  # the job and its JVM go together
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _batches(checkpoint: Path, kind: str) -> set[int]:
    d = checkpoint / kind
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.exists() else set()


def _committed_rows(out: Path) -> tuple[list[tuple[int, int]], int]:
    """(partition, offset) of every row in the files the sink's metadata log names; and how many parquet
    files lie there that it does not name (what the killed batch left behind)."""
    named: set[str] = set()
    for log in sorted((out / "_spark_metadata").iterdir()):
        if not log.name.split(".")[0].isdigit():
            continue
        for line in log.read_text().splitlines()[1:]:  # the first line is the log's version ("v1")
            if line.strip():
                named.add(Path(json.loads(line)["path"].removeprefix("file:")).name)
    rows: list[tuple[int, int]] = []
    for name in named:
        t = pq.read_table(out / name, columns=["partition", "offset"])
        rows += zip(t.column("partition").to_pylist(), t.column("offset").to_pylist(), strict=True)
    orphans = sum(1 for p in out.glob("*.parquet") if p.name not in named)
    return rows, orphans


@pytest.mark.timeout(400)
def test_ingest_killed_mid_batch_and_restarted_writes_every_record_once(
    tmp_path, broker, make_topic, produce, start_ingest
):
    topic = make_topic(partitions=3)
    produced = sorted(produce(topic, 12_000, value=lambda i: b"v%06d" % i))
    out, checkpoint = tmp_path / "out", tmp_path / "out" / "_checkpoint"
    common = ["--bootstrap-servers", broker.bootstrap_servers, "--topic", topic, "--to", str(out)]
    history = tmp_path / "history"
    common += ["--master", "local[2]", "--max-offsets-per-trigger", "1000", "--option", f"historyPath={history}"]
    first = start_ingest(*common, "--trigger", "0 seconds")
    killed_in, killed_at = None, 0.0
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and first.poll() is None:
            planned, done = _batches(checkpoint, "offsets"), _batches(checkpoint, "commits")
            under_way = planned - done
            if len(done) >= 2 and under_way and _reading(history, topic, checkpoint, max(under_way)):
                killed_in = max(under_way)
                # its offsets logged, its tasks reading, its commit not written: mid-batch
                os.killpg(first.pid, signal.SIGKILL)
                killed_at = time.time()
                break
            time.sleep(0.02)
    finally:
        _kill(first)
        log = first.stdout.read() if first.stdout else ""
    assert killed_in is not None, f"no batch was seen under way (exit {first.returncode}): {log[-3000:]}"
    rows, _ = _committed_rows(out)
    assert 0 < len(rows) < len(produced), "the kill came mid-job"

    second = start_ingest(*common, "--trigger", "available-now")
    try:
        log, _ = second.communicate(timeout=240)
    finally:
        _kill(second)
    assert second.returncode == 0, log[-3000:]
    assert killed_in in _batches(checkpoint, "commits"), "the batch under way at the kill was run again"
    rows, orphans = _committed_rows(out)
    assert len(rows) == len(set(rows)), f"{len(rows) - len(set(rows))} records written twice"
    assert sorted(rows) == produced, f"{len(produced) - len(set(rows) & set(produced))} records missing"
    # the source's history: the restarted driver's first batch is the one under way at the kill, replayed from
    # the offsets log (its end the logged one); every produced offset handed out by the source's readers
    # (their consumers' histories), positions without gaps
    logged = _logged_end(checkpoint, killed_in)
    # (the planning runs in a Python worker of the JVM's, not in the job's process: told apart by time)
    lines = [json.loads(x) for f in history.glob("spark-driver-*.jsonl") for x in f.read_text().splitlines()]
    replayed = min(
        (e for e in lines if e["event"] == "batch_planned" and e["wall"] > killed_at), key=lambda e: e["wall"]
    )
    ends: dict[tuple[str, int], int] = {}
    for t, p, _, e in replayed["ranges"]:
        ends[(t, p)] = max(ends.get((t, p), 0), e)
    assert {tp: e for tp, e in logged.items() if tp in ends} == ends and ends, (logged, replayed)
    result = check(
        load(sorted(history.glob("consumer-*.jsonl"))), produced=produced_ranges(_by_partition(topic, produced))
    )
    assert result.status("L") == "passed" and result.status("M") == "passed", result.format()
    print(f"killed in batch {killed_in}; {len(rows)} rows exactly once; {orphans} file(s) of the killed batch ignored")


def _reading(history: Path, topic: str, checkpoint: Path, batch: int) -> bool:
    """Whether a task of ``batch`` has begun reading: a consumer history of a range starting where the batch
    before it ended (the task's consumer writes it on creation)."""
    try:
        starts = _logged_end(checkpoint, batch - 1)
    except (OSError, ValueError, IndexError):
        return False
    return any(any(history.glob(f"consumer-{t}-{p}-{o}-*.jsonl")) for (t, p), o in starts.items() if t == topic)


def _logged_end(checkpoint: Path, batch: int) -> dict[tuple[str, int], int]:
    """The end offsets Spark logged for ``batch`` before running it (the offsets log's last line: the source's)."""
    source = json.loads((checkpoint / "offsets" / str(batch)).read_text().strip().splitlines()[-1])
    return {(t, int(p)): o for t, parts in source.items() for p, o in parts.items()}


def _by_partition(topic: str, produced: list[tuple[int, int]]) -> dict[tuple[str, int], set[int]]:
    out: dict[tuple[str, int], set[int]] = {}
    for p, o in produced:
        out.setdefault((topic, p), set()).add(o)
    return out
