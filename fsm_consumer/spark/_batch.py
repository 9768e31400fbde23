"""``spark.read.format("fsm_kafka")``: the batch reader.

``partitions()`` runs once on the driver: the topic-partitions now, startingOffsets (default earliest)
and endingOffsets (default latest) resolved to offsets, checked against the log's bounds
(``failOnDataLoss``), and cut into ranges (``minPartitions``, ``maxRecordsPerPartition``).
``read()`` runs on the executors, one range each.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader

from ._offsets import OffsetLookup, describe, report_data_loss, resolve
from ._option_values import KafkaOptionError
from ._options import OffsetSpec, ReadOptions
from ._ranges import KafkaRange, split
from ._read import planned, read_range

if TYPE_CHECKING:
    from pyarrow import RecordBatch
    from pyspark.sql.datasource import InputPartition


def plan_batch(opts: ReadOptions, lookup: OffsetLookup) -> list[KafkaRange]:
    """The ranges a batch read covers."""
    tps = lookup.partitions()
    if not tps:
        return []
    earliest, latest = lookup.earliest(tps), lookup.latest(tps)
    start = resolve(
        opts.starting or OffsetSpec("earliest", "startingOffsets"),
        tps,
        lookup,
        ending=False,
        by_timestamp_strategy=opts.by_timestamp_strategy,
        earliest=earliest,
        latest=latest,
    )
    end = resolve(
        opts.ending or OffsetSpec("latest", "endingOffsets"), tps, lookup, ending=True, earliest=earliest, latest=latest
    )
    ranges = []
    for tp in tps:
        s, e = start[tp], end[tp]
        where = describe([tp])
        if s > e:
            option = (opts.ending or opts.starting or OffsetSpec("latest", "endingOffsets")).option
            raise KafkaOptionError(option, f"{where}: the starting offset {s} is after the ending offset {e}")
        if s < earliest[tp]:
            report_data_loss(
                opts,
                f"{where}: starting offset {s} is below the log's start {earliest[tp]} "
                f"(offsets {s} to {min(e, earliest[tp]) - 1} are gone)",
            )
            s = earliest[tp]
        if e > latest[tp]:
            report_data_loss(opts, f"{where}: ending offset {e} is past the log's end {latest[tp]}")
            e = latest[tp]
        if s < e:
            ranges.append(KafkaRange(tp[0], tp[1], s, e))
    return split(ranges, opts.min_partitions, opts.max_records_per_partition)


class KafkaBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[KafkaRange]:
        lookup = OffsetLookup(self.opts)
        try:
            ranges = plan_batch(self.opts, lookup)
        finally:
            lookup.close()
        planned(self.opts, ranges)
        return ranges

    def read(self, partition: InputPartition) -> Iterator[RecordBatch]:
        return read_range(self.opts, partition)
