"""KafkaSettings: what the transport and its connections read from the client's config.

Its own module so that ``_connection`` (which reads the settings) and ``_kafka`` (which builds
them) both import it without importing each other.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs
from kafka.errors import KafkaConfigurationError, UnrecognizedBrokerVersion
from kafka.protocol.api_key import ApiKey
from kafka.protocol.broker_version_data import BrokerVersionData

from ._framing import DEFAULT_RECEIVE_BUFFER_MAX
from ._sasl import OAuthBearerMechanism, PlainMechanism, SaslMechanism, ScramMechanism
from ._tls import build_ssl_context

__all__ = ["KafkaSettings", "parse_api_version", "parse_servers"]

_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_READ_CHUNK = 256 * 1024  # default sock_chunk_bytes: one recv_into buffer for the whole transport
_MISSING = object()


def _lookup(config: Any, key: str) -> Any:
    """``key`` from a mapping (kafka-python or dotted Java name) or an object's attribute."""
    if config is None:
        return None
    if isinstance(config, Mapping):
        if key in config:
            return config[key]
        return config.get(key.replace("_", "."))
    value = getattr(config, key, _MISSING)
    return None if value is _MISSING else value


def parse_servers(value: str | Iterable[str]) -> tuple[tuple[str, int], ...]:
    """``"h1:9092,h2"`` or a list of them -> ((host, port), ...); ``[::1]:9092`` for IPv6."""
    items = value.split(",") if isinstance(value, str) else list(value)
    servers = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):  # [v6-address]:port
            host, _, rest = item[1:].partition("]")
            port = rest.lstrip(":") or "9092"
        elif item.count(":") == 1:
            host, port = item.split(":")
        else:
            host, port = item, "9092"
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap server {item!r}: bad port")
        servers.append((host, int(port)))
    if not servers:
        raise ValueError("bootstrap_servers names no server")
    return tuple(servers)


def parse_api_version(value: Any) -> tuple[int, ...] | None:
    """kafka-python's ``api_version``: None or "auto" (infer), a tuple/list or "3.9" -> (3, 9)."""
    if value is None or value == "auto":
        return None
    parts = value.split(".") if isinstance(value, str) else value
    if isinstance(value, str) and all(p.isdigit() for p in parts):
        parts = [int(p) for p in parts]
    if (
        not isinstance(parts, (tuple, list))
        or not parts
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in parts)
    ):
        raise ValueError(f"api_version {value!r} is not None or a broker release such as (3, 9)")
    return tuple(parts)


def _release_table(release: tuple[int, ...] | None) -> Mapping[int, tuple[int, int]] | None:
    """The API versions broker ``release`` supports (kafka-python's data), None for no cap."""
    if release is None:
        return None
    try:
        table = BrokerVersionData(broker_version=release).api_versions
    except (KafkaConfigurationError, UnrecognizedBrokerVersion):
        table = {}
    if ApiKey.ApiVersions not in table:  # releases before 0.10 cannot answer the handshake
        raise ValueError(f"api_version {release!r}: not a broker release from (0, 10) on")
    return MappingProxyType(table)  # kafka-python's module-level dict: never to be changed through us


@attrs.frozen(kw_only=True)
class KafkaSettings:
    """What KafkaTransport reads from its config (kafka-python key names and defaults).

    The machine reads its durations from this object too, by the same key names.
    """

    bootstrap_servers: tuple[tuple[str, int], ...]
    client_id: str = "fsm-consumer"
    request_timeout_ms: float = 30_000
    socket_connection_setup_timeout_ms: float = 10_000
    tls_silence_timeout_ms: float = 1500
    reconnect_backoff_ms: float = 50
    reconnect_backoff_max_ms: float = 1000
    receive_buffer_max: int = DEFAULT_RECEIVE_BUFFER_MAX
    send_buffer_bytes: int | None = None
    receive_buffer_bytes: int | None = None
    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, repr=False)
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = attrs.field(default=None, repr=False)
    sasl_oauth_token_provider: Any = attrs.field(default=None, repr=False)
    api_version: tuple[int, ...] | None = attrs.field(default=None, converter=parse_api_version)
    # the cap every connection applies to its broker's ApiVersions answer (None: no cap)
    api_version_table: Mapping[int, tuple[int, int]] | None = attrs.field(init=False, repr=False)
    sock_chunk_bytes: int = _READ_CHUNK

    @api_version_table.default
    def _api_version_table(self) -> Mapping[int, tuple[int, int]] | None:
        return _release_table(self.api_version)

    @classmethod
    def from_config(cls, config: Any) -> KafkaSettings:
        def get(key: str, default: Any = None) -> Any:
            value = _lookup(config, key)
            return default if value is None else value

        protocol = str(get("security_protocol", "PLAINTEXT")).upper()
        if protocol not in _SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol {protocol!r} is not one of {', '.join(_SECURITY_PROTOCOLS)}")
        mechanism = get("sasl_mechanism")
        if protocol.startswith("SASL"):
            if mechanism not in _SASL_MECHANISMS:
                raise ValueError(f"sasl_mechanism {mechanism!r} is not one of {', '.join(_SASL_MECHANISMS)}")
            if mechanism == "OAUTHBEARER":
                if not callable(getattr(get("sasl_oauth_token_provider"), "token", None)):
                    raise ValueError("sasl_mechanism OAUTHBEARER needs a sasl_oauth_token_provider with token()")
            elif get("sasl_plain_username") is None or get("sasl_plain_password") is None:
                raise ValueError(f"sasl_mechanism {mechanism} needs sasl_plain_username and sasl_plain_password")
        chunk = get("sock_chunk_bytes", _READ_CHUNK)
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"sock_chunk_bytes {chunk!r} is not a positive integer")
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = build_ssl_context(
                ssl_context=get("ssl_context"),
                ssl_cafile=get("ssl_cafile"),
                ssl_certfile=get("ssl_certfile"),
                ssl_keyfile=get("ssl_keyfile"),
                ssl_password=get("ssl_password"),
                ssl_check_hostname=bool(get("ssl_check_hostname", True)),
            )
        return cls(
            bootstrap_servers=parse_servers(get("bootstrap_servers", "localhost:9092")),
            client_id=str(get("client_id", "fsm-consumer")),
            request_timeout_ms=get("request_timeout_ms", 30_000),
            socket_connection_setup_timeout_ms=get("socket_connection_setup_timeout_ms", 10_000),
            tls_silence_timeout_ms=get("tls_silence_timeout_ms", 1500),
            reconnect_backoff_ms=get("reconnect_backoff_ms", 50),
            reconnect_backoff_max_ms=get("reconnect_backoff_max_ms", 1000),
            receive_buffer_max=int(get("receive_buffer_max", DEFAULT_RECEIVE_BUFFER_MAX)),
            send_buffer_bytes=get("send_buffer_bytes"),
            receive_buffer_bytes=get("receive_buffer_bytes"),
            security_protocol=protocol,
            ssl_context=context,
            sasl_mechanism=mechanism if protocol.startswith("SASL") else None,
            sasl_plain_username=get("sasl_plain_username"),
            sasl_plain_password=get("sasl_plain_password"),
            sasl_oauth_token_provider=get("sasl_oauth_token_provider"),
            api_version=get("api_version"),
            sock_chunk_bytes=chunk,
        )

    def new_sasl_mechanism(self) -> SaslMechanism:
        """A fresh exchange per connection attempt (mechanisms drop the password once used)."""
        if self.sasl_mechanism == "OAUTHBEARER":
            return OAuthBearerMechanism(self.sasl_oauth_token_provider)
        assert self.sasl_plain_username is not None and self.sasl_plain_password is not None
        if self.sasl_mechanism == "PLAIN":
            return PlainMechanism(self.sasl_plain_username, self.sasl_plain_password)
        return ScramMechanism(self.sasl_plain_username, self.sasl_plain_password, str(self.sasl_mechanism))
