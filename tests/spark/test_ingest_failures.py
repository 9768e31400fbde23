"""The main job's bad paths fail like a tool's (issue 49): each mistake a user can make is one or two plain
lines saying what happened and what to do, a non-zero exit, no traceback; checked before a broker is
filled or Spark started where it can be. And Ctrl-C stops cleanly, saying what was committed, and the
same command resumes exactly once."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the helpers beside this file
from test_ingest import committed_rows, run_ingest, written  # noqa: E402

NOISE = re.compile(r"Traceback|py4j|\tat |Exception|ERROR|WARN")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plain(done: subprocess.CompletedProcess) -> list[str]:
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert not [line for line in lines if NOISE.search(line)], done.stdout[-3000:]
    return lines


def test_a_refused_broker_is_said_within_seconds(tmp_path, start_ingest):
    port = _free_port()  # nothing listens there
    began = time.monotonic()
    done = run_ingest(start_ingest, "--bootstrap-servers", f"127.0.0.1:{port}", "--to", str(tmp_path / "o"))
    took = time.monotonic() - began
    assert done.returncode == 2, done.stdout
    lines = _plain(done)
    assert f"error: no broker answered at 127.0.0.1:{port} within 5 s" in lines[-1]
    assert "Connection refused" in lines[-1] and "Check --bootstrap-servers" in lines[-1]
    assert took < 20, f"{took:.1f} s"  # the 5 s bootstrap wait and the interpreter's start, no retries
    assert not (tmp_path / "o").exists()


@pytest.mark.brokers("tansu")
def test_a_missing_topic_is_an_error_naming_the_topics_there_and_is_not_created(
    tmp_path, broker, make_topic, start_ingest
):
    there = make_topic(partitions=1)
    missing = there + "-typo"
    done = run_ingest(
        start_ingest, "--bootstrap-servers", broker.bootstrap_servers, "--topic", missing, "--to", str(tmp_path / "o")
    )
    assert done.returncode == 2, done.stdout
    (line,) = _plain(done)
    assert line.startswith(f"error: topic {missing!r} does not exist at {broker.bootstrap_servers}; topics there: ")
    assert there in line and "--wait-for-topic" in line
    assert missing not in broker.topic_names(), "asking must not create it"
    assert not (tmp_path / "o").exists()


def test_an_output_that_cannot_be_written_is_refused_before_the_broker_starts(tmp_path, start_ingest):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run_ingest(start_ingest, "--to", str(blocker / "out"))
    assert done.returncode == 2, done.stdout
    (line,) = _plain(done)  # no "broker: ..." line: nothing was started
    assert line == f"error: --to {blocker / 'out'}: {blocker} is not a directory; give --to a directory path"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--option", "startingOffset=earliest"], "unknown option (fsm_kafka takes"),
        (["--starting-offsets", "{bad"], "fsm_kafka option 'startingOffsets': malformed JSON"),
    ],
)
def test_a_bad_source_option_is_one_line_with_the_hint(tmp_path, start_ingest, args, said):
    done = run_ingest(start_ingest, *args, "--to", str(tmp_path / "o"))
    assert done.returncode == 2, done.stdout
    (line,) = _plain(done)
    assert line.startswith("error: fsm_kafka option") and said in line
    if "startingOffset=" in args[1]:
        assert "did you mean 'startingOffsets'?" in line


@pytest.mark.brokers("tansu")
def test_wait_for_topic_then_ctrl_c_stops_cleanly_and_the_same_command_resumes_exactly_once(
    tmp_path, broker, produce, start_ingest
):
    """--wait-for-topic waits for a topic created later; Ctrl-C (SIGINT to the job's process group, as a
    terminal sends it) stops the running query at its last whole batch with a plain summary and exit 130;
    the same command run again resumes from the checkpoint: every record in the output once."""
    topic = f"later-{os.getpid()}-{time.monotonic_ns()}"
    out = tmp_path / "out"
    args = ("--bootstrap-servers", broker.bootstrap_servers, "--topic", topic, "--to", str(out), "--master", "local[1]")
    job = start_ingest(*args, "--wait-for-topic", "--trigger", "1 second", "--progress-every", "0.5", quiet=False)
    try:
        seen: list[str] = []
        assert job.stdout is not None

        def until(pattern: str, within: float) -> None:
            deadline = time.monotonic() + within
            while time.monotonic() < deadline:
                line = job.stdout.readline()
                if not line:
                    break
                seen.append(line.rstrip("\n"))
                if re.search(pattern, line):
                    return
            raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(seen))

        until(rf"waiting for topic '{topic}' to be created", 30)
        broker.create_topic(topic, partitions=2)
        produce(topic, 3000)
        until(r"progress: 3,000 of 3,000 records read", 180)
        # read is not written: Ctrl-C abandons a batch under way, so it is sent once the batch is committed
        deadline = time.monotonic() + 60
        while committed_rows(out) < 3000 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert committed_rows(out) == 3000, "\n".join(seen)
        os.killpg(job.pid, signal.SIGINT)
        rest, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    stopped = subprocess.CompletedProcess(job.args, job.returncode, "\n".join(seen) + "\n" + rest, "")
    assert stopped.returncode == 130, stopped.stdout[-3000:]
    lines = _plain(stopped)
    assert lines[-1].startswith("interrupted: the query stopped at its last whole batch; this run wrote 3,000 records")
    assert "the same command again resumes from there" in lines[-1]
    produce(topic, 2000)
    again = run_ingest(start_ingest, *args)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "resuming from the checkpoint" in again.stdout
    assert "done: this run wrote 2,000 records (5,000 in the output now" in again.stdout, again.stdout[-3000:]
    rows = written(out)
    assert len(rows) == 5000 and len(set(rows)) == 5000
