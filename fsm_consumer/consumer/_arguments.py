"""The Consumer's arguments checked and normalised before anything is asked of the background thread:
a bad one raises at once, naming what was given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..structs import TopicPartition


def topic_partition(value: Any) -> TopicPartition:
    """A ``TopicPartition`` from one or a ``(topic, partition)`` pair; TypeError for anything else."""
    try:
        topic, partition = value
    except (TypeError, ValueError):
        raise TypeError(f"expected a TopicPartition (topic, partition), got {value!r}") from None
    if not isinstance(topic, str) or isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"expected a TopicPartition (topic: str, partition: int), got {value!r}")
    return TopicPartition(topic, partition)


def checked_timestamps(timestamps: Mapping[Any, Any]) -> dict[TopicPartition, int]:
    """offsets_for_times()'s argument: partition -> timestamp (ms, an int >= 0)."""
    checked = {}
    for p, ts in timestamps.items():
        if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
            raise ValueError(f"timestamp for {p} must be an integer >= 0 (ms), got {ts!r}")
        checked[topic_partition(p)] = ts
    return checked
