"""What ``fsm-consumer ingest`` shows while its query runs.

Records read of records planned come from the source's progress files (``progressPath``,
``fsm_consumer.spark._progress``): they move while a batch runs, where Spark reports a batch only when it
ends. On a terminal a live table (rich); piped, a line every ``--progress-every`` seconds; nothing with
``--quiet``. ``watch`` returns the records this run's batches took in (Spark's ``numInputRows``).
``progress_directory`` makes the run's directory for those files.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..spark._progress import Totals, totals

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery


PROGRESS_PREFIX = "fsm-ingest-progress-"
# a run rewrites its files twice a second: a directory untouched this long whose process is gone is stale
_STALE_S = 600.0


def progress_directory(root: str | None = None) -> str:
    """A new directory for this run's progress files, ``<temp>/fsm-ingest-progress-<pid>-<random>``, removed by
    the run when it ends. A run killed outright (SIGKILL, the machine's OOM killer) never gets there, so this
    first removes the directories of earlier runs whose process is gone and that nothing has written to for
    ten minutes. A run in another PID namespace sharing the temp directory looks gone from here: its
    directory goes only when it has not written for that long, and its writers make it again (the driver
    per batch, each task as it starts; only the progress shown of earlier batches is lost)."""
    base = Path(root if root is not None else tempfile.gettempdir())
    now = time.time()
    for path in base.glob(f"{PROGRESS_PREFIX}*-*"):
        owner = path.name[len(PROGRESS_PREFIX) :].split("-", 1)[0]
        try:
            stale = owner.isdigit() and not _alive(int(owner)) and now - path.stat().st_mtime > _STALE_S
        except OSError:  # removed meanwhile (another run cleaning up)
            continue
        if stale and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{PROGRESS_PREFIX}{os.getpid()}-", dir=base)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class _Rate:
    """Records per second over the last few seconds of samples."""

    def __init__(self, window_s: float = 3.0) -> None:
        self.window = window_s
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, t: float, read: int) -> float:
        self.samples.append((t, read))
        while len(self.samples) > 2 and t - self.samples[0][0] > self.window:
            self.samples.popleft()
        (t0, r0), (t1, r1) = self.samples[0], self.samples[-1]
        return (r1 - r0) / (t1 - t0) if t1 > t0 else 0.0


def _lag(progress: dict[str, Any] | None) -> dict[str, int]:
    """Per topic-partition: what the broker has (latestOffset) minus what the last batch reached."""
    if not progress or not progress.get("sources"):
        return {}
    source = progress["sources"][0]
    try:
        latest = json.loads(source.get("latestOffset") or "null") or {}
        end = json.loads(source.get("endOffset") or "null") or {}
    except (TypeError, ValueError):
        return {}
    lag = {}
    for topic, parts in latest.items():
        for p, offset in parts.items():
            lag[f"{topic}-{p}"] = max(0, int(offset) - int(end.get(topic, {}).get(p, 0)))
    return lag


def _share_and_left(now: Totals, rate: float) -> tuple[str, float | None]:
    """`` (65%)`` of the records planned (empty before a plan), and the seconds left at ``rate`` (None: unknown)."""
    share = f" ({100 * now.read / now.planned:.0f}%)" if now.planned else ""
    left = (now.planned - now.read) / rate if rate > 0 and now.planned > now.read else None
    return share, left


def describe(now: Totals, rate: float, batches_done: int) -> str:
    """One line: records read of planned, rate, time left, batches; before any plan, that one is being made."""
    if not now.planned and not batches_done:
        return "planning the first batch (the topic's offsets, then the partitions' ranges)"
    share, left = _share_and_left(now, rate)
    when = f", about {left:,.0f} s left" if left is not None else ""
    return (
        f"{now.read:,} of {now.planned:,} records read{share}, {rate:,.0f} records/s{when}; batches done {batches_done}"
    )


def _await(query: StreamingQuery, seconds: float) -> None:
    """Wait a little for the query; its failure is the caller's to read (``query.exception()``), after the
    rows of its batches are counted."""
    try:
        query.awaitTermination(seconds)  # type: ignore[arg-type]  # pyspark takes float seconds
    except Exception:  # noqa: BLE001 - StreamingQueryException: the query ended with it
        if query.isActive:
            raise


def watch(
    query: StreamingQuery,
    progress_dir: str,
    *,
    title: str,
    quiet: bool,
    every_s: float,
    deadline: float | None,
    stop: Callable[[], bool] | None = None,
    tty: bool | None = None,
    out: Callable[[str], None] = print,
) -> int:
    """Follow the query until it ends (or ``deadline``, monotonic, or ``stop()`` says so: then the query is
    stopped); returns the rows its batches took in. The last line or table gives the run's average rate."""
    seen: set[int] = set()
    rows = 0
    rate = _Rate()
    began = time.monotonic()

    def step() -> bool:
        nonlocal rows
        for p in query.recentProgress:
            if p["batchId"] not in seen:
                seen.add(p["batchId"])
                rows += p.get("numInputRows", 0)
        if (deadline is not None and time.monotonic() >= deadline) or (stop is not None and stop()):
            query.stop()
        return query.isActive

    def sample() -> tuple[Totals, float]:
        now = totals(progress_dir)
        return now, rate.add(time.monotonic(), now.read)

    def average() -> str:
        took = time.monotonic() - began
        read = totals(progress_dir).read
        return f"{read:,} records read in {took:,.1f} s, {read / took if took > 0 else 0:,.0f} records/s on average"

    if quiet:
        while step():
            _await(query, 0.5)
        step()
        return rows
    if not (sys.stdout.isatty() if tty is None else tty):
        next_line = time.monotonic() + every_s
        while step():
            _await(query, 0.25)
            if time.monotonic() >= next_line:
                next_line += every_s
                now, per_s = sample()
                out(f"progress: {describe(now, per_s, len(seen))}")
        step()
        out(f"progress: {average()}; batches done {len(seen)}")
        return rows
    from rich.live import Live
    from rich.table import Table

    def render() -> Table:
        now, per_s = sample()
        table = Table(title=title, show_header=False)
        share, left = _share_and_left(now, per_s)
        table.add_row("records read", f"{now.read:,} of {now.planned:,} planned{share}")
        table.add_row("records/s", f"{per_s:,.0f}")
        table.add_row("time left", f"about {left:,.0f} s" if left is not None else "-")
        table.add_row("batches done / written", f"{len(seen)} / {rows:,} records")
        lag = _lag(query.lastProgress)
        table.add_row("lag per partition", ", ".join(f"{k}: {v:,}" for k, v in sorted(lag.items())) or "-")
        return table

    with Live(render(), refresh_per_second=4, transient=False) as live:
        while step():
            _await(query, 0.25)
            live.update(render())
        step()
        live.update(render())
    out(average())
    return rows
