"""Spec coverage: which spec transitions a test run fired, from the records a pytest plugin saved.

A record file is JSON: {"machines": {machine: {index: {kind: count}}}}, kind being the test
directory (unit, integration, spark) or ``broker:NAME`` (tests run on that broker: tansu, kafka).
Several files (one per process) are merged.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ._model import Spec


def merge_records(directory: Path) -> dict[str, dict[int, dict[str, int]]]:
    merged: dict[str, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for f in sorted(Path(directory).glob("*.json")):
        data = json.loads(f.read_text())
        for machine, by_index in data.get("machines", {}).items():
            for index, kinds in by_index.items():
                slot = merged[machine][int(index)]
                for kind, count in kinds.items():
                    slot[kind] = slot.get(kind, 0) + count
    return merged


def coverage(
    spec: Spec, records: dict[str, dict[int, dict[str, int]]], kind: str | None = None
) -> tuple[list[int], list[int]]:
    """(covered, missing) transition indexes of ``spec``; ``kind`` counts only that test kind."""
    seen = records.get(spec.machine, {})
    covered: list[int] = []
    missing: list[int] = []
    for t in spec.transitions:
        kinds = seen.get(t.index, {})
        hit = bool(kinds.get(kind)) if kind else bool(kinds)
        (covered if hit else missing).append(t.index)
    return covered, missing


def broker_gaps(spec: Spec, records: dict[str, dict[int, dict[str, int]]], brokers: list[str]) -> dict[str, list[int]]:
    """Per broker, the transitions of ``spec`` some other broker's tests fired and this one's never did."""
    seen = records.get(spec.machine, {})
    gaps: dict[str, list[int]] = {b: [] for b in brokers}
    for t in spec.transitions:
        fired = {b for b in brokers if seen.get(t.index, {}).get(f"broker:{b}")}
        if fired:
            for b in brokers:
                if b not in fired:
                    gaps[b].append(t.index)
    return gaps
