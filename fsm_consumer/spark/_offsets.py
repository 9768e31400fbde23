"""The driver's side: which topic-partitions to read and at which offsets, looked up with an
fsm_consumer ``Consumer`` without a group (metadata, ``beginning_offsets``, ``end_offsets``,
``offsets_for_times``), and Spark's data-loss rule (``failOnDataLoss``).

Streaming offsets are Spark's Kafka source's JSON: ``{"topic": {"0": 23, "1": 5}}`` (partitions as
strings, topics and partitions sorted, so equal offsets are equal JSON).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ._option_values import KafkaOptionError
from ._options import EARLIEST, LATEST, OffsetSpec, ReadOptions, TopicPartitionKey

if TYPE_CHECKING:
    from ..consumer import Consumer
    from ..fetch import TopicPartition

log = logging.getLogger("fsm_consumer.spark")
T = TypeVar("T")
Offsets = dict[TopicPartitionKey, int]
JsonOffsets = dict[str, dict[str, int]]  # Spark's Kafka source's offsets: {"topic": {"0": 23}}

_LOSS_HINT = (
    "Some data may have been lost because they are not available in Kafka any more; either the data "
    "was aged out by Kafka or the topic may have been deleted before all the data in the topic was "
    "processed. If you want your query to go on in such cases (reading what is still there), set the "
    "source option 'failOnDataLoss' to 'false'."
)


class DataLossError(RuntimeError):
    """Offsets to read are gone from Kafka (aged out, topic deleted) and ``failOnDataLoss`` is true."""


def report_data_loss(opts: ReadOptions, message: str) -> None:
    """Spark's rule: raise with ``failOnDataLoss=true`` (the default), else log a warning and go on."""
    if opts.fail_on_data_loss:
        raise DataLossError(f"{message}. {_LOSS_HINT}")
    log.warning("%s. Some data may have been lost; going on because failOnDataLoss is false.", message)


def encode(offsets: Offsets) -> JsonOffsets:
    out: JsonOffsets = {}
    for (topic, p), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = int(offset)
    return out


def decode(offsets: Mapping[str, Mapping[str, Any]] | None) -> Offsets:
    return {(topic, int(p)): int(o) for topic, parts in (offsets or {}).items() for p, o in parts.items()}


def describe(tps: Iterable[TopicPartitionKey]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


class OffsetLookup:
    """Metadata and offset lookups for the driver, on one Consumer (made on first use) that carries the
    read's group id and never joins it."""

    def __init__(self, opts: ReadOptions, **consumer_overrides: Any) -> None:
        self.opts = opts
        self._overrides = consumer_overrides  # Consumer settings over the options' (fsm-consumer ingest's checks)
        self._consumer: Consumer | None = None

    def _client(self) -> Consumer:
        if self._consumer is None:
            from ..consumer import Consumer

            self._consumer = Consumer(
                **self.opts.consumer_config(
                    group_id=self.opts.carried_group_id("driver"), enable_auto_commit=False, **self._overrides
                )
            )
        return self._consumer

    def _retry(self, what: Callable[[Consumer], T]) -> T:
        """``what(consumer)``, tried again ``fetchOffset.numRetries`` times on a timeout."""
        from ..errors import KafkaTimeoutError

        for attempt in range(self.opts.fetch_retries + 1):
            try:
                return what(self._client())
            except KafkaTimeoutError:
                if attempt == self.opts.fetch_retries:
                    raise
                log.warning(
                    "Kafka offset lookup timed out; trying again (%d of %d)", attempt + 1, self.opts.fetch_retries
                )
                time.sleep(self.opts.fetch_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close(autocommit=False, timeout_ms=5000)

    # -- lookups ---------------------------------------------------------------------------------------
    def partitions(self) -> list[TopicPartitionKey]:
        """The topic-partitions that subscribe, subscribePattern or assign name, as they are now."""
        opts = self.opts
        if opts.assign is not None:
            wanted = sorted(opts.assign)
            for topic in sorted({t for t, _ in wanted}):
                have = self._partitions_for(topic)
                missing = [p for t, p in wanted if t == topic and p not in have]
                if missing:
                    what = f"has partitions {sorted(have)}" if have else "does not exist"
                    raise KafkaOptionError("assign", f"topic {topic!r} {what}: cannot assign partitions {missing}")
            return wanted
        if opts.subscribe is not None:
            topics = list(opts.subscribe)
        else:
            assert opts.pattern is not None  # parse() sets exactly one of subscribe, subscribePattern, assign
            pattern = re.compile(opts.pattern)
            internal = self._client().config.exclude_internal_topics
            topics = sorted(
                t
                for t in self._retry(lambda c: c.topics())
                if pattern.fullmatch(t) and not (internal and t.startswith("__"))
            )
        out = []
        for topic in topics:
            parts = self._partitions_for(topic)
            out += [(topic, p) for p in sorted(parts or ())]
        return out

    def connect(self) -> None:
        """Make the consumer now, once: its KafkaTimeoutError (no broker answered within its
        bootstrap_timeout_ms, and why each address failed) is raised as it is, not retried."""
        self._client()

    def topics(self) -> set[str]:
        """Every topic the cluster has, asked without naming one (a Metadata request naming a topic may
        create it on a broker that creates topics on demand)."""
        return set(self._retry(lambda c: c.topics()))

    def _partitions_for(self, topic: str) -> set[int]:
        return self._retry(lambda c: c.partitions_for_topic(topic))

    def identity(self, topics: Iterable[str]) -> dict[str, Any]:
        """What names the data being read, for a checkpoint to be checked against later: the cluster id and
        each topic's id (KIP-516: a topic deleted and created again gets a new one, another cluster other
        ones). Values are None where the broker sends none (Metadata before v10)."""
        wanted = sorted(set(topics))
        for topic in wanted:
            self._partitions_for(topic)  # a metadata answer naming the topic
        metadata = self._client()._metadata  # read-only peek at the last answer (the package's own)
        return {
            "cluster_id": metadata.cluster_id,
            "topic_ids": {t: getattr(metadata.topics.get(t), "topic_id", None) for t in wanted},
        }

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        return self._offsets(tps, "beginning_offsets")

    def latest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        return self._offsets(tps, "end_offsets")

    def _offsets(self, tps: Iterable[TopicPartitionKey], method: str) -> Offsets:
        from ..fetch import TopicPartition

        wanted = [TopicPartition(t, p) for t, p in tps]
        if not wanted:
            return {}
        found: dict[TopicPartition, int] = self._retry(lambda c: getattr(c, method)(wanted))
        missing = [tp for tp in wanted if tp not in found]
        if missing:
            raise RuntimeError(f"{method} gave no offset for {describe(missing)}")
        return {(tp.topic, tp.partition): found[tp] for tp in wanted}

    def for_times(self, timestamps: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int | None]:
        from ..fetch import TopicPartition

        if not timestamps:
            return {}
        asked = {TopicPartition(t, p): ts for (t, p), ts in timestamps.items()}
        found = self._retry(lambda c: c.offsets_for_times(asked))
        return {(tp.topic, tp.partition): (None if (hit := found.get(tp)) is None else hit.offset) for tp in asked}


# -- resolving an option ----------------------------------------------------------------------------------
def resolve(
    spec: OffsetSpec,
    tps: list[TopicPartitionKey],
    lookup: OffsetLookup,
    *,
    ending: bool,
    by_timestamp_strategy: str = "error",
    earliest: Offsets | None = None,
    latest: Offsets | None = None,
) -> Offsets:
    """Concrete offsets for ``tps`` from a startingOffsets/endingOffsets-like option. ``earliest`` and
    ``latest``, when given, are the lookups already made."""
    if not tps:
        return {}

    def lo(parts: Iterable[TopicPartitionKey]) -> Offsets:
        return {tp: earliest[tp] for tp in parts} if earliest is not None else lookup.earliest(parts)

    def hi(parts: Iterable[TopicPartitionKey]) -> Offsets:
        return {tp: latest[tp] for tp in parts} if latest is not None else lookup.latest(parts)

    if spec.kind == "earliest":
        return lo(tps)
    if spec.kind == "latest":
        return hi(tps)
    if spec.kind in ("offsets", "timestamps"):
        assert spec.offsets is not None  # parse() gives these kinds their per-partition numbers
        given = set(spec.offsets)
        if given != set(tps):
            raise KafkaOptionError(
                spec.option,
                "if it names specific partitions it must name all the "
                f"TopicPartitions read: named {describe(given) or 'none'}; read "
                f"{describe(tps)}" + (" (use -1 for latest, -2 for earliest)" if spec.kind == "offsets" else ""),
            )
    if spec.kind == "offsets":
        assert spec.offsets is not None
        out = dict(spec.offsets)
        first = lo([tp for tp, o in out.items() if o == EARLIEST])
        last = hi([tp for tp, o in out.items() if o == LATEST])
        return {tp: first.get(tp, last.get(tp, o)) for tp, o in sorted(out.items())}
    if spec.kind == "timestamp":
        assert spec.timestamp is not None  # parse() gives a "timestamp" spec its timestamp
        stamps = {tp: spec.timestamp for tp in tps}
    else:
        assert spec.offsets is not None
        stamps = dict(spec.offsets)
    found = lookup.for_times(stamps)
    none = sorted(tp for tp, o in found.items() if o is None)
    if none and not ending and by_timestamp_strategy == "error":
        raise KafkaOptionError(
            spec.option,
            f"no offset matched the timestamp for {describe(none)} (no record "
            "at or after it); set startingOffsetsByTimestampStrategy=latest to start at the "
            "latest offset there",
        )
    last = hi(none)  # no record at or after the timestamp: the latest offset, as Spark
    return {tp: (last[tp] if o is None else o) for tp, o in sorted(found.items())}
