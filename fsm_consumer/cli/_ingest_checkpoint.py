"""Whether ``fsm-consumer ingest`` may go on from the checkpoint it finds.

A Spark checkpoint holds offsets and nothing of where they came from: run the job again against another
broker (a new embedded one, with new data) or a topic deleted and created again, and Spark resumes at
offsets that belong to other records, writes nothing or the wrong slice, and says "done". So the job
keeps, beside Spark's files, what names the data it read (``fsm-ingest-source.json``: bootstrap servers,
topic, the cluster's id and the topic's KIP-516 id) and checks it before starting:

* the same topic of the same cluster: go on from the checkpoint;
* anything else, with the embedded broker (which is new at every run, its data too): a fresh start,
  said, the previous output and checkpoint moved aside, never deleted;
* anything else with ``--bootstrap-servers``: an error naming both sides and the way out (``--fresh``, or
  another ``--to``/``--checkpoint``); ``--fresh`` moves them aside and starts over.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SOURCE_FILE = "fsm-ingest-source.json"


class ForeignCheckpoint(Exception):
    """The checkpoint was written reading other data; the message says which, and what to do."""


def has_state(checkpoint: Path) -> bool:
    """Whether Spark wrote offsets there (a query ran with this checkpoint)."""
    offsets = checkpoint / "offsets"
    return offsets.is_dir() and any(offsets.iterdir())


def _same(recorded: dict[str, Any], now: dict[str, Any]) -> bool:
    if recorded.get("topic") != now["topic"]:
        return False
    old_id, new_id = recorded.get("topic_id"), now.get("topic_id")
    if old_id and new_id:  # KIP-516: decides both a recreated topic and another cluster
        return bool(old_id == new_id)
    old_cluster, new_cluster = recorded.get("cluster_id"), now.get("cluster_id")
    if old_cluster and new_cluster:
        return bool(old_cluster == new_cluster)
    return bool(recorded.get("bootstrap") == now["bootstrap"])


def _describe(source: dict[str, Any]) -> str:
    ids = ", ".join(f"{k} {source[k]}" for k in ("cluster_id", "topic_id") if source.get(k))
    return f"topic {source.get('topic')!r} on {source.get('bootstrap')}" + (f" ({ids})" if ids else "")


def check(
    checkpoint: Path,
    out: Path,
    now: dict[str, Any],
    *,
    embedded: bool,
    fresh: bool,
    say: Callable[[str], None],
) -> bool:
    """Decide before the query starts (see the module's docstring); returns whether it resumes from the
    checkpoint. ``now``: ``bootstrap``, ``topic``, ``cluster_id``, ``topic_id`` of this run. Raises
    ForeignCheckpoint for an external broker's mismatch without ``fresh``."""
    if not has_state(checkpoint):
        return False
    recorded_file = checkpoint / SOURCE_FILE
    recorded: dict[str, Any] | None = None
    if recorded_file.is_file():
        try:
            recorded = json.loads(recorded_file.read_text())
        except ValueError:
            recorded = None
    if fresh:
        _move_aside(checkpoint, out, say, "--fresh")
        return False
    if recorded is not None and _same(recorded, now):
        say(f"resuming from the checkpoint {checkpoint} (it was written reading {_describe(recorded)})")
        return True
    if embedded:
        why = (
            f"it was written reading {_describe(recorded)}"
            if recorded is not None
            else "it does not say which data it was written for"
        )
        _move_aside(checkpoint, out, say, f"this run's embedded broker is new, its data too ({why})")
        return False
    if recorded is None:
        say(
            f"note: the checkpoint {checkpoint} does not say which topic it was written for (an older "
            "fsm-consumer or another tool wrote it); resuming from it"
        )
        return True
    raise ForeignCheckpoint(
        f"the checkpoint {checkpoint} was written reading {_describe(recorded)}, but this run reads "
        f"{_describe(now)}: its offsets belong to other records. Start over with --fresh (the output and "
        "checkpoint are moved aside, not deleted), or give another --to / --checkpoint"
    )


def record(checkpoint: Path, now: dict[str, Any]) -> None:
    """What this run reads, beside Spark's files, for the next run's ``check``."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / SOURCE_FILE).write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")


def _move_aside(checkpoint: Path, out: Path, say: Callable[[str], None], why: str) -> None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = []
    for path in (out, checkpoint):
        if path.exists():
            target = path.with_name(f"{path.name}.previous-{stamp}")
            path.rename(target)
            moved.append(f"{path} -> {target}")
    say(f"starting afresh: {why}; moved aside: {'; '.join(moved)}")
