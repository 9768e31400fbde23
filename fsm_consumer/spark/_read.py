"""The executors' side: read one offset range with the fsm_consumer fetch path, as Arrow batches.

A group-less ``Consumer`` is assigned the one topic-partition, sought to the range's start and
``poll_batch()``ed until its position reaches the range's end (rows past it are sliced off); each
RecordBatch becomes Spark's Kafka rows (``_schema.to_spark``) without a Python object per record.

Data that is gone is Spark's data loss (``failOnDataLoss``): the start below the log's start (records
aged out), or the end beyond the log's end (the log truncated, or a range asked past it). Apache Kafka
answers such a Fetch with OFFSET_OUT_OF_RANGE (held by the consumer with ``auto_offset_reset='none'``);
Tansu answers nothing, so a range that makes no progress is checked against the log's bounds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from . import _history as history
from . import _progress as progress
from ._history import consumer_history_path
from ._offsets import log, report_data_loss
from ._options import ReadOptions
from ._progress import RangeProgress
from ._ranges import KafkaRange
from ._schema import read_schema, to_spark

if TYPE_CHECKING:
    from pyarrow import RecordBatch
    from pyspark.sql.datasource import InputPartition

    from ..consumer import Consumer
    from ..fetch import TopicPartition

_POLL_MS = 500  # one poll_batch() wait
_STALL_CHECK_S = 1.0  # no progress for this long: look at the log's bounds
_MAX_ROWS = 200_000  # rows per poll_batch() at most (one Arrow batch handed to Spark)


def read_range(opts: ReadOptions, r: InputPartition) -> Iterator[RecordBatch]:
    """Spark's rows of offsets ``[r.start, r.end)`` of one topic-partition, as pyarrow RecordBatches."""
    if not isinstance(r, KafkaRange) or r.size <= 0:
        return  # pyspark plans InputPartition(None) for a read with nothing to read
    import numpy as np
    from kafka.errors import OffsetOutOfRangeError

    from ..consumer import Consumer
    from ..fetch import TopicPartition
    from ..fetch._arrow import numpy as values

    tp = TopicPartition(r.topic, r.partition)
    where = f"{r.topic}-{r.partition}"
    consumer = Consumer(
        **opts.consumer_config(
            group_id=opts.carried_group_id("executor"),  # never joined nor committed to (as Spark's)
            enable_auto_commit=False,
            auto_offset_reset="none",
            history_path=consumer_history_path(opts.history_path, r.topic, r.partition, r.start),
            **opts.formats.deserializers(),
        )
    )
    spark = read_schema(opts) if opts.formats.typed else None
    rows, first_offset, last_offset = 0, None, None
    reported = RangeProgress(opts.progress_path, r)
    try:
        consumer.assign([tp])
        consumer.seek(tp, r.start)
        position, first = r.start, True
        progress_at = time.monotonic()
        while position < r.end:
            try:
                batch = consumer.poll_batch(timeout_ms=_POLL_MS, max_records=min(r.end - position, _MAX_ROWS))
            except OffsetOutOfRangeError as exc:
                position = _out_of_range(opts, consumer, tp, where, position, r.end, exc)
                if position >= r.end:
                    return
                consumer.seek(tp, position)
                progress_at = time.monotonic()
                continue
            if batch.num_rows:
                offsets = values(batch.column("offset"))
                if first and offsets[0] > position:
                    # a gap at the start: compaction, or the records aged out since planning
                    _check_start(opts, consumer, tp, where, position, int(offsets[0]))
                first = False
                cut = int(np.searchsorted(offsets, r.end))
                if cut < batch.num_rows:
                    batch = batch.slice(0, cut)
                if batch.num_rows:
                    rows += batch.num_rows
                    if first_offset is None:
                        first_offset = int(offsets[0])
                    last_offset = int(offsets[batch.num_rows - 1])
                    reported.update(rows)
                    yield to_spark(batch, opts.include_headers, spark)
            now_at = consumer.position(tp)
            if now_at > position:
                position, progress_at = now_at, time.monotonic()
                continue
            if time.monotonic() - progress_at >= _STALL_CHECK_S:
                position = _stalled(opts, consumer, tp, where, position, r.end, progress_at)
                if position >= r.end:
                    return
                if position != now_at:
                    consumer.seek(tp, position)
                    progress_at = time.monotonic()
    finally:
        consumer.close(autocommit=False, timeout_ms=5000)
        reported.update(rows, final=True)
        history.write(
            opts.history_path,
            "task",
            "range_read",
            tp=[r.topic, r.partition],
            start=r.start,
            end=r.end,
            rows=rows,
            first=first_offset,
            last=last_offset,
        )


def planned(opts: ReadOptions, ranges: list[KafkaRange]) -> None:
    """The driver's ``batch_planned`` line (with ``historyPath``) and the batch's plan (``progressPath``)."""
    progress.planned(opts.progress_path, ranges)
    history.write(
        opts.history_path,
        "driver",
        "batch_planned",
        ranges=[[r.topic, r.partition, r.start, r.end] for r in ranges],
    )


def _out_of_range(
    opts: ReadOptions, consumer: Consumer, tp: TopicPartition, where: str, position: int, end: int, exc: Exception
) -> int:
    """Apache Kafka said the position is outside the log: where to go on from (``end``: stop)."""
    first = consumer.beginning_offsets([tp]).get(tp, position)
    last = consumer.end_offsets([tp]).get(tp, position)
    if position < first:
        report_data_loss(
            opts,
            f"{where}: offsets {position} to {min(first, end) - 1} are no longer in the log (it starts at {first})",
        )
        return first
    report_data_loss(
        opts, f"{where}: offsets {max(position, last)} to {end - 1} are not in the log (it ends at {last}): {exc}"
    )
    return end


def _check_start(opts: ReadOptions, consumer: Consumer, tp: TopicPartition, where: str, start: int, got: int) -> None:
    first = consumer.beginning_offsets([tp]).get(tp, start)
    if first > start:
        report_data_loss(
            opts, f"{where}: offsets {start} to {first - 1} are no longer in the log (it starts at {first})"
        )


def _stalled(
    opts: ReadOptions, consumer: Consumer, tp: TopicPartition, where: str, position: int, end: int, since: float
) -> int:
    """No progress for a while: a range past the log's end is data loss; below its start, records
    aged out; otherwise keep waiting up to kafkaConsumer.pollTimeoutMs."""
    last = consumer.end_offsets([tp]).get(tp)
    if last is not None and last <= position:
        report_data_loss(opts, f"{where}: offsets {position} to {end - 1} are not in the log (it ends at {last})")
        return end
    first = consumer.beginning_offsets([tp]).get(tp)
    if first is not None and first > position:
        report_data_loss(
            opts,
            f"{where}: offsets {position} to {min(first, end) - 1} are no longer in the log (it starts at {first})",
        )
        return first
    waited_ms = (time.monotonic() - since) * 1000
    if waited_ms >= opts.poll_timeout_ms:
        raise TimeoutError(
            f"{where}: no records at offset {position} for {waited_ms:.0f} ms although the log "
            f"holds offsets up to {last} (kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms})"
        )
    log.debug("%s: waiting for offset %d (log end %s)", where, position, last)
    return position
