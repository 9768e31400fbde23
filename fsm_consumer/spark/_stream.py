"""``spark.readStream.format("fsm_kafka")``: the micro-batch stream reader.

Offsets are Spark's Kafka source's JSON, ``{"topic": {"0": 23}}``, kept in the query's checkpoint.
``initialOffset`` comes from startingOffsets (default latest; -2/-1 resolved to numbers);
``latestOffset(start, limit)`` is what the topic-partitions hold now, partitions that appeared since
``start`` from their earliest offset, bounded by ``maxOffsetsPerTrigger`` through Spark's admission
control (``getDefaultReadLimit`` gives ``ReadMaxRows``; the engine passes ``ReadAllAvailable`` when
its trigger wants everything) and, with ``Trigger.AvailableNow``, by what was there when the query
started (``prepareForTriggerAvailableNow``). ``partitions(start, end)`` cuts the ranges as a batch
read does; executors read them with ``_read.read_range``.

With ``commitToGroup=<group id>`` each finished batch's end is committed to that Kafka group (an
OffsetCommit without membership, as Spark's own committers do), so standard lag tools
(``kafka-consumer-groups --describe``, Burrow...) show the query's progress. The checkpoint stays
the only truth: the group is never read. See ``KafkaStreamReader.commit`` for when commits land.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from . import _history as history
from ._offsets import JsonOffsets, OffsetLookup, Offsets, decode, describe, encode, log, report_data_loss, resolve
from ._options import OffsetSpec, ReadOptions
from ._ranges import KafkaRange, split
from ._read import planned, read_range

if TYPE_CHECKING:
    from pyarrow import RecordBatch
    from pyspark.sql.datasource import InputPartition

    from ..consumer import Consumer


def rate_limit(limit: int, start: Offsets, until: Offsets) -> Offsets:
    """``until`` moved back so that at most ``limit`` offsets lie between ``start`` and it, shared out
    in proportion to what each partition has (as Spark's Kafka source), by largest remainders: unlike
    Spark's rounding (a small partition's share rounded up) the total never exceeds ``limit``."""
    sizes = {tp: until[tp] - start[tp] for tp in until if tp in start and until[tp] > start[tp]}
    total = sum(sizes.values())
    if total <= limit:
        return dict(until)
    shares = {tp: limit * size / total for tp, size in sizes.items()}
    take = {tp: int(share) for tp, share in shares.items()}
    left = limit - sum(take.values())
    for tp in sorted(shares, key=lambda tp: (take[tp] - shares[tp], tp))[:left]:  # largest remainders
        take[tp] += 1
    return {tp: (start[tp] + take[tp] if tp in take else end) for tp, end in until.items()}


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._lookup: OffsetLookup | None = None
        self._committer: Consumer | None = None
        self._committed: Offsets | None = None
        self._initial: JsonOffsets | None = None
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        # minOffsetsPerTrigger: when the last batch was let through (None: never, so the first one is)
        self._last_trigger: float | None = None
        self.clock: Callable[[], float] = time.monotonic  # seconds; a test may set its own

    def __getstate__(self) -> dict[str, Any]:
        # only the options travel to the executors; the consumers stay on the driver
        return {"opts": self.opts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["opts"])

    @property
    def lookup(self) -> OffsetLookup:
        if self._lookup is None:
            self._lookup = OffsetLookup(self.opts)
        return self._lookup

    # -- offsets ---------------------------------------------------------------------------------------
    def initialOffset(self) -> JsonOffsets:
        tps = self.lookup.partitions()
        spec = self.opts.starting or OffsetSpec("latest", "startingOffsets")
        offsets = resolve(spec, tps, self.lookup, ending=False, by_timestamp_strategy=self.opts.by_timestamp_strategy)
        self._initial = encode(offsets)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        # pyspark has no composite limit: with both options the engine is given the upper one, and the
        # lower one (minOffsetsPerTrigger) is applied in latestOffset from the options, as Spark's source
        # reads maxTriggerDelay from its options too
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what is there now and no further, in as many batches as the limit needs."""
        self._target = self.lookup.latest(self.lookup.partitions())

    def latestOffset(self, start: JsonOffsets, limit: ReadLimit) -> JsonOffsets:
        # Spark asks for the next batch only once the batches up to ``start`` have finished
        self._commit_to_group(start, finished=start != self._initial)
        begin = decode(start)
        tps = self.lookup.partitions()
        latest = self.lookup.latest(tps)
        self._latest = latest
        new = [tp for tp in tps if tp not in begin]
        if self._target is not None:  # AvailableNow: nothing past what was there at the start
            new = [tp for tp in new if tp in self._target]
            latest = {
                tp: min(o, self._target[tp]) if tp in self._target else begin[tp]
                for tp, o in latest.items()
                if tp in self._target or tp in begin
            }
        start_at = {**self.lookup.earliest(new), **{tp: o for tp, o in begin.items() if tp in latest}}
        until = dict(latest)
        if self._delay(limit, start_at, latest):
            return start  # no batch this trigger: fewer than minOffsetsPerTrigger new, maxTriggerDelay not over
        if isinstance(limit, ReadMaxRows):
            until = rate_limit(limit.max_rows, start_at, until)
        elif not isinstance(limit, (ReadAllAvailable, ReadMinRows)):
            log.warning("read limit %r is not supported by fsm_kafka; reading all available", limit)
        # partitions that went away stay out: partitions() reports them (failOnDataLoss)
        return encode(until)

    def _delay(self, limit: ReadLimit, start: Offsets, latest: Offsets) -> bool:
        """Whether this trigger makes no batch, as Spark's Kafka source decides (``delayBatch``): with
        ``minOffsetsPerTrigger``, unless ``maxTriggerDelay`` has passed since the last batch (the first
        trigger always passes), a batch waits until that many new offsets are there. Not for a trigger that
        wants everything (``Trigger.Once``: the engine's ReadAllAvailable) nor under ``Trigger.AvailableNow``
        (which must end: it reads up to what was there at its start)."""
        minimum = self.opts.min_offsets_per_trigger
        if minimum is None or self._target is not None or isinstance(limit, ReadAllAvailable):
            return False
        now = self.clock()
        if self._last_trigger is None or (now - self._last_trigger) * 1000 >= self.opts.max_trigger_delay_ms:
            self._last_trigger = now
            return False
        if sum(max(0, o - start.get(tp, o)) for tp, o in latest.items()) < minimum:
            return True
        self._last_trigger = now
        return False

    def reportLatestOffset(self) -> JsonOffsets | None:
        return None if self._latest is None else encode(self._latest)

    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> list[KafkaRange]:
        begin, until = decode(start), decode(end)
        gone = sorted(set(begin) - set(until))
        if gone:
            report_data_loss(self.opts, f"partitions {describe(gone)} are gone (topic deleted?)")
        new = [tp for tp in until if tp not in begin]
        earliest = self.lookup.earliest(new)
        for tp in new:
            if earliest[tp] != 0:
                report_data_loss(self.opts, f"added partition {describe([tp])} starts from {earliest[tp]} instead of 0")
        ranges = []
        for tp, e in sorted(until.items()):
            s = begin.get(tp, earliest.get(tp))
            assert s is not None  # a partition not in begin is new: lookup.earliest gave its offset
            if e < s:
                report_data_loss(
                    self.opts,
                    f"{describe([tp])}: offset went back from {s} to {e} (the topic was "
                    "deleted and created again, or its log truncated?)",
                )
                continue
            ranges.append(KafkaRange(tp[0], tp[1], s, e))
        out = split(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        planned(self.opts, out)
        return out

    def read(self, partition: InputPartition) -> Iterator[RecordBatch]:
        return read_range(self.opts, partition)

    # -- progress ----------------------------------------------------------------------------------------
    def commit(self, end: JsonOffsets) -> None:
        """Spark's signal that the batches up to ``end`` are finished and their offsets no longer needed.

        Spark calls it one batch late: when it plans batch N+1 (after writing its offsets to the
        checkpoint), it commits batch N's end, and only if batch N+1 has data. So the last batch's end
        is never passed here when the stream goes idle or a ``Trigger.AvailableNow`` query ends. With
        ``commitToGroup``, the group therefore also gets each finished batch's end in
        ``latestOffset(start)``: Spark asks for a new end only after the batch ending at ``start`` has
        finished (its commit log written), also for the final, empty check that ends an AvailableNow
        query. Here the group commit is only repeated if that one failed.
        """
        done = [[t, p, o] for (t, p), o in sorted(decode(end).items())]
        history.write(self.opts.history_path, "driver", "batch_committed", end=done)
        self._commit_to_group(end, finished=True)

    def _commit_to_group(self, offsets: JsonOffsets, *, finished: bool) -> None:
        if self.opts.commit_to_group is None or not finished:
            return
        done = decode(offsets)
        if not done or done == self._committed:
            return
        from ..fetch import OffsetAndMetadata, TopicPartition

        try:
            if self._committer is None:
                from ..consumer import Consumer

                self._committer = Consumer(
                    **self.opts.consumer_config(group_id=self.opts.commit_to_group, enable_auto_commit=False)
                )
            self._committer.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in done.items()})
            self._committed = done
        except Exception as exc:  # progress for lag tools only: the checkpoint is what the query goes by
            log.warning(
                "commitToGroup: committing %s to group %r failed (tried again with the next batch): %r",
                describe(done),
                self.opts.commit_to_group,
                exc,
            )

    def stop(self) -> None:
        lookup, committer = self._lookup, self._committer
        self._lookup = self._committer = None
        try:
            if lookup is not None:
                lookup.close()
        finally:
            if committer is not None:
                committer.close(autocommit=False, timeout_ms=5000)
