"""The Spark source's history (option ``historyPath``, a directory every process can write to: local mode,
or a shared filesystem on a cluster): JSON lines of its own beside the histories of the consumers its tasks
read with (``fsm_consumer.history`` reads both, and passes over the Spark lines it does not judge).

* the driver: ``batch_planned`` (the ranges of a batch: ``[topic, partition, start, end]``, ``end``
  exclusive) and, streaming, ``batch_committed`` (the end Spark says is finished);
* each task: ``range_read`` (its range, the rows it gave Spark, the first and last offsets among them).

One file per process and role, ``spark-<role>-<host>-<pid>.jsonl``, so that nothing interleaves; each
task's consumer writes its own history beside them (``consumer-<topic>-<partition>-<start>-<pid>.jsonl``)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["consumer_history_path", "write"]

_lock = threading.Lock()  # the tasks of one executor share its files


def write(directory: str | None, role: str, event: str, **fields: Any) -> None:
    """One line to ``directory``'s file of this process and ``role`` (nothing without a directory). A failure
    to write is the history's loss, never the query's: it is ignored."""
    if not directory:
        return
    line = {"t": round(time.monotonic() * 1000, 3), "wall": round(time.time(), 6), "role": role, "event": event}
    line.update(fields)
    path = Path(directory) / f"spark-{role}-{socket.gethostname()}-{os.getpid()}.jsonl"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _lock, open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    except OSError:
        pass


def consumer_history_path(directory: str | None, topic: str, partition: int, start: int) -> str | None:
    """Where a task's consumer writes its history (``history_path``), or None without a directory."""
    if not directory:
        return None
    Path(directory).mkdir(parents=True, exist_ok=True)
    return str(Path(directory) / f"consumer-{topic}-{partition}-{start}-{os.getpid()}.jsonl")
