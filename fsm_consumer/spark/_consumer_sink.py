"""ConsumerSink: an application's group Consumer feeding a Spark table, offsets committed only
after the rows are written."""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..consumer import ConsumerRebalanceListener
from ..errors import CommitFailedError, RebalanceInProgressError, WakeupException
from ..fetch import TopicPartition

if TYPE_CHECKING:
    import re

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from ..consumer import Consumer

_log = logging.getLogger("fsm_consumer.spark.sink")
_POLL_STEP_MS = 200  # how often run() looks at until() and the clock while no record comes


@dataclass(frozen=True)
class WrittenBatch:
    """A micro-batch as written, before its commit: ``number`` counts from 1 in this sink,
    ``first_offsets``/``next_offsets`` give per partition its first offset and the offset after its
    last record (what is committed)."""

    number: int
    rows: int
    first_offsets: dict[TopicPartition, int]
    next_offsets: dict[TopicPartition, int]


class ConsumerSink:
    """Appends what a group Consumer receives to a Spark table, as micro-batches.

    ::

        consumer = Consumer(bootstrap_servers=..., group_id="ingest", enable_auto_commit=False)
        sink = ConsumerSink(consumer, spark, "s3a://bucket/events")    # parquet by default
        sink.subscribe(["events"])                 # through the sink: see "Rebalances"
        sink.run()                                 # until stop() (from another thread) or Ctrl-C

    Rows have the columns of ``Consumer.poll_batch`` (topic, partition, offset, timestamp, key, value,
    headers...), topic as a string and timestamp as a UTC timestamp; ``transform(df) -> df`` may
    change them (parse the values...) before each write.

    A micro-batch is written when ``max_records`` rows are pending or ``max_wait_ms`` after its
    first row came, then the next offsets of its partitions are committed to the group. The commit
    follows the write, never precedes it, so nothing is lost; what can repeat is a micro-batch
    written but not committed: when the process dies between the two, or the commit is refused
    because the member lost its partitions, the next owner reads that micro-batch again (at least
    once: **duplicates only from the last micro-batch written before the crash or the loss**;
    deduplicate on (topic, partition, offset) if that matters).

    Rebalances: subscribe with ``sink.subscribe(topics, listener=yours)``, or pass
    ``sink.listener(yours)`` to ``consumer.subscribe``. When partitions are revoked, the pending
    micro-batch is written and committed before the consumer lets them go (then your
    ``on_partitions_revoked`` runs); partitions *lost* (the session ran out) cannot be committed
    any more, so their pending rows are dropped unwritten, to be read again by their new owner.
    A write failing during a revocation drops the revoked partitions' rows the same way.

    The consumer must have a ``group_id`` and ``enable_auto_commit=False`` (an auto-commit would
    commit rows not written yet), and no deserializers. The sink is not thread-safe: use it and
    its consumer from one thread; only ``stop()`` may be called from another. It does not close the
    consumer; call ``flush()`` (``run()`` does when it returns) before stopping Spark.

    ``format``: any Spark format (parquet by default); ``"delta"`` needs delta-spark
    (``pip install delta-spark``) and a session configured for it. Give ``path`` or ``table``
    (``saveAsTable``); ``partition_by`` and ``options`` go to the writer. Mode is always append.
    ``on_written(WrittenBatch)`` runs after each write, before its commit.
    """

    def __init__(
        self,
        consumer: Consumer,
        spark: SparkSession,
        path: str | None = None,
        *,
        table: str | None = None,
        format: str = "parquet",
        partition_by: Sequence[str] | None = None,
        options: dict[str, str] | None = None,
        max_records: int = 10_000,
        max_wait_ms: float = 5_000,
        transform: Callable[[DataFrame], DataFrame] | None = None,
        on_written: Callable[[WrittenBatch], None] | None = None,
    ) -> None:
        config = consumer.config
        if not config.group_id:
            raise ValueError("ConsumerSink needs a Consumer with a group_id (it commits what it wrote)")
        if config.enable_auto_commit:
            raise ValueError(
                "ConsumerSink needs enable_auto_commit=False: an auto-commit would commit "
                "records before they are written"
            )
        if (path is None) == (table is None):
            raise ValueError("give exactly one of path and table")
        if format == "delta" and importlib.util.find_spec("delta") is None:
            raise ImportError("format='delta' needs delta-spark: pip install delta-spark")
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise ValueError(f"max_records must be an integer >= 1, got {max_records!r}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms!r}")
        self.consumer, self.spark = consumer, spark
        self.path, self.table, self.format = path, table, format
        self.partition_by, self.options = list(partition_by or ()), dict(options or {})
        self.max_records, self.max_wait_ms = max_records, max_wait_ms
        self.transform, self.on_written = transform, on_written
        self._pending: list[pa.Table] = []  # pyarrow Tables polled, not written
        self._pending_rows = 0
        self._first_at: float | None = None  # monotonic ms when the first pending row came
        self._written: dict[TopicPartition, int] = {}  # next offsets written, not committed yet
        self.committed: dict[TopicPartition, int] = {}  # next offsets this sink committed
        self.batches_written = self.rows_written = 0
        self._stop = threading.Event()

    # -- subscribing -------------------------------------------------------------------------------
    def listener(self, user: ConsumerRebalanceListener | None = None) -> ConsumerRebalanceListener:
        """A rebalance listener that flushes and commits on revocation, then calls ``user``'s."""
        return _FlushingListener(self, user)

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | re.Pattern[str] | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """``consumer.subscribe`` with ``listener`` wrapped by :meth:`listener`."""
        self.consumer.subscribe(topics, pattern=pattern, listener=self.listener(listener))

    # -- the loop ------------------------------------------------------------------------------------
    @property
    def pending_rows(self) -> int:
        return self._pending_rows

    def run(self, stop_after_ms: float | None = None, until: Callable[[], bool] | None = None) -> None:
        """Poll, write and commit until ``stop()``, ``stop_after_ms`` or ``until()`` returns true, then
        flush. If it raises, what was polled and not written stays pending (uncommitted)."""
        end = None if stop_after_ms is None else _now() + stop_after_ms
        try:
            try:
                while not self._stop.is_set() and not (until is not None and until()):
                    if end is not None and _now() >= end:
                        break
                    self.poll_once(_POLL_STEP_MS if end is None else max(0.0, min(_POLL_STEP_MS, end - _now())))
            except WakeupException:
                if not self._stop.is_set():  # someone else's wakeup(): theirs to handle
                    raise
            self.flush()
        finally:
            self._stop.clear()  # cleared here, not on entry: a stop() just before run() is not lost

    def stop(self) -> None:
        """From any thread: run() returns (after its flush) as soon as the current poll or write ends;
        called before run(), the next run() returns at once."""
        self._stop.set()
        self.consumer.wakeup()

    def poll_once(self, timeout_ms: float = _POLL_STEP_MS) -> None:
        """One poll (waiting at most ``timeout_ms``, less when a micro-batch is due), then a flush if
        one is due: for applications that drive their own loop."""
        if self._first_at is not None:
            timeout_ms = max(0.0, min(timeout_ms, self._first_at + self.max_wait_ms - _now()))
        batch = self.consumer.poll_batch(timeout_ms=timeout_ms, max_records=self.max_records - self._pending_rows)
        if batch.num_rows:
            self._add(batch)
        if self._pending_rows >= self.max_records or (
            self._first_at is not None and _now() - self._first_at >= self.max_wait_ms
        ):
            self.flush()

    def _add(self, batch: pa.RecordBatch) -> None:
        import pyarrow as pa

        table = pa.Table.from_batches([batch])
        # Spark takes neither dictionary strings nor (safely) zone-less timestamps
        table = table.set_column(
            table.schema.get_field_index("topic"), "topic", table.column("topic").cast(pa.string())
        )
        table = table.set_column(
            table.schema.get_field_index("timestamp"),
            "timestamp",
            table.column("timestamp").cast(pa.timestamp("ms", tz="UTC")),
        )
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._first_at is None:
            self._first_at = _now()

    # -- writing and committing -------------------------------------------------------------------------
    def flush(self) -> None:
        """Write the pending rows (if any), then commit everything written and not yet committed.
        A failed write raises and keeps the rows pending; a commit refused during a rebalance is
        retried at the next flush; one refused because the partitions are gone is dropped (their
        new owner reads those records again) with a warning."""
        if self._pending:
            self._write_pending()
        if self._written:
            self._commit()

    def _write_pending(self) -> None:
        import pyarrow as pa

        table = pa.concat_tables(self._pending)
        first, nxt = _offset_bounds(table)
        df = self.spark.createDataFrame(table)
        if self.transform is not None:
            df = self.transform(df)
        writer = df.write.format(self.format).mode("append").options(**self.options)
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        if self.table is not None:
            writer.saveAsTable(self.table)
        else:
            writer.save(self.path)
        self._pending, self._pending_rows, self._first_at = [], 0, None
        self.batches_written += 1
        self.rows_written += table.num_rows
        for tp, offset in nxt.items():
            self._written[tp] = max(offset, self._written.get(tp, 0))
        if self.on_written is not None:
            self.on_written(WrittenBatch(self.batches_written, table.num_rows, first, nxt))

    def _commit(self) -> None:
        offsets = dict(self._written)
        try:
            try:
                self.consumer.commit(offsets)
            except WakeupException:
                if not self._stop.is_set():
                    raise
                self.consumer.commit(offsets)  # the wakeup was stop()'s, come after the poll: it is used up
        except RebalanceInProgressError:
            _log.info("commit of %d partitions deferred: the group is rebalancing", len(offsets))
            return
        except CommitFailedError as exc:
            _log.warning(
                "the written rows of %s were not committed (%s); their partitions' new owner "
                "reads them again: duplicates",
                _describe(offsets),
                exc,
            )
            self._written.clear()
            return
        self.committed.update(offsets)
        for tp, offset in offsets.items():
            if self._written.get(tp) == offset:
                del self._written[tp]

    def _forget(self, partitions: set[TopicPartition]) -> None:
        """Drop what is pending or uncommitted for ``partitions`` (no longer ours to commit)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        for tp in partitions:
            self._written.pop(tp, None)
        if not self._pending or not partitions:
            return
        kept = []
        for table in self._pending:
            gone = None
            for tp in partitions:
                match = pc.and_(
                    pc.equal(table.column("topic"), tp.topic),
                    pc.equal(table.column("partition"), pa.scalar(tp.partition, pa.int32())),
                )
                gone = match if gone is None else pc.or_(gone, match)
            table = table.filter(pc.invert(gone))
            if table.num_rows:
                kept.append(table)
        self._pending = kept
        self._pending_rows = sum(t.num_rows for t in kept)
        if not kept:
            self._first_at = None

    # revocation: write and commit while the partitions are still ours
    def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        try:
            self.flush()
        finally:
            self._forget(set(revoked))


class _FlushingListener(ConsumerRebalanceListener):
    def __init__(self, sink: ConsumerSink, user: ConsumerRebalanceListener | None) -> None:
        self.sink, self.user = sink, user

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        try:
            self.sink._on_revoked(revoked)
        finally:
            if self.user is not None:
                self.user.on_partitions_revoked(revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if self.user is not None:
            self.user.on_partitions_assigned(assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.sink._forget(set(lost))  # no commit possible: their new owner reads them again
        if self.user is not None:
            self.user.on_partitions_lost(lost)


def _offset_bounds(table: pa.Table) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    grouped = table.group_by(["topic", "partition"]).aggregate([("offset", "min"), ("offset", "max")])
    first, nxt = {}, {}
    for row in grouped.to_pylist():
        tp = TopicPartition(row["topic"], row["partition"])
        first[tp], nxt[tp] = row["offset_min"], row["offset_max"] + 1
    return first, nxt


def _describe(offsets: dict[TopicPartition, int]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}@{o}" for tp, o in sorted(offsets.items()))


def _now() -> float:
    return time.monotonic() * 1000.0
