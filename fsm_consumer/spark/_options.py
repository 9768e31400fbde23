"""The ``fsm_kafka`` read options: Spark's Kafka source's names, defaults and checks, parsed once.

Option names are case-insensitive (pyspark hands them over lower-cased); errors name the option in
Spark's spelling. ``kafka.*`` options go to the fsm_consumer ``Consumer`` with the prefix stripped and
dots turned into underscores (``kafka.security.protocol`` -> ``security_protocol``), values converted
to the config key's type; a few Java client names are translated (``kafka.sasl.jaas.config``,
``kafka.ssl.endpoint.identification.algorithm``). Unlike Spark, an unknown option is an error naming
it (with the closest known name), not silently ignored.
"""

from __future__ import annotations

import difflib
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from . import _formats
from ._kafka_options import _check_consumer_config, _kafka_params, _stores
from ._option_values import KafkaOptionError as KafkaOptionError  # re-exported: the error of every option
from ._option_values import _bool, _json, _long, _time_ms
from ._stores import Stores, ssl_settings

TopicPartitionKey = tuple[str, int]
log = logging.getLogger("fsm_consumer.spark")

# Spark's Kafka source options this source implements, by their lower-cased name
_KNOWN = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "includeHeaders",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "groupIdPrefix",
    "commitToGroup",
    "historyPath",
    "progressPath",
)
CANONICAL = {name.lower(): name for name in (*_KNOWN, *_formats.OPTIONS, "kafka.bootstrap.servers")}
# Spark's, refused here with the reason (by lower-cased name: Spark's spelling, why)
_UNSUPPORTED = {
    "topic": ("topic", "is the Kafka sink's option; a read takes subscribe, subscribePattern or assign"),
}
EARLIEST, LATEST = -2, -1
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's default: spark.network.timeout
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000  # Spark's: 15m
# the prefix of a generated group id when kafka.group.id is not given (Spark's, per kind of read)
GROUP_ID_PREFIX = {"batch": "spark-kafka-relation", "stream": "spark-kafka-source"}


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: ``earliest``, ``latest``, ``offsets`` (per partition, -2 earliest, -1
    latest), ``timestamp`` (one for every partition, ms) or ``timestamps`` (per partition, ms)."""

    kind: str
    option: str  # the option it came from, for error messages
    offsets: dict[TopicPartitionKey, int] | None = None
    timestamp: int | None = None


@dataclass(frozen=True)
class ReadOptions:
    bootstrap_servers: str
    subscribe: tuple[str, ...] | None = None
    pattern: str | None = None
    assign: tuple[TopicPartitionKey, ...] | None = None
    starting: OffsetSpec | None = None  # None: the mode's default (earliest batch, latest streaming)
    ending: OffsetSpec | None = None  # batch only; None: latest
    by_timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_retries: int = 3
    fetch_retry_interval_ms: int = 10
    commit_to_group: str | None = None
    group_id: str | None = None  # kafka.group.id: the group id every consumer of the source carries
    group_id_prefix: str | None = None  # groupIdPrefix: of the generated one (without kafka.group.id)
    generated_group_id: str | None = None  # made once per query by the driver (with_group_id)
    history_path: str | None = None  # fsm_kafka's: a directory for the source's history (spark/_history.py)
    progress_path: str | None = None  # fsm_kafka's: a directory for batches' progress (spark/_progress.py)
    kafka_params: dict[str, Any] = field(default_factory=dict)
    stores: Stores | None = None  # kafka.ssl.truststore.* / keystore.*: PEM files made per process
    given: frozenset[str] = frozenset()  # canonical names of the options given
    formats: _formats.Formats = _formats.NONE  # valueFormat, keyFormat and the registry: typed columns

    @property
    def strategy(self) -> str:
        return "subscribe" if self.subscribe is not None else "subscribePattern" if self.pattern else "assign"

    def consumer_config(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for an fsm_consumer ``Consumer``: the kafka.* options and ``overrides``."""
        return {
            **self.kafka_params,
            **ssl_settings(self.stores),
            "bootstrap_servers": self.bootstrap_servers,
            **overrides,
        }

    def with_formats_pinned(self) -> ReadOptions:
        """These options with the typed columns' reader schemas chosen (the driver, once per read)."""
        if not self.formats.typed:
            return self
        topics = self.subscribe or tuple(dict.fromkeys(t for t, _ in self.assign or ()))
        return replace(self, formats=self.formats.pinned(topics))

    def with_group_id(self, kind: str) -> ReadOptions:
        """These options with the query's group id made (``kind``: "batch" or "stream"), as Spark's source
        makes one per query on the driver: ``groupIdPrefix`` (default Spark's for the kind), a dash, a
        random UUID. Without effect when ``kafka.group.id`` is given (that one is carried as it is)."""
        if self.group_id is not None:
            # Spark's warning, shortened: a group id shared by queries is a choice to make knowingly
            log.warning(
                "fsm_kafka: kafka.group.id %r is carried by every consumer of this read (for brokers that "
                "authorize by group); they read assigned ranges and never join the group nor commit to it%s",
                self.group_id,
                "; groupIdPrefix is ignored" if self.group_id_prefix is not None else "",
            )
            return self
        if self.generated_group_id is not None:
            return self
        prefix = self.group_id_prefix or GROUP_ID_PREFIX[kind]
        return replace(self, generated_group_id=f"{prefix}-{uuid.uuid4()}")

    def carried_group_id(self, role: str) -> str | None:
        """The group id a consumer of the source carries (``role``: "driver" or "executor"): ``kafka.group.id``
        as given, else the generated one with the role appended (Spark's ``-driver``/``-executor``). The
        consumers never join the group nor commit to it (they read assigned ranges, as Spark's do); brokers
        that authorize by group see it."""
        if self.group_id is not None:
            return self.group_id
        return None if self.generated_group_id is None else f"{self.generated_group_id}-{role}"


# -- values ----------------------------------------------------------------------------------------------
def _per_partition(option: str, value: str, *, minimum: int, example: str) -> dict[TopicPartitionKey, int]:
    """``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}`` to {(topic, partition): number}."""
    parsed = _json(option, value, example)
    bad = KafkaOptionError(option, f"expected e.g. {example}, got {value!r}")
    if not isinstance(parsed, dict) or not parsed:
        raise bad
    out = {}
    for topic, parts in parsed.items():
        if not isinstance(topic, str) or not topic or not isinstance(parts, dict):
            raise bad
        for p, number in parts.items():
            try:
                partition = int(p)
            except (TypeError, ValueError):
                raise bad from None
            if isinstance(number, bool) or not isinstance(number, int) or partition < 0:
                raise bad
            if number < minimum:
                raise KafkaOptionError(option, f"{number} for {topic}-{partition} is not allowed (>= {minimum})")
            out[(topic, partition)] = number
    return out


def _assign(value: str) -> tuple[TopicPartitionKey, ...]:
    example = '{"topicA":[0,1],"topicB":[0,1]}'
    parsed = _json("assign", value, example)
    bad = KafkaOptionError("assign", f"expected e.g. {example}, got {value!r}")
    if not isinstance(parsed, dict):
        raise bad
    out = []
    for topic, parts in parsed.items():
        if not isinstance(topic, str) or not topic or not isinstance(parts, list):
            raise bad
        for p in parts:
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise bad
            out.append((topic, p))
    if not out:
        raise KafkaOptionError("assign", f"no topic-partitions to assign in {value!r}")
    return tuple(sorted(set(out)))


def _offsets(option: str, value: str, *, allowed: tuple[str, ...]) -> OffsetSpec:
    text = str(value).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower(), option)
    if not text.startswith("{"):
        raise KafkaOptionError(
            option,
            f"{value!r} is not one of {', '.join(allowed)} or a JSON object such as "
            '{"topicA":{"0":23,"1":-1}} (-2: earliest, -1: latest)',
        )
    return OffsetSpec(
        "offsets",
        option,
        offsets=_per_partition(option, text, minimum=EARLIEST, example='{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'),
    )


# -- the whole set ----------------------------------------------------------------------------------------
def _unknown(option: str) -> KafkaOptionError:
    if option in _UNSUPPORTED:
        name, why = _UNSUPPORTED[option]
        return KafkaOptionError(name, f"not supported for reads: it {why}")
    close = difflib.get_close_matches(option, list(CANONICAL), n=1, cutoff=0.6)
    hint = f"; did you mean '{CANONICAL[close[0]]}'?" if close else ""
    return KafkaOptionError(
        option,
        "unknown option (fsm_kafka takes Spark's Kafka source options, commitToGroup, historyPath, progressPath, "
        f"valueFormat, keyFormat, schema.registry.* and kafka.* consumer settings){hint}",
    )


def _bound(opt: Mapping[str, str], side: str, *, allowed: tuple[str, ...]) -> OffsetSpec | None:
    """Where reading starts or ends (``side``: "starting" or "ending"), from whichever option is given."""
    by_time, by_times, by_offsets = f"{side}Timestamp", f"{side}OffsetsByTimestamp", f"{side}Offsets"
    if by_time in opt:
        return OffsetSpec(
            "timestamp", by_time, timestamp=_long(by_time, opt[by_time], minimum=0, what="a timestamp in ms (a long)")
        )
    if by_times in opt:
        return OffsetSpec(
            "timestamps",
            by_times,
            offsets=_per_partition(
                by_times, str(opt[by_times]), minimum=0, example='{"topicA":{"0":1700000000000,"1":1700000000000}}'
            ),
        )
    if by_offsets in opt:
        return _offsets(by_offsets, opt[by_offsets], allowed=allowed)
    return None


def parse(options: Mapping[str, str]) -> ReadOptions:
    """Check and parse the options of a read (batch or streaming); see ``check_batch``/``check_stream``."""
    lowered: dict[str, str] = {}
    for key, value in options.items():
        lowered[str(key).lower()] = value
    kafka = {k: v for k, v in lowered.items() if k.startswith("kafka.")}
    plain = {k: v for k, v in lowered.items() if not k.startswith("kafka.")}
    stores = _stores(kafka)
    for option in plain:
        if option not in CANONICAL:
            raise _unknown(option)
    opt = {CANONICAL[k]: v for k, v in plain.items()}
    servers, params = _kafka_params(kafka)
    if not servers:
        raise KafkaOptionError(
            "kafka.bootstrap.servers",
            "required: the Kafka brokers to read from, "
            "e.g. .option('kafka.bootstrap.servers', 'host1:9092,host2:9092')",
        )
    _check_consumer_config(servers, {**params, **ssl_settings(stores)})

    chosen = [name for name in ("subscribe", "subscribePattern", "assign") if name in opt]
    if len(chosen) > 1:
        raise KafkaOptionError(
            chosen[1], f"only one of subscribe, subscribePattern, assign can be specified, got {' and '.join(chosen)}"
        )
    if not chosen:
        raise KafkaOptionError(
            "subscribe",
            "one of the options subscribe, subscribePattern or assign must be specified for the Kafka source",
        )
    subscribe = pattern = assign = None
    if "subscribe" in opt:
        subscribe = tuple(dict.fromkeys(t.strip() for t in str(opt["subscribe"]).split(",") if t.strip()))
        if not subscribe:
            raise KafkaOptionError("subscribe", f"no topics to subscribe to in {opt['subscribe']!r}")
    elif "subscribePattern" in opt:
        pattern = str(opt["subscribePattern"]).strip()
        if not pattern:
            raise KafkaOptionError("subscribePattern", "the pattern to subscribe is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise KafkaOptionError("subscribePattern", f"{pattern!r} is not a regular expression: {exc}") from None
    else:
        assign = _assign(str(opt["assign"]))

    # Spark's precedence for each side: ...Timestamp, then ...OffsetsByTimestamp, then ...Offsets
    starting = _bound(opt, "starting", allowed=("earliest", "latest"))
    ending = _bound(opt, "ending", allowed=("latest",))

    strategy = str(opt.get("startingOffsetsByTimestampStrategy", "error")).strip().lower()
    if strategy not in ("error", "latest"):
        raise KafkaOptionError("startingOffsetsByTimestampStrategy", f"{strategy!r} is not one of error, latest")
    group = opt.get("commitToGroup")
    if group is not None and not str(group).strip():
        raise KafkaOptionError("commitToGroup", "the group id is empty")
    history = opt.get("historyPath")
    if history is not None and not str(history).strip():
        raise KafkaOptionError("historyPath", "the directory is empty")
    progress = opt.get("progressPath")
    if progress is not None and not str(progress).strip():
        raise KafkaOptionError("progressPath", "the directory is empty")
    group_id = params.pop("group_id", None)  # kafka.group.id: carried by the consumers, never joined
    if "kafka.group.id" in kafka and not str(kafka["kafka.group.id"]).strip():
        raise KafkaOptionError("kafka.group.id", "the group id is empty")
    prefix = opt.get("groupIdPrefix")
    if prefix is not None and not str(prefix).strip():
        raise KafkaOptionError("groupIdPrefix", "the prefix is empty")

    def number(name: str, minimum: int) -> int | None:
        return None if name not in opt else _long(name, opt[name], minimum=minimum)

    def number_or(name: str, minimum: int, default: int) -> int:
        return default if name not in opt else _long(name, opt[name], minimum=minimum)

    max_offsets, min_offsets = number("maxOffsetsPerTrigger", 1), number("minOffsetsPerTrigger", 1)
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise KafkaOptionError(
            "minOffsetsPerTrigger", f"{min_offsets} is higher than maxOffsetsPerTrigger ({max_offsets})"
        )

    return ReadOptions(
        bootstrap_servers=servers,
        subscribe=subscribe,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        by_timestamp_strategy=strategy,
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=_time_ms("maxTriggerDelay", opt["maxTriggerDelay"])
        if "maxTriggerDelay" in opt
        else DEFAULT_MAX_TRIGGER_DELAY_MS,
        min_partitions=number("minPartitions", 1),
        max_records_per_partition=number("maxRecordsPerPartition", 1),
        fail_on_data_loss=_bool("failOnDataLoss", opt.get("failOnDataLoss", "true")),
        include_headers=_bool("includeHeaders", opt.get("includeHeaders", "false")),
        poll_timeout_ms=number_or("kafkaConsumer.pollTimeoutMs", 1, DEFAULT_POLL_TIMEOUT_MS),
        fetch_retries=number_or("fetchOffset.numRetries", 0, 3),
        fetch_retry_interval_ms=number_or("fetchOffset.retryIntervalMs", 0, 10),
        commit_to_group=None if group is None else str(group).strip(),
        group_id=None if group_id is None else str(group_id).strip(),
        group_id_prefix=None if prefix is None else str(prefix).strip(),
        history_path=None if history is None else str(history).strip(),
        progress_path=None if progress is None else str(progress).strip(),
        kafka_params=params,
        stores=stores,
        given=frozenset(opt) | ({"kafka.bootstrap.servers"} if servers else frozenset()),
        formats=_formats.parse(opt),
    )


def _refuse(spec: OffsetSpec | None, kind: str, sentinel: int, side: str) -> None:
    """A batch read cannot start at latest nor end at earliest, as a whole or for one partition."""
    if spec is None:
        return
    if spec.kind == kind:
        raise KafkaOptionError(spec.option, f"{side} offset can't be {kind} for batch queries on Kafka")
    if spec.kind == "offsets":
        assert spec.offsets is not None  # parse() gives an "offsets" spec its per-partition offsets
        for (topic, p), offset in spec.offsets.items():
            if offset == sentinel:
                raise KafkaOptionError(
                    spec.option,
                    f"{side} offset for {topic}-{p} can't be {kind} ({sentinel}) for batch queries on Kafka",
                )


def check_batch(opts: ReadOptions) -> ReadOptions:
    """What Spark refuses in a batch read: starting at latest, ending at earliest; and commitToGroup."""
    _refuse(opts.starting, "latest", LATEST, "starting")
    _refuse(opts.ending, "earliest", EARLIEST, "ending")
    if opts.commit_to_group is not None:
        raise KafkaOptionError(
            "commitToGroup", "only for streaming reads (spark.readStream): a batch read has no progress to commit"
        )
    for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
        if name in opts.given:  # Spark's warning: a batch read takes everything in one go
            log.warning("fsm_kafka: option %s ignored in batch queries (it is for spark.readStream)", name)
    return opts


def check_stream(opts: ReadOptions) -> ReadOptions:
    """What Spark refuses in a streaming read: any ending option."""
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        if name in opts.given:
            raise KafkaOptionError(name, "ending offsets are not valid in streaming queries (batch reads only)")
    return opts
