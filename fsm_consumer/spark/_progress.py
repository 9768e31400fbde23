"""How far a streaming query's batches have been read while they run (the source option ``progressPath``).

Spark reports a micro-batch only when it ends, so a batch holding a whole topic (``Trigger.AvailableNow``)
shows nothing for its whole length. With ``progressPath=<directory>`` the driver writes each batch's plan
(``plan-<digest>.json``: the records its offset ranges hold) and each task how many records of its range
it has read (``read-<topic>-<partition>-<start>-<end>.json``, at most twice a second and at its end; a
retried task rewrites its range's file). ``totals`` sums them: ``fsm-consumer ingest`` shows records read
of records planned, the rate and the time left. Every process must reach the directory (local mode, or a
cluster on one machine or a shared filesystem), as for ``historyPath``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ._ranges import KafkaRange

__all__ = ["RangeProgress", "Totals", "planned", "totals"]

_EVERY_S = 0.5  # a task rewrites its file at most this often
log = logging.getLogger("fsm_consumer.spark")
_warned = False


def _write(path: Path, data: dict[str, object]) -> None:
    """Atomically (a reader never sees half a file), and at best: a file that cannot be written costs the
    progress shown, never the read (warned once per process). A directory removed meanwhile is made again."""
    global _warned
    try:
        try:
            _replace(path, data)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            _replace(path, data)
    except OSError as exc:
        if not _warned:
            _warned = True
            log.warning("progress file %s not written (%s): the progress shown may lag; the read goes on", path, exc)


def _replace(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def planned(directory: str | None, ranges: list[KafkaRange]) -> None:
    """The driver: a batch's plan (the same ranges planned again, as after a restart, are one file)."""
    if directory is None or not ranges:
        return
    key = json.dumps([[r.topic, r.partition, r.start, r.end] for r in ranges])
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / f"plan-{digest}.json", {"records": sum(r.size for r in ranges), "ranges": len(ranges)})


class RangeProgress:
    """A task's file for its range: ``update(rows)`` after each poll."""

    def __init__(self, directory: str | None, r: KafkaRange) -> None:
        self.path = None
        if directory is not None:  # made by the driver's plan, and again by _write if it went since
            self.path = Path(directory) / f"read-{r.topic}-{r.partition}-{r.start}-{r.end}.json"
        self.size = r.size
        self._at = 0.0

    def update(self, rows: int, *, final: bool = False) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        if final or now - self._at >= _EVERY_S:
            self._at = now
            _write(self.path, {"read": rows, "size": self.size})


class Totals(NamedTuple):
    planned: int  # records of every batch planned so far
    read: int  # records read by the tasks so far
    batches: int  # batches planned


def totals(directory: str | os.PathLike[str]) -> Totals:
    """The sums over ``directory`` (files being replaced are skipped, counted at the next look)."""
    planned_total = read_total = batches = 0
    try:
        names = os.listdir(directory)
    except OSError:  # not there (yet, or any more), or not a directory: nothing to show
        return Totals(0, 0, 0)
    for name in names:
        if name.startswith(".") or not name.endswith(".json"):
            continue
        try:
            data = json.loads((Path(directory) / name).read_text())
        except (OSError, ValueError):
            continue
        if name.startswith("plan-"):
            planned_total += int(data.get("records", 0))
            batches += 1
        elif name.startswith("read-"):
            read_total += int(data.get("read", 0))
    return Totals(planned_total, read_total, batches)
