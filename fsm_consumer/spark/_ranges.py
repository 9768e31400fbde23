"""Offset ranges: one Spark input partition per contiguous range of one Kafka topic-partition.

``split`` gives one range per topic-partition with records to read, cut further into contiguous
pieces so there are at least ``minPartitions`` (each topic-partition's share proportional to its
size, as Spark's ``KafkaOffsetRangeCalculator``, then topped up on the largest pieces so the count is
reached whenever there are that many offsets) and none is longer than ``maxRecordsPerPartition``.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql.datasource import InputPartition


class KafkaRange(InputPartition):
    """Offsets ``[start, end)`` of one topic-partition: what one Spark task reads."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    @property
    def size(self) -> int:
        return self.end - self.start

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KafkaRange) and (self.topic, self.partition, self.start, self.end) == (
            other.topic,
            other.partition,
            other.start,
            other.end,
        )

    def __hash__(self) -> int:
        return hash((self.topic, self.partition, self.start, self.end))

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def _cut(r: KafkaRange, parts: int) -> list[KafkaRange]:
    out, start, remaining = [], r.start, r.size
    for i in range(parts):
        size = remaining // (parts - i)  # the later pieces take the rounding, as Spark's
        remaining -= size
        out.append(KafkaRange(r.topic, r.partition, start, start + size))
        start += size
    return out


def split(
    ranges: Iterable[KafkaRange], min_partitions: int | None = None, max_records_per_partition: int | None = None
) -> list[KafkaRange]:
    """The non-empty ``ranges``, cut so there are at least ``min_partitions`` of them (as far as there
    are offsets) and none holds more than ``max_records_per_partition`` offsets."""
    todo = sorted((r for r in ranges if r.size > 0), key=lambda r: (r.topic, r.partition, r.start))
    if not todo:
        return []
    parts = [1] * len(todo)
    if max_records_per_partition:
        parts = [max(1, -(-r.size // max_records_per_partition)) for r in todo]
    if min_partitions and sum(parts) < min_partitions:
        total = sum(r.size for r in todo)
        target = min(min_partitions, total)
        ideal = total / target
        parts = [max(p, min(r.size, max(1, round(r.size / ideal)))) for p, r in zip(parts, todo, strict=False)]
        while sum(parts) < target:  # rounding left some short: the largest pieces are cut again
            i = max((i for i, r in enumerate(todo) if parts[i] < r.size), key=lambda i: todo[i].size / parts[i])
            parts[i] += 1
    return [piece for r, n in zip(todo, parts, strict=False) for piece in (_cut(r, n) if n > 1 else [r])]
