"""KafkaTransport: non-blocking sockets to the brokers, one ``connection`` machine per node."""

from __future__ import annotations

import heapq
import itertools
import random
import selectors
import ssl
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs
from kafka.errors import KafkaConfigurationError, UnrecognizedBrokerVersion
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.broker_version_data import BrokerVersionData

from ..spec import Clock, MonotonicClock
from ._base import Pending, Transport
from ._connection import _HANDSHAKE_STATES, Connection, clone_error
from ._errors import AuthenticationError, ConnectionLost, NodeNotReady, RequestTimedOut
from ._framing import DEFAULT_RECEIVE_BUFFER_MAX
from ._sasl import OAuthBearerMechanism, PlainMechanism, SaslMechanism, ScramMechanism
from ._tls import build_ssl_context
from ._waker import Waker

__all__ = ["KafkaSettings", "KafkaTransport"]

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
    if not isinstance(parts, (tuple, list)) or not parts or not all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in parts):
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
                ssl_context=get("ssl_context"), ssl_cafile=get("ssl_cafile"), ssl_certfile=get("ssl_certfile"),
                ssl_keyfile=get("ssl_keyfile"), ssl_password=get("ssl_password"),
                ssl_check_hostname=bool(get("ssl_check_hostname", True)))
        return cls(
            bootstrap_servers=parse_servers(get("bootstrap_servers", "localhost:9092")),
            client_id=str(get("client_id", "fsm-consumer")),
            request_timeout_ms=get("request_timeout_ms", 30_000),
            socket_connection_setup_timeout_ms=get("socket_connection_setup_timeout_ms", 10_000),
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


class KafkaTransport(Transport):
    """The real transport: a selector over one non-blocking socket per broker node.

    Bootstrap servers are nodes -1, -2, ... until ``update_brokers`` names the cluster's
    brokers; from then on requests without a node go to the brokers, and the bootstrap
    connections are closed as soon as they are idle.

    A request waits for its node's connection (connecting, backing off, reconnecting) until its
    deadline, then fails with RequestTimedOut; an authentication failure fails the waiting
    requests at once. A request that times out in flight also recycles its connection.

    ``broker_release`` is the Kafka release the last handshake's ApiVersions answer looks like,
    e.g. (3, 9), or None before any; a plain attribute, so any thread may read it.
    """

    def __init__(self, config: Any = None, *, clock: Clock | None = None,
                 rng: random.Random | None = None) -> None:
        self.settings = KafkaSettings.from_config(config)
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self._rng = rng if rng is not None else random.Random()
        self._selector = selectors.DefaultSelector()
        self._waker = Waker()
        self._selector.register(self._waker, selectors.EVENT_READ, None)
        self._read_buffer = memoryview(bytearray(self.settings.sock_chunk_bytes))
        self.broker_release: tuple[int, ...] | None = None
        self._conns: dict[int, Connection] = {}
        self._addresses: dict[int, tuple[str, int]] = {}
        self._bootstrap_ids: list[int] = []
        for index, address in enumerate(self.settings.bootstrap_servers):
            self._addresses[-(index + 1)] = address
            self._bootstrap_ids.append(-(index + 1))
        self._broker_ids: list[int] = []
        self._unassigned: deque[Pending] = deque()
        self._deadlines: list[tuple[float, int, Pending]] = []
        self._seq = itertools.count()
        self._outstanding = 0
        self._completed: list[Pending] = []
        self._rotation = 0
        self._owner: int | None = None
        self._owner_name = ""
        self._closed = False

    # -- the interface ------------------------------------------------------------------------
    def send(self, request: ApiMessage, node: int | None = None, *, timeout_ms: float | None = None,
             tag: Any = None, min_version: int = 0, max_version: int | None = None) -> Pending:
        self._check_thread("send")
        if not isinstance(request, ApiMessage) or not request.is_request():
            raise TypeError(f"not a kafka-python request: {request!r}")
        now = self.clock.now_ms()
        timeout = self.settings.request_timeout_ms if timeout_ms is None else timeout_ms
        pending = Pending(request, node, now + timeout, tag, min_version, max_version)
        self._outstanding += 1
        if self._closed:
            self._fail(pending, ConnectionLost("the transport is closed", node_id=node))
            return pending
        if node is not None and node not in self._addresses:
            self._fail(pending, NodeNotReady(
                f"unknown node {node}: neither a bootstrap server nor a broker from update_brokers",
                node_id=node))
            return pending
        heapq.heappush(self._deadlines, (pending.deadline_ms, next(self._seq), pending))
        if node is None:
            self._unassigned.append(pending)
            self._assign_unassigned()  # to a ready node, or start connecting one now
        else:
            self._connection(node).submit(pending)
        return pending

    def poll(self, timeout_ms: float) -> list[Pending]:
        self._check_thread("poll")
        if self._closed:
            return self._take_completed()
        now = self.clock.now_ms()
        self._service(now)
        wait = max(0.0, timeout_ms)
        if self._completed:
            wait = 0.0
        else:
            deadline = self.next_wakeup_ms()
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - now))
        for key, mask in self._selector.select(wait / 1000.0):
            conn = key.data
            if conn is None:
                self._waker.drain()
            elif key.fileobj is conn.sock:  # not closed by an earlier event of this batch
                conn.on_io(mask)
        self._service(self.clock.now_ms())
        return self._take_completed()

    def wakeup(self) -> None:
        self._waker.wake()

    def update_brokers(self, brokers: Mapping[int, tuple[str, int]]) -> None:
        if self._owner is not None:
            self._check_thread("update_brokers")
        fresh = {int(node): (str(host), int(port)) for node, (host, port) in brokers.items()}
        if any(node < 0 for node in fresh):  # negative ids are the bootstrap servers'
            raise ValueError(f"broker node ids are >= 0, got {sorted(fresh)}")
        for node, address in fresh.items():
            old = self._addresses.get(node)
            if old is not None and old != address and node in self._conns:
                self._conns[node].relocate(*address)
            self._addresses[node] = address
        for node in [n for n in self._broker_ids if n not in fresh]:
            conn = self._conns.pop(node, None)
            if conn is not None:
                conn.close(f"node {node} is no longer in the cluster metadata")
            del self._addresses[node]
        self._broker_ids = sorted(fresh)
        self._retire_bootstrap()

    def ready(self, node: int) -> bool:
        conn = self._conns.get(node)
        return conn is not None and conn.state == "ready"

    def least_loaded_node(self) -> int | None:
        candidates = self._broker_ids or self._bootstrap_ids
        if not candidates:
            return None
        # Start at a rotating offset so that ties do not always land on the same node.
        self._rotation = (self._rotation + 1) % len(candidates)
        best, best_load, connecting, idle = None, None, None, None
        for node in candidates[self._rotation:] + candidates[:self._rotation]:
            conn = self._conns.get(node)
            state = conn.state if conn is not None else "disconnected"
            if state == "ready":
                load = conn.outstanding  # type: ignore[union-attr]
                if best_load is None or load < best_load:
                    best, best_load = node, load
            elif state in _HANDSHAKE_STATES:
                connecting = node if connecting is None else connecting
            elif state == "disconnected":
                idle = node if idle is None else idle
        for node in (best, connecting, idle):
            if node is not None:
                return node
        return None

    def disconnect(self, node: int) -> None:
        conn = self._conns.get(node)
        if conn is not None:
            conn.disconnect()

    def next_wakeup_ms(self) -> float | None:
        earliest = None
        for conn in self._conns.values():
            d = conn.machine.next_deadline
            if d is not None and (earliest is None or d < earliest):
                earliest = d
        heap = self._deadlines
        while heap and heap[0][2].done:
            heapq.heappop(heap)
        if heap and (earliest is None or heap[0][0] < earliest):
            earliest = heap[0][0]
        return earliest

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in list(self._conns.values()):
            conn.close()
        unassigned, self._unassigned = self._unassigned, deque()
        for pending in unassigned:
            self._fail(pending, ConnectionLost("the transport is closed"))
        self._selector.close()
        self._waker.close()

    # -- extras ---------------------------------------------------------------------------------
    @property
    def io_thread(self) -> int | None:
        """Ident of the thread that drives this transport (first to call send or poll)."""
        return self._owner

    @property
    def closed(self) -> bool:
        return self._closed

    def connection_state(self, node: int) -> str | None:
        conn = self._conns.get(node)
        return conn.state if conn is not None else None

    def connection(self, node: int) -> Connection | None:
        """The connection to ``node`` if one was made (tests and diagnostics)."""
        return self._conns.get(node)

    def __repr__(self) -> str:
        states = ", ".join(f"{n}:{c.state}" for n, c in sorted(self._conns.items()))
        return f"<KafkaTransport {self.settings.security_protocol} [{states}]{' closed' if self._closed else ''}>"

    # -- internals ------------------------------------------------------------------------------
    def _check_thread(self, call: str) -> None:
        me = threading.get_ident()
        if self._owner is None:
            self._owner, self._owner_name = me, threading.current_thread().name
        elif me != self._owner:
            raise RuntimeError(f"KafkaTransport.{call}() called from thread {threading.current_thread().name!r}; "
                               f"only its I/O thread {self._owner_name!r} may call it")

    def _connection(self, node: int) -> Connection:
        conn = self._conns.get(node)
        if conn is None:
            host, port = self._addresses[node]
            conn = Connection(node, host, port, settings=self.settings, clock=self.clock,
                              selector=self._selector, read_buffer=self._read_buffer, rng=self._rng,
                              complete=self._completed_one, versions_known=self._versions_known)
            self._conns[node] = conn
        return conn

    def _versions_known(self, release: tuple[int, ...]) -> None:
        self.broker_release = release  # one assignment: readers on other threads see old or new

    def _completed_one(self, pending: Pending) -> None:
        self._outstanding -= 1
        self._completed.append(pending)

    def _fail(self, pending: Pending, error: Exception) -> None:
        if not pending.done:
            pending.error = error
            pending.done = True
            self._completed_one(pending)

    def _take_completed(self) -> list[Pending]:
        done, self._completed = self._completed, []
        return done

    def _service(self, now: float) -> None:
        """Timers, request deadlines, connecting where requests wait, and writing."""
        for conn in list(self._conns.values()):
            conn.machine.tick(now)
        self._expire(now)
        self._assign_unassigned()
        for conn in list(self._conns.values()):
            conn.maybe_reconnect()
            if conn.has_output:
                conn.flush()
        if self._broker_ids:
            self._retire_bootstrap()

    def _expire(self, now: float) -> None:
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, _, pending = heapq.heappop(heap)
            if pending.done:
                continue
            conn = self._conns.get(pending.sent_to) if pending.sent_to is not None else None
            if conn is not None:
                conn.request_timed_out(pending)
            else:
                where = f"node {pending.node}" if pending.node is not None else "any node"
                state = self.connection_state(pending.node) if pending.node is not None else None
                self._fail(pending, RequestTimedOut(
                    f"{type(pending.request).__name__} timed out waiting for a connection to {where}"
                    + (f" (connection {state})" if state else ""), node_id=pending.node))
        # Completed requests leave their heap entries behind; drop them when they pile up.
        if len(heap) > 1024 and len(heap) > 4 * self._outstanding:
            self._deadlines = [entry for entry in heap if not entry[2].done]
            heapq.heapify(self._deadlines)

    def _assign_unassigned(self) -> None:
        waiting = deque(p for p in self._unassigned if not p.done)
        self._unassigned = waiting
        while waiting:
            node = self.least_loaded_node()
            if node is None or not self.ready(node):
                break
            self._conns[node].submit(waiting.popleft())
        if not waiting:
            return
        node = self.least_loaded_node()
        if node is not None:
            self._connection(node).connect()
            return
        # Every candidate is backing off; if all failed authentication, waiting cannot help.
        candidates = self._broker_ids or self._bootstrap_ids
        errors = [c.auth_error for n in candidates if (c := self._conns.get(n)) is not None]
        if errors and len(errors) == len(candidates) and all(isinstance(e, AuthenticationError) for e in errors):
            for pending in waiting:
                self._fail(pending, clone_error(errors[0]))
            waiting.clear()

    def _retire_bootstrap(self) -> None:
        """Once the brokers are known, close bootstrap connections that have nothing to do."""
        if not self._broker_ids:
            return
        for node in self._bootstrap_ids:
            conn = self._conns.get(node)
            if conn is not None and conn.idle:
                conn.close("bootstrap connection retired: the brokers are known")
                del self._conns[node]
