"""The ingest job's parts without Spark's JVM: the checkpoint decision (resume, start afresh, refuse) and
the progress files the source writes while a batch runs."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from fsm_consumer.cli._ingest_checkpoint import SOURCE_FILE, ForeignCheckpoint, check, record  # noqa: E402
from fsm_consumer.cli._ingest_progress import describe  # noqa: E402
from fsm_consumer.spark._progress import RangeProgress, Totals, planned, totals  # noqa: E402
from fsm_consumer.spark._ranges import KafkaRange  # noqa: E402

SOURCE = {"bootstrap": "127.0.0.1:9092", "topic": "t", "cluster_id": "c1", "topic_id": "id-1"}


def _spark_state(out: Path) -> Path:
    """An output directory with a checkpoint Spark has written offsets to."""
    checkpoint = out / "_checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n")
    (out / "part-0.parquet").write_text("x")
    return checkpoint


def test_no_checkpoint_yet_is_a_start():
    said: list[str] = []
    assert not check(
        Path("/nonexistent/cp"), Path("/nonexistent"), SOURCE, embedded=False, fresh=False, say=said.append
    )
    assert said == []


def test_the_same_topic_of_the_same_cluster_resumes(tmp_path):
    checkpoint = _spark_state(tmp_path / "out")
    record(checkpoint, SOURCE)
    said: list[str] = []
    moved_bootstrap = {**SOURCE, "bootstrap": "other-host:9092"}  # the same cluster by another address
    assert check(checkpoint, tmp_path / "out", moved_bootstrap, embedded=False, fresh=False, say=said.append)
    assert "resuming from the checkpoint" in said[0]
    assert json.loads((checkpoint / SOURCE_FILE).read_text()) == SOURCE


@pytest.mark.parametrize(
    "now",
    [
        {**SOURCE, "topic_id": "id-2"},  # deleted and created again (or another cluster)
        {**SOURCE, "topic": "u", "topic_id": "id-3"},  # another topic
        {**SOURCE, "topic_id": None, "cluster_id": "c2"},  # a broker without topic ids: the cluster decides
    ],
)
def test_other_data_is_refused_on_a_cluster_and_started_afresh_on_the_embedded_broker(tmp_path, now):
    out = tmp_path / "out"
    checkpoint = _spark_state(out)
    record(checkpoint, SOURCE)
    with pytest.raises(ForeignCheckpoint) as caught:
        check(checkpoint, out, now, embedded=False, fresh=False, say=print)
    message = str(caught.value)
    assert "topic 't'" in message and f"topic {now['topic']!r}" in message and "--fresh" in message
    assert checkpoint.exists(), "nothing moved without --fresh"
    said: list[str] = []
    assert not check(checkpoint, out, now, embedded=True, fresh=False, say=said.append)
    assert said[0].startswith("starting afresh: this run's embedded broker is new")
    (previous,) = tmp_path.glob("out.previous-*")
    assert (previous / "part-0.parquet").exists() and (previous / "_checkpoint" / SOURCE_FILE).exists()
    assert not out.exists()


def test_fresh_moves_aside_a_checkpoint_kept_elsewhere_too(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    checkpoint = tmp_path / "cp"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n")
    said: list[str] = []
    assert not check(checkpoint, out, SOURCE, embedded=False, fresh=True, say=said.append)
    assert "starting afresh: --fresh" in said[0]
    assert len(list(tmp_path.glob("out.previous-*"))) == len(list(tmp_path.glob("cp.previous-*"))) == 1


def test_a_checkpoint_that_says_nothing_of_its_source(tmp_path):
    out = tmp_path / "out"
    checkpoint = _spark_state(out)
    said: list[str] = []
    assert check(checkpoint, out, SOURCE, embedded=False, fresh=False, say=said.append)  # resumed, with a note
    assert "does not say which topic" in said[0]
    assert not check(checkpoint, out, SOURCE, embedded=True, fresh=False, say=said.append)  # a new broker


def test_progress_files_sum_to_records_read_of_records_planned(tmp_path):
    ranges = [KafkaRange("t", 0, 0, 600), KafkaRange("t", 1, 100, 500)]
    planned(str(tmp_path), ranges)
    planned(str(tmp_path), ranges)  # the same batch planned again (a restart): counted once
    assert totals(tmp_path) == Totals(planned=1000, read=0, batches=1)
    first, second = (RangeProgress(str(tmp_path), r) for r in ranges)
    first.update(250)
    second.update(100)
    second.update(150)  # within half a second of the last write: not written yet
    assert totals(tmp_path) == Totals(1000, 350, 1)
    second.update(400, final=True)
    assert totals(tmp_path) == Totals(1000, 650, 1)
    assert totals(tmp_path / "missing") == Totals(0, 0, 0)
    assert describe(Totals(1000, 650, 1), 350.0, 0) == (
        "650 of 1,000 records read (65%), 350 records/s, about 1 s left; batches done 0"
    )


def test_a_progress_file_that_cannot_be_written_costs_the_progress_never_the_read(tmp_path, caplog, monkeypatch):
    from fsm_consumer.spark import _progress

    monkeypatch.setattr(_progress, "_warned", False)
    folder = tmp_path / "progress"
    folder.mkdir()  # as the driver's plan makes it
    task = RangeProgress(str(folder), KafkaRange("t", 0, 0, 100))
    shutil.rmtree(folder)  # removed under a running task (a stale-directory sweep, an operator)
    task.update(40, final=True)
    assert totals(folder) == Totals(0, 40, 0)  # made again
    shutil.rmtree(folder)
    folder.write_text("a file where the directory was")
    with caplog.at_level(logging.WARNING, logger="fsm_consumer.spark"):
        task.update(60, final=True)
        task.update(80, final=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "the read goes on" in warnings[0], warnings
    assert totals(folder) == Totals(0, 0, 0)  # and the job showing the progress reads nothing, no error
