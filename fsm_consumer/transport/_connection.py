"""One broker connection: the model that ``specs/connection.yaml`` drives.

The machine decides *when* (connect, handshake steps, backoff, deadlines); this class does the
socket work in the hooks the spec names and turns I/O outcomes into the spec's triggers. All of
it runs on the transport's thread; nothing here blocks (DNS resolution aside, as in Kafka's own
clients).
"""

from __future__ import annotations

import copy
import errno
import logging
import os
import selectors
import socket
import ssl
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from kafka.errors import for_code
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from .._version import __version__
from ..machines import Clock, SpecMachine, shipped_spec
from ._backoff import ReconnectBackoff
from ._base import Pending
from ._codec import Decoded, RequestCodec
from ._errors import AuthenticationError, ConnectionLost, RequestTimedOut, TransportError, UnsupportedVersion
from ._framing import FrameReader
from ._health import NodeHealth
from ._sasl import SaslMechanism
from ._settings import KafkaSettings
from ._tls import SslHandshakeError, handshake_failure, handshake_step, silent_listener
from ._versions import ApiVersionTable

if TYPE_CHECKING:
    import random

__all__ = ["Connection", "clone_error"]

logger = logging.getLogger("fsm_consumer.transport")

_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
_CONNECT_IN_PROGRESS = {errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY, errno.EAGAIN}
# Plain sockets: bytes per send() call; bigger gains nothing once the kernel buffer is full.
_PLAIN_WRITE_CHUNK = 1 << 20
# TLS: one record per SSL_write, retried with the same bytes after WANT_WRITE as OpenSSL requires.
_TLS_WRITE_CHUNK = 16 * 1024
# Bytes read from one plain socket per poll before the others get their turn (the selector is
# level-triggered, so the rest is read next poll). TLS sockets are drained fully: bytes OpenSSL
# has buffered do not make the descriptor readable again.
_READ_BUDGET = 8 << 20
_DIRECT_READ_MIN = 64 << 10  # below this a frame's rest is read through the shared buffer
_HANDSHAKE_STATES = frozenset({"connecting", "tls_hello", "tls_handshake", "api_versions", "authenticating"})
_TLS_STATES = frozenset({"tls_hello", "tls_handshake"})
# ApiVersions v3+ must name the client (KIP-511); brokers reject empty names.
_SOFTWARE_NAME = "fsm-consumer"
_ILLEGAL_SASL_STATE = 34  # IllegalSaslStateError.errno

_Handler = Callable[[ApiMessage], None]
# What a handshake_timed_out interrupted, for its message.
_HANDSHAKE_STEPS = {
    "tls_handshake": "the TLS handshake",
    "api_versions": "the ApiVersions handshake",
    "authenticating": "SASL authentication",
}


def clone_error(exc: Exception) -> Exception:
    """A copy of ``exc`` (its cause kept) for one request: raising one shared instance in
    several places would chain unrelated tracebacks onto it."""
    error = copy.copy(exc)
    error.__cause__ = exc.__cause__
    return error


class Connection:
    """A connection to one node; ``machine`` is its ``connection`` SpecMachine."""

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        *,
        settings: KafkaSettings,
        clock: Clock,
        selector: selectors.BaseSelector,
        read_buffer: memoryview,
        rng: random.Random,
        complete: Callable[[Pending], None],
        versions_known: Callable[[tuple[int, ...]], None] | None = None,
        auth_verdict: Callable[[int, AuthenticationError | None], None] | None = None,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self._settings = settings
        self._clock = clock
        self._selector = selector
        self._read_buffer = read_buffer  # shared by the transport's connections: reads never overlap
        self._complete = complete
        self._versions_known = versions_known  # told the broker's release after each handshake
        self._auth_verdict = auth_verdict  # told each authentication failure, and None once ready
        self.sock: socket.socket | None = None
        self._events = 0  # selector interest currently registered for sock
        self._out: deque[memoryview] = deque()
        self._reader = FrameReader(settings.receive_buffer_max, node_id=node_id)
        self._codec = RequestCodec(node_id=node_id)
        self.queued: deque[Pending] = deque()  # waiting for the connection to get ready
        self._in_flight: deque[Pending | _Handler] = deque()  # same order as the codec's
        self.versions: ApiVersionTable | None = None  # capped by config api_version
        self._api_versions_version = self._first_api_versions_version()
        self._sasl: SaslMechanism | None = None
        self._attempt = 0
        self._cause: TransportError | None = None  # why the next backoff/closed entry happens
        self.auth_error: AuthenticationError | None = None  # set while backing off after one
        self._auth_failed = False  # the next backoff is the maximum
        self._closing = False
        self._not_a_failure = False  # the next backoff follows a deliberate or idle close
        self._io_failure: tuple[TransportError, bool] | None = None  # for note_io_failure: (cause, deliberate)
        self._tls_heard = False  # the peer sent something during this TLS handshake
        self.health = NodeHealth()
        self.machine = SpecMachine(
            shipped_spec("connection"), self, clock=clock, config=settings, instance=f"node {node_id}"
        )
        self._backoff = ReconnectBackoff(
            self.machine.durations["reconnect_backoff"], settings.reconnect_backoff_max_ms, rng
        )

    # -- queries -----------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self.machine.state

    @property
    def outstanding(self) -> int:
        """Requests sent and not answered, plus live ones waiting to be sent."""
        return len(self._in_flight) + sum(1 for p in self.queued if not p.done)

    @property
    def idle(self) -> bool:
        return self.outstanding == 0

    @property
    def has_output(self) -> bool:
        return bool(self._out)

    @property
    def where(self) -> str:
        return f"node {self.node_id} ({self.host}:{self.port})"

    def __repr__(self) -> str:
        return (
            f"<Connection node={self.node_id} {self.host}:{self.port} {self.state} "
            f"in_flight={len(self._in_flight)} queued={len(self.queued)}>"
        )

    # -- driven by the transport -------------------------------------------------------------
    def submit(self, pending: Pending) -> None:
        """Send now if ready; otherwise queue it and connect if nobody is connecting yet."""
        state = self.state
        if state == "ready":
            self._transmit(pending)
        elif state == "closed":
            self._fail(pending, ConnectionLost("the transport is closed", node_id=self.node_id))
        elif state == "backoff" and self.auth_error is not None:
            # Retrying before the backoff ends cannot help: say why at once (as Java does).
            self._fail(pending, self.auth_error)
        else:
            self.queued.append(pending)
            if state == "disconnected":
                self.machine.fire("connect")

    def connect(self) -> None:
        if self.state == "disconnected":
            self.machine.fire("connect")

    def maybe_reconnect(self) -> None:
        """After a backoff: reconnect if requests are still waiting for this node."""
        if self.queued and any(p.done for p in self.queued):  # timed out while waiting: forget them
            self.queued = deque(p for p in self.queued if not p.done)
        if self.state == "disconnected" and self.queued:
            self.machine.fire("connect")

    def on_io(self, mask: int) -> None:
        """The selector reported ``mask`` for this connection's socket."""
        state = self.state
        if state == "connecting":
            self._finish_connect()
        elif state in _TLS_STATES:
            # Evidence that the peer answered the ClientHello. Bytes that arrive while the first
            # do_handshake() is still running are read unseen; only a loopback peer is that fast.
            if mask & _READ:
                self._tls_heard = True
                if state == "tls_hello":
                    self.machine.fire("tls_heard")
            self._advance_tls()
        else:
            if mask & _READ:
                self._read()
            if mask & _WRITE and self.sock is not None:
                self.flush()

    def flush(self) -> None:
        """Write what the socket accepts of the output buffer; the rest waits for writability."""
        sock = self.sock
        if sock is None or not self._out or self.state in ("connecting", "tls_hello", "tls_handshake"):
            return
        chunk = _TLS_WRITE_CHUNK if isinstance(sock, ssl.SSLSocket) else _PLAIN_WRITE_CHUNK
        out = self._out
        while out:
            head = out[0]
            try:
                sent = sock.send(head[:chunk])
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                break
            except OSError as exc:
                self._io_failed(ConnectionLost(f"write to {self.host}:{self.port} failed: {exc}"))
                return
            if sent >= len(head):
                out.popleft()
            else:
                out[0] = head[sent:]
        self._set_interest(_READ | (_WRITE if out else 0))

    def request_timed_out(self, pending: Pending) -> None:
        """``pending`` was sent here and its deadline passed: fail it and recycle the connection,
        whose later responses can no longer be trusted to arrive (as Java's NetworkClient)."""
        name = type(pending.request).__name__
        self._fail(pending, RequestTimedOut(f"{name} got no response by its deadline", node_id=self.node_id))
        self._io_failed(ConnectionLost(f"connection recycled after {name} timed out"))

    def disconnect(self, reason: str = "disconnected by the client") -> None:
        """Drop the socket on purpose: no warning, not counted as a failure. Where there is no
        socket (disconnected, backoff, closed) the spec ignores it."""
        self._io_failed(ConnectionLost(reason), deliberate=True)

    def relocate(self, host: str, port: int) -> None:
        """The node now lives at another address: drop the old socket, queued requests follow."""
        self.disconnect(f"node {self.node_id} moved to {host}:{port}")
        self.host, self.port = host, port

    def close(self, reason: str = "the transport is closed") -> None:
        """Enter ``closed``: everything outstanding, queued included, fails with ConnectionLost."""
        if self.machine.is_terminal:
            return
        self._closing = True
        self._cause = ConnectionLost(reason, node_id=self.node_id)
        self.machine.fire("close")

    # -- spec hooks: conditions ---------------------------------------------------------------
    def uses_tls(self) -> bool:
        return self._settings.security_protocol in ("SSL", "SASL_SSL")

    def uses_sasl(self) -> bool:
        return self._settings.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    # -- spec hooks: actions ------------------------------------------------------------------
    def start_connect(self) -> None:
        self.auth_error = None  # a new attempt: the old verdict no longer applies
        self._reader = FrameReader(self._settings.receive_buffer_max, node_id=self.node_id)
        self._codec = RequestCodec(node_id=self.node_id)
        self._api_versions_version = self._first_api_versions_version()
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            self._io_failed(ConnectionLost(f"cannot resolve {self.host}:{self.port}: {exc}"))
            return
        # Several addresses (IPv4 and IPv6, round-robin DNS): try the next one on each attempt.
        family, kind, proto, _, address = infos[self._attempt % len(infos)]
        self._attempt += 1
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            self._io_failed(ConnectionLost(f"cannot create a socket: {exc}"))
            return
        self.sock = sock
        sock.setblocking(False)
        try:
            if family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # requests are whole frames
            if self._settings.send_buffer_bytes:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._settings.send_buffer_bytes)
            if self._settings.receive_buffer_bytes:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._settings.receive_buffer_bytes)
            err = sock.connect_ex(address)
        except OSError as exc:
            err = exc.errno or errno.EIO
        if err == 0:
            self._set_interest(_READ)
            self.machine.fire("connected")
        elif err in _CONNECT_IN_PROGRESS:
            self._set_interest(_WRITE)
        else:
            self._io_failed(ConnectionLost(f"connect to {self.host}:{self.port} failed: {os.strerror(err)}"))

    def start_tls(self) -> None:
        raw = self.sock
        assert raw is not None and self._settings.ssl_context is not None
        self._set_interest(0)  # the wrapped socket is registered anew
        self._tls_heard = False
        try:
            self.sock = self._settings.ssl_context.wrap_socket(
                raw, server_hostname=self.host, do_handshake_on_connect=False
            )
        except (ssl.SSLError, ValueError) as exc:
            self.sock = raw
            error = SslHandshakeError(
                f"cannot start TLS with {self.host}:{self.port}: {exc}: check the ssl_* settings or the ssl_context",
                node_id=self.node_id,
            )
            error.__cause__ = exc
            self._tls_failed(error)
            return
        except OSError as exc:
            self.sock = raw
            self._io_failed(ConnectionLost(f"cannot start TLS: {exc}"))
            return
        self._advance_tls()

    def send_api_versions(self) -> None:
        version = self._api_versions_version
        if version >= 3:
            request = ApiVersionsRequest(
                version=version, client_software_name=_SOFTWARE_NAME, client_software_version=__version__
            )
        else:
            request = ApiVersionsRequest(version=version)
        self._send_internal(request, self._on_api_versions)

    def start_sasl(self) -> None:
        self._sasl = self._settings.new_sasl_mechanism()
        assert self.versions is not None
        try:
            # v0 would mean raw SASL tokens without SaslAuthenticate framing: not spoken here.
            version = self.versions.pick_version(SaslHandshakeRequest, min_version=1)
        except UnsupportedVersion as exc:
            self._authentication_failed(
                AuthenticationError(
                    f"SASL is not available: {exc.args[0]}: the listener does not speak SASL: use "
                    f"security_protocol={self._without('sasl')!r} or the broker's SASL port"
                )
            )
            return
        self._send_internal(SaslHandshakeRequest(version=version, mechanism=self._sasl.name), self._on_sasl_handshake)

    def connection_ready(self) -> None:
        self._backoff.reset()
        self._attempt = 0
        recovered = self.health.ready(self.where)
        if recovered is not None:
            logger.info("%s", recovered)
        if self._auth_verdict is not None:
            self._auth_verdict(self.node_id, None)
        queued, self.queued = self.queued, deque()
        for pending in queued:
            if not pending.done:
                self._transmit(pending)
        self.flush()

    def note_authentication_failure(self) -> None:
        self._auth_failed = True

    def tls_silence_ms(self, configured: float) -> float:
        return min(configured, self.machine.durations["handshake_timeout"])

    def note_silent_listener(self) -> None:
        """Not a word back to the ClientHello: a plaintext listener waiting for the rest of what it
        took for a huge frame (Tansu does this). Reconnecting will not change that."""
        waited = self.tls_silence_ms(self.machine.durations["tls_silence"])
        error = silent_listener(
            peer=f"{self.host}:{self.port}", waited_ms=waited, plaintext=self._without("tls"), node_id=self.node_id
        )
        self.auth_error = self._cause = error
        self._auth_failed = True

    def note_io_failure(self) -> None:
        """The io_error edge is taken: its failure becomes the cause the backoff reports."""
        failure, self._io_failure = self._io_failure, None
        if failure is None:
            return
        self._cause, deliberate = failure
        if deliberate:
            self._not_a_failure = True  # the client's choice: no warning, not counted

    def close_socket(self) -> None:
        sock = self.sock
        self.sock = None
        self._out.clear()
        self.versions = None
        self._sasl = None
        if sock is None:
            return
        if self._events:
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError, OSError):
                pass
            self._events = 0
        try:
            sock.close()
        except OSError:
            pass

    def fail_in_flight(self) -> None:
        cause = self._cause or self._timed_out()
        self._cause = None
        if cause.node_id is None:
            cause.node_id = self.node_id
        self._report(cause)
        self._codec.drain()
        in_flight, self._in_flight = self._in_flight, deque()
        for entry in in_flight:
            if isinstance(entry, Pending):
                self._fail(entry, cause)
        # Queued requests wait for the reconnect (until their deadline), unless nothing will
        # reconnect or the failure is one that reconnecting cannot fix.
        if self._closing or isinstance(cause, AuthenticationError):
            queued, self.queued = self.queued, deque()
            for pending in queued:
                self._fail(pending, cause)

    def next_reconnect_backoff_ms(self, configured: float) -> float:
        if self._auth_failed:
            self._auth_failed = False
            return self._backoff.maximum()
        return self._backoff.next_ms()

    # -- I/O ------------------------------------------------------------------------------------
    def _set_interest(self, events: int) -> None:
        sock = self.sock
        if sock is None or events == self._events:
            return
        if not self._events:
            self._selector.register(sock, events, self)
        elif not events:
            self._selector.unregister(sock)
        else:
            self._selector.modify(sock, events, self)
        self._events = events

    def _finish_connect(self) -> None:
        assert self.sock is not None
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._io_failed(ConnectionLost(f"connect to {self.host}:{self.port} failed: {os.strerror(err)}"))
            return
        self._set_interest(_READ)
        self.machine.fire("connected")

    def _advance_tls(self) -> None:
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            step = handshake_step(
                self.sock, node_id=self.node_id, peer=f"{self.host}:{self.port}", plaintext=self._without("tls")
            )
        except SslHandshakeError as exc:
            self._tls_failed(exc)
            return
        except ConnectionLost as exc:
            self._io_failed(exc)
            return
        if step == "done":
            self._set_interest(_READ)
            self.machine.fire("tls_established")
        else:
            self._set_interest(_READ if step == "read" else _WRITE)

    def _read(self) -> None:
        sock = self.sock
        buf = self._read_buffer
        budget = None if isinstance(sock, ssl.SSLSocket) else _READ_BUDGET
        reader = self._reader
        while sock is not None and sock is self.sock:
            # the rest of a large frame (a Fetch response) goes straight into its body, not through buf
            room = reader.room()
            direct = room is not None and len(room) >= _DIRECT_READ_MIN
            try:
                n = sock.recv_into(room if direct else buf)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except ssl.SSLError as exc:
                if self.state == "api_versions" and not isinstance(exc, (ssl.SSLEOFError, ssl.SSLSyscallError)):
                    # TLS 1.3 finishes the client's handshake before the broker checks the client
                    # certificate: its refusal arrives as an alert on the first read.
                    error = handshake_failure(
                        exc, peer=f"{self.host}:{self.port}", plaintext=self._without("tls"), node_id=self.node_id
                    )
                    error.__cause__ = exc
                    self._tls_failed(error)
                else:
                    self._io_failed(ConnectionLost(f"read from {self.host}:{self.port} failed: {exc}"))
                return
            except OSError as exc:
                self._io_failed(ConnectionLost(f"read from {self.host}:{self.port} failed: {exc}"))
                return
            if n == 0:
                midway = " in the middle of a response" if self._reader.partial else ""
                # Brokers close idle connections (connections.max.idle.ms): the next request
                # reconnects, and only a failure to do so is worth reporting.
                self._not_a_failure = self.state == "ready" and not self._in_flight and not self.queued
                self._io_failed(ConnectionLost(f"{self.host}:{self.port} closed the connection{midway}"))
                return
            try:
                for frame in reader.received(n) if direct else reader.feed(buf[:n]):
                    self._dispatch(self._codec.decode(frame))
                    if sock is not self.sock:
                        return  # a response closed or replaced the connection
            except TransportError as exc:  # the stream is out of step: nothing more on it is trusted
                self._io_failed(exc)
                return
            if budget is not None:
                budget -= n
                if budget <= 0:
                    return

    def _dispatch(self, decoded: Decoded) -> None:
        entry = self._in_flight.popleft()
        if isinstance(entry, Pending):
            self._finish(entry, decoded.response)
        else:
            entry(decoded.response)

    def _transmit(self, pending: Pending) -> None:
        """Pick the version, encode, and buffer ``pending`` for writing (flushed by the caller)."""
        request = pending.request
        assert self.versions is not None
        low = max(pending.min_version, request._min_version or 0)
        highs = [v for v in (pending.max_version, request._max_version) if v is not None]
        high = min(highs) if highs else None
        if request.API_VERSION is not None:  # the caller fixed the version: only that one will do
            low = high = request.API_VERSION
        try:
            request.API_VERSION = self.versions.pick_version(type(request), min_version=low, max_version=high)
            if request.API_KEY == ApiKey.ApiVersions and request.API_VERSION >= 3 and not request.client_software_name:
                # the version is ours to pick, so is making it valid: v3+ must name the client (KIP-511)
                request.client_software_name, request.client_software_version = _SOFTWARE_NAME, __version__
            _, data = self._codec.encode(request, self._settings.client_id)
        except UnsupportedVersion as exc:
            self._fail(pending, exc)
            return
        except (TypeError, ValueError, AttributeError) as exc:  # a request kafka-python cannot encode
            self._fail(pending, exc)
            return
        pending.sent_to = self.node_id
        self._out.append(memoryview(data))
        if request.expect_response():
            self._in_flight.append(pending)
        else:
            self._finish(pending, None)

    def _send_internal(self, request: ApiMessage, handler: _Handler) -> None:
        _, data = self._codec.encode(request, self._settings.client_id)
        self._in_flight.append(handler)
        self._out.append(memoryview(data))
        self.flush()

    # -- handshake responses --------------------------------------------------------------------
    def _first_api_versions_version(self) -> int:
        # config api_version caps the handshake too: it is a request like any other
        cap = self._settings.api_version_table
        limit = cap.get(ApiKey.ApiVersions) if cap is not None else None
        return ApiVersionsRequest.max_version if limit is None else min(ApiVersionsRequest.max_version, limit[1])

    def _on_api_versions(self, response: ApiMessage) -> None:
        try:
            table = ApiVersionTable.from_response(response, node_id=self.node_id)
        except UnsupportedVersion as exc:
            retry = exc.retry_version
            if retry is not None and 0 <= retry < self._api_versions_version:
                # The broker answered in v0 with the versions it speaks; ask again in one of them.
                self._api_versions_version = retry
                self.send_api_versions()
            else:
                self._io_failed(exc)
            return
        except TransportError as exc:
            self._io_failed(exc)
            return
        if self._versions_known is not None:
            self._versions_known(table.broker_release)  # the broker's own release, before any cap
        cap = self._settings.api_version_table
        self.versions = table if cap is None else table.capped(cap)
        self.machine.fire("versions_known")

    def _on_sasl_handshake(self, response: ApiMessage) -> None:
        assert self._sasl is not None
        if response.error_code:
            listed = list(response.mechanisms or ())
            offered = ", ".join(listed) or "none"
            error = for_code(response.error_code).__name__
            name = self._sasl.name
            # The mechanism is not what the broker objects to if it lists it (Tansu without SASL) or if
            # the listener takes no SASL at all (Kafka's PLAINTEXT and SSL listeners: ILLEGAL_SASL_STATE,
            # listing nothing).
            if name in listed or (not listed and response.error_code == _ILLEGAL_SASL_STATE):
                although = f" although it lists {name}" if name in listed else ""
                message = (
                    f"the broker answered SaslHandshake for {name} with {error}{although}: "
                    f"check that SASL is enabled on this listener (security_protocol="
                    f"{self._without('sasl')!r} if it is not)"
                )
            else:
                message = (
                    f"the broker does not enable SASL mechanism {name} ({error}; it lists: {offered}): "
                    f"set sasl_mechanism to one it lists"
                )
            self._authentication_failed(AuthenticationError(message))
            return
        try:
            token = self._sasl.initial()
        except AuthenticationError as exc:
            self._sasl_failed(exc)
            return
        self._send_sasl_token(token)

    def _send_sasl_token(self, token: bytes) -> None:
        assert self.versions is not None
        try:
            version = self.versions.pick_version(SaslAuthenticateRequest)
        except UnsupportedVersion as exc:
            self._authentication_failed(AuthenticationError(f"SASL is not available: {exc}"))
            return
        self._send_internal(SaslAuthenticateRequest(version=version, auth_bytes=token), self._on_sasl_authenticate)

    def _on_sasl_authenticate(self, response: ApiMessage) -> None:
        assert self._sasl is not None
        if response.error_code:
            # The broker's message names the user at most; the password never travels back.
            detail = f": {response.error_message}" if response.error_message else ""
            failure = getattr(self._sasl, "failure", None)  # OAUTHBEARER: the server's error document
            detail += f" ({failure})" if failure is not None else ""
            self._sasl_failed(
                AuthenticationError(
                    f"SASL {self._sasl.name} authentication failed ({for_code(response.error_code).__name__}){detail}"
                )
            )
            return
        try:
            token = self._sasl.step(bytes(response.auth_bytes or b""))
        except AuthenticationError as exc:
            self._sasl_failed(exc)
            return
        if token is None:
            self.machine.fire("authenticated")
        else:
            self._send_sasl_token(token)

    # -- failures and completion ----------------------------------------------------------------
    def _without(self, layer: str) -> str:
        """The security_protocol minus ``layer`` ("tls" or "sasl"): what to suggest when the
        listener does not speak it."""
        tls = self.uses_tls() and layer != "tls"
        sasl = self.uses_sasl() and layer != "sasl"
        return ("SASL_SSL" if tls else "SASL_PLAINTEXT") if sasl else ("SSL" if tls else "PLAINTEXT")

    def _timed_out(self) -> TransportError:
        """Why the machine entered backoff when no I/O outcome said why: one of its timeouts
        (the transition just taken says which)."""
        record = self.machine.log[-1] if self.machine.log else None
        peer = f"{self.host}:{self.port}"
        if record is not None and record.trigger == "connect_timed_out":
            waited = self.machine.durations["connect_timeout"]
            return ConnectionLost(f"connect to {peer} timed out after {waited:g} ms")
        if record is not None and record.trigger == "handshake_timed_out":
            waited = self.machine.durations["handshake_timeout"]
            step = _HANDSHAKE_STEPS.get(record.source, record.source)
            return ConnectionLost(f"{peer} did not finish {step} within {waited:g} ms")
        return ConnectionLost("connection closed")

    def _report(self, cause: TransportError) -> None:
        """Tell the transport and the log about the failure that closed the connection."""
        if isinstance(cause, AuthenticationError) and self._auth_verdict is not None:
            self._auth_verdict(self.node_id, cause)
        reason = cause.args[0] if cause.args else type(cause).__name__
        if self._closing or self._not_a_failure:
            self._not_a_failure = False
            logger.debug("%s: %s", self.where, reason)
            return
        warning = self.health.failed(self.where, reason, self._clock.now_ms())
        if warning is not None:
            logger.warning("%s", warning)
        else:
            logger.debug("connection to %s failed: %s", self.where, reason)

    def _sasl_failed(self, exc: AuthenticationError) -> None:
        """A refused exchange: add the settings to check to the mechanism's or broker's words."""
        if self._settings.sasl_mechanism == "OAUTHBEARER":
            fix = "check the token that sasl_oauth_token_provider returns"
        else:
            fix = "check sasl_plain_username / sasl_plain_password"
        error = AuthenticationError(f"{exc.args[0] if exc.args else exc}: {fix}", node_id=self.node_id)
        error.__cause__ = exc.__cause__
        self._authentication_failed(error)

    def _io_failed(self, exc: TransportError, *, deliberate: bool = False) -> None:
        if exc.node_id is None:
            exc.node_id = self.node_id
        # Taken by note_io_failure only when the io_error edge is (the fire may be queued behind
        # the hook running now); in the states the spec ignores io_error nothing changes.
        self._io_failure = (exc, deliberate)
        if not self.machine.fire("io_error"):
            self._io_failure = None

    def _tls_failed(self, exc: SslHandshakeError) -> None:
        # Like Java, a refused certificate is an authentication failure: requests fail now and the
        # backoff is the max (the spec's authentication_failed edge out of tls_handshake).
        if self.machine.state in _TLS_STATES:
            self._authentication_failed(exc)
        else:
            self.auth_error = exc
            self._auth_failed = True
            self._io_failed(exc)

    def _authentication_failed(self, exc: AuthenticationError) -> None:
        if exc.node_id is None:
            exc.node_id = self.node_id
        self.auth_error = exc
        self._cause = exc
        self.machine.fire("authentication_failed")

    def _fail(self, pending: Pending, exc: Exception) -> None:
        if pending.done:
            return
        pending.error = clone_error(exc)
        pending.done = True
        self._complete(pending)

    def _finish(self, pending: Pending, response: ApiMessage | None) -> None:
        if pending.done:
            return
        pending.response = response
        pending.done = True
        self._complete(pending)
