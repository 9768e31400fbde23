"""The ingest job's progress directory: its own for each run, and what killed runs left is cleared."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fsm_consumer.cli._ingest_progress import PROGRESS_PREFIX, progress_directory


def _gone_pid() -> int:
    """The PID of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _left(root: Path, pid: int, *, age_s: float) -> Path:
    """A directory as a run of ``pid`` leaves it, last written ``age_s`` ago, with a progress file in it."""
    path = root / f"{PROGRESS_PREFIX}{pid}-abc123"
    path.mkdir()
    (path / "read-t-0-0-10.json").write_text("{}")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_each_run_gets_a_new_directory_named_for_its_process(tmp_path):
    first, second = progress_directory(str(tmp_path)), progress_directory(str(tmp_path))
    assert first != second
    for made in (first, second):
        path = Path(made)
        assert path.is_dir() and path.parent == tmp_path
        assert path.name.startswith(f"{PROGRESS_PREFIX}{os.getpid()}-")


def test_a_killed_runs_directory_is_removed_by_the_next_run(tmp_path):
    stale = _left(tmp_path, _gone_pid(), age_s=3600)
    made = progress_directory(str(tmp_path))
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(made).name]


def test_what_may_still_be_in_use_or_is_not_ours_stays(tmp_path):
    gone = _gone_pid()
    recent = _left(tmp_path, gone, age_s=5)  # written to lately: maybe a live run in another PID namespace
    running = _left(tmp_path, os.getppid(), age_s=3600)  # its process is alive
    old_style = tmp_path / f"{PROGRESS_PREFIX}k2j3h4"  # no PID in the name (before this naming)
    old_style.mkdir()
    other = tmp_path / "fsm-ingest-progressive-1-x"
    other.mkdir()
    a_file = tmp_path / f"{PROGRESS_PREFIX}{gone}-file"
    a_file.write_text("not a directory")
    os.utime(a_file, (time.time() - 3600,) * 2)
    progress_directory(str(tmp_path))
    for kept in (recent, running, old_style, other, a_file):
        assert kept.exists(), kept
