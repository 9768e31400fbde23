"""Consumer configuration: kafka-python's keyword names and defaults, frozen and checked once.

An unknown key names itself and the closest valid key; a bad value names the key, the value and
what is allowed. Keys that kafka-python accepts but that mean nothing here (``selector``,
``metric_reporters``...) are accepted and ignored so existing code keeps working; docs/kafka-python.md
lists them. ``config["key"]`` reads a setting as kafka-python's dict does.
"""

from __future__ import annotations

import difflib
import math
import ssl
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ._version import __version__

if TYPE_CHECKING:
    from typing import TypeAlias

    from .errors import ConfigError
    from .structs import OffsetAndMetadata, TopicPartition

    # what attrs calls a field's validator with: (the instance, the field, the value)
    _Validator: TypeAlias = Callable[[Any, attrs.Attribute[Any], Any], None]
    # kafka-python's offset commit callback: (the offsets, the error or None); what it returns is ignored
    OffsetCommitCallback: TypeAlias = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], object]
    # a key or value deserializer: the raw bytes (None for a null key or value) -> what a record holds, or
    # an object whose deserialize(topic, headers, data) does it (kafka-python's Deserializer)
    Deserializer: TypeAlias = Callable[[bytes | None], Any] | Any

_STRATEGY_NAMES = ("range", "roundrobin", "sticky", "cooperative-sticky")
# accepted for compatibility with kafka-python, not used: say so in the docs, never fail on them
IGNORED_KEYS = frozenset(
    {
        "selector",
        "metric_reporters",
        "metrics_num_samples",
        "metrics_sample_window_ms",
        "metric_group_prefix",
        "metrics_enabled",
        "kafka_client",
        "client_dns_lookup",
        "socket_options",
        "sasl_kerberos_service_name",
        "sasl_kerberos_domain_name",
        "sasl_kerberos_name",
        "ssl_ciphers",
        "ssl_crlfile",
        "proxy_url",
        "socks5_proxy",
        # kafka-python 2.x: its two iterators yield the same records, and there is one iterator here
        "legacy_iterator",
        "sock_chunk_buffer_count",
    }
)
# kafka-python 2.x's api_version_auto_timeout_ms is 3.0's bootstrap_timeout_ms: the constructor's wait for a broker
ALIASES = {"receive_message_max_bytes": "receive_buffer_max", "api_version_auto_timeout_ms": "bootstrap_timeout_ms"}
_KAFKA_PYTHON_SERVERS = "localhost"  # kafka-python's default bootstrap_servers, as config["bootstrap_servers"] shows it


def _config_error(message: str, *, key: str | None = None) -> ConfigError:
    # fsm_consumer.errors subclasses kafka-python's errors, and kafka-python's package costs a process 11 MB
    # and 0.15 s to import: a Spark worker that only checks a data source's options never needs it
    from .errors import ConfigError

    return ConfigError(message, key=key)


def _fail(key: str, value: Any, allowed: str) -> ConfigError:
    return _config_error(f"config key {key!r}: {value!r} is not allowed ({allowed})", key=key)


def _int(lo: float = 0, hi: float = math.inf, *, none: bool = False) -> _Validator:
    def check(_: object, attr: attrs.Attribute[Any], value: Any) -> None:
        if value is None and none:
            return
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            bound = f"an integer >= {lo}" if hi == math.inf else f"an integer from {lo} to {hi}"
            raise _fail(attr.name, value, bound + (" or None" if none else ""))

    return check


def _choice(*options: str) -> _Validator:
    def check(_: object, attr: attrs.Attribute[Any], value: Any) -> None:
        if value not in options:
            raise _fail(attr.name, value, "one of " + ", ".join(repr(o) for o in options))

    return check


def _name(_: object, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise _fail(attr.name, value, "a name, such as 'uniform' or 'range' (Kafka's), or the broker's own assignor")


def _bool(_: object, attr: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise _fail(attr.name, value, "True or False")


def _callable_or_none(_: object, attr: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not callable(value):
        raise _fail(attr.name, value, "a callable or None")


def _deserializer(_: object, attr: attrs.Attribute[Any], value: Any) -> None:
    # kafka-python takes a callable of the bytes or a Deserializer object (deserialize(topic, headers, data))
    if value is not None and not callable(value) and not callable(getattr(value, "deserialize", None)):
        raise _fail(attr.name, value, "a callable, an object with deserialize(topic, headers, data), or None")


def _str_or_none(_: object, attr: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise _fail(attr.name, value, "a non-empty string or None")


_CLIENT_ID = f"fsm-consumer-{__version__}"


def _client_id(value: Any) -> Any:
    return _CLIENT_ID if value is None else value


def _servers(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    try:
        out = tuple(s.strip() for s in items if s and s.strip())
    except (TypeError, AttributeError):
        raise _fail("bootstrap_servers", value, "'host:port', a comma-separated string or a list of them") from None
    for s in out:
        host, _, port = s.rpartition(":")
        if not port.isdigit():
            out = tuple((x if x.rpartition(":")[2].isdigit() else f"{x}:9092") for x in out)
            break
    if not out:
        raise _fail("bootstrap_servers", value, "at least one 'host:port'")
    return out


def _strategies(value: Any) -> tuple[Any, ...]:
    items = (value,) if isinstance(value, (str, type)) or not hasattr(value, "__iter__") else tuple(value)
    if not items:
        raise _fail("partition_assignment_strategy", value, "at least one assignor")
    for s in items:
        if isinstance(s, str) and s not in _STRATEGY_NAMES:
            raise _fail(
                "partition_assignment_strategy",
                s,
                "names " + ", ".join(_STRATEGY_NAMES) + ", or assignor objects/classes",
            )
    return items


def _api_version(value: Any) -> tuple[int, ...] | None:
    """kafka-python's meaning: a broker release whose API versions cap every request; None infers it."""
    if value is None or value == "auto":
        return None
    if isinstance(value, str):
        try:
            value = tuple(int(x) for x in value.split("."))
        except ValueError:
            raise _fail("api_version", value, "None or a broker release tuple such as (3, 9)") from None
    if not isinstance(value, tuple) or not value or not all(isinstance(x, int) and x >= 0 for x in value):
        raise _fail("api_version", value, "None or a broker release tuple such as (3, 9)")
    from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

    known = [v for v in BROKER_API_VERSIONS if v <= value]
    if not known or max(known) < (0, 10):
        raise _fail(
            "api_version",
            value,
            "a broker release from (0, 10) on: this client needs ApiVersions (use None to infer it from the broker)",
        )
    return value


# with group_protocol="consumer" the broker runs the group: these client settings have no meaning (the Java
# client refuses them the same way); what takes their place
_CLASSIC_ONLY = {
    "partition_assignment_strategy": "group_remote_assignor ('uniform', 'range', or the broker's own: it assigns)",
    "session_timeout_ms": "the broker's group.consumer.session.timeout.ms",
    "heartbeat_interval_ms": "the broker's group.consumer.heartbeat.interval.ms (sent back in every heartbeat)",
}


def _protocol_checks(given: dict[str, Any]) -> None:
    """Settings given that the chosen group protocol does not use are refused, not silently ignored."""
    protocol = given.get("group_protocol", "classic")
    if protocol == "consumer":
        for key, instead in _CLASSIC_ONLY.items():
            if key in given:
                raise _config_error(
                    f"config key {key!r} cannot be set with group_protocol='consumer': use {instead}", key=key
                )
    elif given.get("group_remote_assignor") is not None:
        raise _config_error(
            "config key 'group_remote_assignor' needs group_protocol='consumer' (the classic protocol assigns "
            "on the client: use partition_assignment_strategy)",
            key="group_remote_assignor",
        )


def _cross_checks(cfg: ConsumerConfig) -> None:
    if cfg.heartbeat_interval_ms >= cfg.session_timeout_ms:
        raise _config_error(
            f"config key 'heartbeat_interval_ms': {cfg.heartbeat_interval_ms} must be below "
            f"session_timeout_ms ({cfg.session_timeout_ms})",
            key="heartbeat_interval_ms",
        )
    if cfg.retry_backoff_ms >= cfg.session_timeout_ms:  # specs/membership.yaml: join_backoff_within_session
        raise _config_error(
            f"config key 'retry_backoff_ms': {cfg.retry_backoff_ms} must be below session_timeout_ms "
            f"({cfg.session_timeout_ms}): a member backing off a JoinGroup retry for longer than its session "
            "loses its partitions meanwhile",
            key="retry_backoff_ms",
        )
    if cfg.reconnect_backoff_max_ms < cfg.reconnect_backoff_ms:
        raise _config_error(
            "config key 'reconnect_backoff_max_ms' must be >= reconnect_backoff_ms", key="reconnect_backoff_max_ms"
        )
    if cfg.group_instance_id is not None and cfg.group_id is None:
        raise _config_error("config key 'group_instance_id' needs a group_id", key="group_instance_id")
    if cfg.security_protocol.startswith("SASL") and cfg.sasl_mechanism is None:
        raise _config_error(
            f"config key 'sasl_mechanism' is required with security_protocol={cfg.security_protocol!r}",
            key="sasl_mechanism",
        )
    if cfg.sasl_mechanism == "OAUTHBEARER":
        if cfg.sasl_oauth_token_provider is None or not callable(getattr(cfg.sasl_oauth_token_provider, "token", None)):
            raise _config_error(
                "config key 'sasl_oauth_token_provider' must be an object with a token() method "
                "with sasl_mechanism='OAUTHBEARER'",
                key="sasl_oauth_token_provider",
            )
    elif cfg.sasl_mechanism is not None and (cfg.sasl_plain_username is None or cfg.sasl_plain_password is None):
        raise _config_error(
            "config keys 'sasl_plain_username' and 'sasl_plain_password' are required with "
            f"sasl_mechanism={cfg.sasl_mechanism!r}",
            key="sasl_plain_username",
        )


def _default_commit_callback(  # kafka-python's default: nothing
    offsets: dict[TopicPartition, OffsetAndMetadata], response: BaseException | None
) -> None:
    return None


@attrs.frozen(kw_only=True)
class ConsumerConfig:
    """Every setting of a Consumer. Build with ``ConsumerConfig.from_kwargs(**kw)``."""

    bootstrap_servers: tuple[str, ...] = attrs.field(default=("localhost:9092",), converter=_servers)
    # what config["bootstrap_servers"] returns: the value as given (kafka-python keeps the user's string or list)
    _bootstrap_servers_given: Any = attrs.field(default=None, alias="_bootstrap_servers_given", repr=False, eq=False)
    # None (kafka-python lets it through) is the default: the id names the machines, the thread and the history
    client_id: str = attrs.field(default=_CLIENT_ID, converter=_client_id, validator=_str_or_none)
    client_rack: str = ""
    group_id: str | None = attrs.field(default=None, validator=_str_or_none)
    group_instance_id: str | None = attrs.field(default=None, validator=_str_or_none)
    key_deserializer: Deserializer | None = attrs.field(default=None, validator=_deserializer)
    value_deserializer: Deserializer | None = attrs.field(default=None, validator=_deserializer)
    # fetching
    fetch_min_bytes: int = attrs.field(default=1, validator=_int(1))
    fetch_max_wait_ms: int = attrs.field(default=500, validator=_int(0))
    fetch_max_bytes: int = attrs.field(default=52_428_800, validator=_int(1))
    max_partition_fetch_bytes: int = attrs.field(default=1_048_576, validator=_int(1))
    fetch_buffer_max_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=_int(1))
    # fetch a partition again from the end of its buffered fetch while that is handed out (specs/fetch.yaml):
    # B on Kafka +23-40% (tools/bench-results/2026-11-26/whole-frame-read/README.md)
    fetch_ahead: bool = attrs.field(default=True, validator=_bool)
    enable_incremental_fetch_sessions: bool = attrs.field(default=True, validator=_bool)
    max_poll_records: int = attrs.field(default=500, validator=_int(1))
    isolation_level: str = attrs.field(
        default="read_uncommitted", validator=_choice("read_uncommitted", "read_committed")
    )
    check_crcs: bool = attrs.field(default=True, validator=_bool)
    auto_offset_reset: str = attrs.field(default="latest", validator=_choice("earliest", "latest", "none"))
    # offsets and groups
    enable_auto_commit: bool = attrs.field(default=True, validator=_bool)
    auto_commit_interval_ms: int = attrs.field(default=5000, validator=_int(1))
    default_offset_commit_callback: OffsetCommitCallback | None = attrs.field(
        default=_default_commit_callback, validator=_callable_or_none
    )
    partition_assignment_strategy: tuple[Any, ...] = attrs.field(default=("range", "roundrobin"), converter=_strategies)
    session_timeout_ms: int = attrs.field(default=45_000, validator=_int(1))
    heartbeat_interval_ms: int = attrs.field(default=3000, validator=_int(1))
    max_poll_interval_ms: int = attrs.field(default=300_000, validator=_int(1))
    # the group protocol: "classic" (JoinGroup/SyncGroup, client-side assignors) or "consumer" (KIP-848:
    # ConsumerGroupHeartbeat, the broker assigns); the Java client's group.protocol, classic by default
    group_protocol: str = attrs.field(default="classic", validator=_choice("classic", "consumer"))
    # the broker-side assignor a consumer-protocol member asks for (group.remote.assignor); None: the broker's.
    # Kafka ships "uniform" and "range"; a broker may be given its own (group.consumer.assignors), so any name
    # goes, and a name the broker does not know is its UNSUPPORTED_ASSIGNOR, raised from poll()
    group_remote_assignor: str | None = attrs.field(default=None, validator=attrs.validators.optional(_name))
    # A follower waits this long after its JoinGroup answer before sending SyncGroup. 0 (Kafka's Java
    # client) is right for Apache Kafka, which holds early follower syncs for the leader's. Tansu 0.6
    # answers JoinGroups one by one and fails a follower sync that beats the leader's after about
    # session_timeout_ms; about one heartbeat_interval_ms lets the leader's go first there. With it,
    # a member that revoked partitions (cooperative) sends its follow-up JoinGroup no sooner than
    # twice this after its JoinGroup answer, so the other members' held syncs land in their generation.
    follower_sync_delay_ms: int = attrs.field(default=0, validator=_int(0))
    exclude_internal_topics: bool = attrs.field(default=True, validator=_bool)
    allow_auto_create_topics: bool = attrs.field(default=True, validator=_bool)
    # timing
    request_timeout_ms: int = attrs.field(default=30_000, validator=_int(1))
    default_api_timeout_ms: int = attrs.field(default=60_000, validator=_int(0))
    retry_backoff_ms: int = attrs.field(default=100, validator=_int(0))
    # a failure that repeats backs off exponentially up to this (Kafka's retry.backoff.max.ms)
    retry_backoff_max_ms: int = attrs.field(default=1000, validator=_int(0))
    reconnect_backoff_ms: int = attrs.field(default=50, validator=_int(0))
    reconnect_backoff_max_ms: int = attrs.field(default=30_000, validator=_int(0))
    socket_connection_setup_timeout_ms: int = attrs.field(default=10_000, validator=_int(1))
    # no answer to the TLS ClientHello within this: the listener is taken for a plaintext one (raised
    # at once, not after request_timeout_ms); raise it only for a broker that is that slow to answer
    tls_silence_timeout_ms: int = attrs.field(default=1500, validator=_int(1))
    metadata_max_age_ms: int = attrs.field(default=300_000, validator=_int(0))
    connections_max_idle_ms: int = attrs.field(default=540_000, validator=_int(0))
    close_timeout_ms: int = attrs.field(default=30_000, validator=_int(0))
    consumer_timeout_ms: float = attrs.field(default=math.inf)
    max_in_flight_requests_per_connection: int = attrs.field(default=5, validator=_int(1))
    # kafka-python: a broker release tuple caps request versions; None infers the release (reported by
    # consumer.config["api_version"] once known: the constructor waits bootstrap_timeout_ms for it)
    api_version: tuple[int, ...] | None = attrs.field(default=None, converter=_api_version)
    # kafka-python 3.0: no broker answered within this of the start -> KafkaTimeoutError naming the servers,
    # from the constructor when it infers api_version, else from poll() and blocking calls; None: never
    bootstrap_timeout_ms: int | None = attrs.field(default=30_000, validator=_int(0, none=True))
    # sockets
    receive_buffer_max: int = attrs.field(default=100 * 1024 * 1024, validator=_int(1024))
    send_buffer_bytes: int | None = attrs.field(default=None, validator=_int(1, none=True))
    receive_buffer_bytes: int | None = attrs.field(default=None, validator=_int(1, none=True))
    sock_chunk_bytes: int = attrs.field(default=262_144, validator=_int(512))  # bytes read per recv()
    # security
    security_protocol: str = attrs.field(
        default="PLAINTEXT", validator=_choice("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    )
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, repr=False)
    ssl_check_hostname: bool = attrs.field(default=True, validator=_bool)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = attrs.field(default=None, repr=False)
    sasl_mechanism: str | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(_choice("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")),
    )
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = attrs.field(default=None, repr=False)
    # OAUTHBEARER: kafka-python's AbstractTokenProvider shape, token() and optionally extensions()
    sasl_oauth_token_provider: Any = attrs.field(default=None, repr=False)
    # a history of this consumer as JSON lines, appended to this file (docs/histories.md); a line per
    # partition per poll: for test runs and incidents
    history_path: str | None = None

    def __attrs_post_init__(self) -> None:
        _cross_checks(self)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(a.name for a in attrs.fields(cls) if not a.name.startswith("_"))

    @classmethod
    def from_kwargs(cls, **kw: Any) -> ConsumerConfig:
        known = set(cls.keys())
        clean: dict[str, Any] = {}
        for key, value in kw.items():
            key = ALIASES.get(key, key)
            if key in IGNORED_KEYS:
                continue
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known | set(ALIASES)), n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise _config_error(f"unknown config key {key!r}{hint}", key=key)
            clean[key] = value
        clean["_bootstrap_servers_given"] = kw.get("bootstrap_servers", _KAFKA_PYTHON_SERVERS)
        _protocol_checks(clean)
        return cls(**clean)

    def get(self, key: str, default: Any = None) -> Any:
        """Mapping-style access (the transport and specs read durations by key)."""
        return getattr(self, key, default)

    def __getitem__(self, key: str) -> Any:
        """``config["key"]``, as kafka-python's ``consumer.config`` dict; KeyError for unknown keys.
        ``bootstrap_servers`` is the value as given (a string stays a string), not the parsed tuple."""
        if key == "bootstrap_servers" and self._bootstrap_servers_given is not None:
            return self._bootstrap_servers_given
        if key not in self:
            raise KeyError(key)
        return getattr(self, ALIASES.get(key, key))

    def __contains__(self, key: object) -> bool:
        return (
            isinstance(key, str) and not key.startswith("_") and ALIASES.get(key, key) in attrs.fields_dict(type(self))
        )

    def replace(self, **changes: Any) -> ConsumerConfig:
        if "bootstrap_servers" in changes:
            changes["_bootstrap_servers_given"] = changes["bootstrap_servers"]
        return attrs.evolve(self, **changes)

    def as_mapping(self) -> Mapping[str, Any]:
        return attrs.asdict(self, recurse=False)
