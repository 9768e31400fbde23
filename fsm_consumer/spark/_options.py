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
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TopicPartitionKey = tuple[str, int]

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
)
CANONICAL = {name.lower(): name for name in (*_KNOWN, "kafka.bootstrap.servers")}
# Spark's, refused here with the reason (by lower-cased name: Spark's spelling, why)
_UNSUPPORTED = {
    "minoffsetspertrigger": ("minOffsetsPerTrigger", "is not implemented by fsm_kafka (maxOffsetsPerTrigger is)"),
    "maxtriggerdelay": ("maxTriggerDelay", "goes with minOffsetsPerTrigger, which fsm_kafka does not implement"),
    "topic": ("topic", "is the Kafka sink's option; a read takes subscribe, subscribePattern or assign"),
}
# kafka.* options Spark refuses (or that would break the read), with what to use instead
_KAFKA_REFUSED = {
    "group.id": "the source reads without a consumer group (offsets live in Spark's checkpoint); "
    "use the option commitToGroup to commit each finished batch's end to a group",
    "group.instance.id": "the source reads without a consumer group",
    "auto.offset.reset": "set the source option startingOffsets instead",
    "enable.auto.commit": "the source never commits consumer offsets (see commitToGroup)",
    "key.deserializer": "keys are always read as bytes; deserialize the key column with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize the value column with DataFrame operations",
    "interceptor.classes": "consumer interceptors are not supported",
    "partition.assignment.strategy": "the source assigns partitions itself",
}
# config keys that take Python objects, which a string option cannot give
_OBJECT_KEYS = frozenset(
    {
        "ssl_context",
        "sasl_oauth_token_provider",
        "default_offset_commit_callback",
        "key_deserializer",
        "value_deserializer",
        "partition_assignment_strategy",
    }
)
_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')

EARLIEST, LATEST = -2, -1
DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's default: spark.network.timeout


class KafkaOptionError(ValueError):
    """A read option is missing, unknown or has a value that is not allowed; ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"fsm_kafka option '{option}': {message}")
        self.option = option


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
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_retries: int = 3
    fetch_retry_interval_ms: int = 10
    commit_to_group: str | None = None
    history_path: str | None = None  # fsm_kafka's: a directory for the source's history (spark/_history.py)
    kafka_params: dict[str, Any] = field(default_factory=dict)
    given: frozenset[str] = frozenset()  # canonical names of the options given

    @property
    def strategy(self) -> str:
        return "subscribe" if self.subscribe is not None else "subscribePattern" if self.pattern else "assign"

    def consumer_config(self, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for an fsm_consumer ``Consumer``: the kafka.* options and ``overrides``."""
        return {**self.kafka_params, "bootstrap_servers": self.bootstrap_servers, **overrides}


# -- values ----------------------------------------------------------------------------------------------
def _bool(option: str, value: str) -> bool:
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise KafkaOptionError(option, f"{value!r} is not a boolean (true or false)")
    return text == "true"


def _long(option: str, value: str, *, minimum: int, what: str = "an integer") -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise KafkaOptionError(option, f"{value!r} is not {what}") from None
    if number < minimum:
        raise KafkaOptionError(option, f"{value!r} must be >= {minimum}")
    return number


def _json(option: str, value: str, example: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise KafkaOptionError(option, f"malformed JSON ({exc}): expected e.g. {example}, got {value!r}") from None


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


# -- kafka.* -------------------------------------------------------------------------------------------------
def _config_types() -> dict[str, str]:
    import attrs

    from .._config import ConsumerConfig

    return {a.name: str(a.type) for a in attrs.fields(ConsumerConfig)}


def _convert(option: str, key: str, value: str, kind: str) -> Any:
    text = str(value).strip()
    if kind == "bool":
        return _bool(option, text)
    if kind.startswith("int"):
        if kind.endswith("None") and text.lower() in ("", "none", "null"):
            return None
        return _long(option, text, minimum=-(2**63))
    if kind.startswith("float"):
        try:
            return float(text) if text.lower() not in ("inf", "infinity") else math.inf
        except ValueError:
            raise KafkaOptionError(option, f"{value!r} is not a number") from None
    if kind.endswith("None") and text == "":
        return None
    return text


def _jaas(value: str) -> dict[str, str]:
    """The username and password of a Java ``sasl.jaas.config`` (Plain or Scram login module)."""
    found = {k.lower(): v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _JAAS.findall(value)}
    if not {"username", "password"} <= set(found) or "oauthbearer" in value.lower():
        raise KafkaOptionError(
            "kafka.sasl.jaas.config",
            "only a PlainLoginModule or ScramLoginModule with "
            'username="..." password="..." can be translated; or set kafka.sasl.plain.username '
            "and kafka.sasl.plain.password",
        )
    return {"sasl_plain_username": found["username"], "sasl_plain_password": found["password"]}


def _kafka_params(given: Mapping[str, str]) -> tuple[str | None, dict[str, Any]]:
    """(bootstrap servers, the other Consumer keyword arguments) from the kafka.* options."""
    types = _config_types()
    servers = None
    params: dict[str, Any] = {}
    for option, value in given.items():
        name = option[len("kafka.") :]
        if name == "bootstrap.servers":
            servers = str(value).strip()
            continue
        if name in _KAFKA_REFUSED:
            raise KafkaOptionError(option, f"not allowed: {_KAFKA_REFUSED[name]}")
        if name == "sasl.jaas.config":
            params.update(_jaas(str(value)))
            continue
        if name == "ssl.endpoint.identification.algorithm":
            params["ssl_check_hostname"] = str(value).strip().lower() == "https"
            continue
        key = name.replace(".", "_")
        if key == "bootstrap_servers":
            servers = str(value).strip()
            continue
        if key in _OBJECT_KEYS:
            raise KafkaOptionError(
                option, f"config key {key!r} takes a Python object, which a string option cannot give"
            )
        if key not in types:
            options = sorted("kafka." + k.replace("_", ".") for k in types if k not in _OBJECT_KEYS)
            close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise KafkaOptionError(
                option,
                f"no fsm_consumer config key {key!r} (kafka.* options are the "
                f"consumer's config keys with dots for underscores){hint}",
            )
        params[key] = _convert(option, key, value, types[key])
    return servers, params


def _check_consumer_config(servers: str, params: dict[str, Any]) -> None:
    """Build the config once, so a bad value fails here, named as the option it came from."""
    from .._config import ConsumerConfig
    from ..errors import ConfigError

    try:
        ConsumerConfig.from_kwargs(**params, bootstrap_servers=servers)
    except ConfigError as exc:
        option = "kafka." + exc.key.replace("_", ".") if exc.key else "kafka.*"
        if exc.key == "bootstrap_servers":
            option = "kafka.bootstrap.servers"
        raise KafkaOptionError(option, str(exc)) from None


# -- the whole set ----------------------------------------------------------------------------------------
def _unknown(option: str) -> KafkaOptionError:
    if option in _UNSUPPORTED:
        name, why = _UNSUPPORTED[option]
        return KafkaOptionError(name, f"not supported for reads: it {why}")
    close = difflib.get_close_matches(option, list(CANONICAL), n=1, cutoff=0.6)
    hint = f"; did you mean '{CANONICAL[close[0]]}'?" if close else ""
    return KafkaOptionError(
        option,
        "unknown option (fsm_kafka takes Spark's Kafka source options, commitToGroup, historyPath "
        f"and kafka.* consumer settings){hint}",
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
    _check_consumer_config(servers, params)

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

    def number(name: str, minimum: int) -> int | None:
        return None if name not in opt else _long(name, opt[name], minimum=minimum)

    def number_or(name: str, minimum: int, default: int) -> int:
        return default if name not in opt else _long(name, opt[name], minimum=minimum)

    return ReadOptions(
        bootstrap_servers=servers,
        subscribe=subscribe,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        by_timestamp_strategy=strategy,
        max_offsets_per_trigger=number("maxOffsetsPerTrigger", 1),
        min_partitions=number("minPartitions", 1),
        max_records_per_partition=number("maxRecordsPerPartition", 1),
        fail_on_data_loss=_bool("failOnDataLoss", opt.get("failOnDataLoss", "true")),
        include_headers=_bool("includeHeaders", opt.get("includeHeaders", "false")),
        poll_timeout_ms=number_or("kafkaConsumer.pollTimeoutMs", 1, DEFAULT_POLL_TIMEOUT_MS),
        fetch_retries=number_or("fetchOffset.numRetries", 0, 3),
        fetch_retry_interval_ms=number_or("fetchOffset.retryIntervalMs", 0, 10),
        commit_to_group=None if group is None else str(group).strip(),
        history_path=None if history is None else str(history).strip(),
        kafka_params=params,
        given=frozenset(opt) | ({"kafka.bootstrap.servers"} if servers else frozenset()),
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
    return opts


def check_stream(opts: ReadOptions) -> ReadOptions:
    """What Spark refuses in a streaming read: any ending option."""
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        if name in opts.given:
            raise KafkaOptionError(name, "ending offsets are not valid in streaming queries (batch reads only)")
    return opts
