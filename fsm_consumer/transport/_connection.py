"""One broker connection: the model that ``specs/connection.yaml`` drives.

The machine decides *when* (connect, handshake steps, backoff, deadlines); this class does the
socket work in the hooks the spec names and turns I/O outcomes into the spec's triggers. All of
it runs on the transport's thread; nothing here blocks (DNS resolution aside, as in Kafka's own
clients).
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import ssl
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from kafka.protocol.api_message import ApiMessage

from ..machines import Clock, SpecMachine, shipped_spec
from ._backoff import ReconnectBackoff
from ._base import Pending
from ._codec import Decoded, RequestCodec
from ._errors import (
    AuthenticationError,
    ConnectionLost,
    RequestTimedOut,
    TransportError,
    UnsupportedVersion,
    clone_error,
    timeout_cause,
)
from ._framing import FrameReader
from ._handshake import Handshake, set_version
from ._health import NodeHealth
from ._settings import KafkaSettings
from ._socket_io import CONNECT_IN_PROGRESS, PeerClosed, close_quietly, open_socket, receive, set_interest, write_some
from ._tls import SslHandshakeError, handshake_failure, handshake_step, silent_listener, wrap
from ._versions import ApiVersionTable

if TYPE_CHECKING:
    import random

__all__ = ["Connection", "clone_error"]

logger = logging.getLogger("fsm_consumer.transport")

_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
# the values of connection.yaml's `phase` attribute in which the connection is being set up
SETTING_UP = frozenset({"connecting", "tls", "handshake"})

_Handler = Callable[[ApiMessage], None]


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
        versions_known: Callable[[tuple[int, ...], ApiVersionTable], None] | None = None,
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
        self._auth_verdict = auth_verdict  # told each authentication failure, and None once ready
        self.sock: socket.socket | None = None
        self._events = 0  # selector interest currently registered for sock
        self._out: deque[memoryview] = deque()
        self._reader = self._new_reader()
        self._codec = RequestCodec(node_id=node_id)
        self.queued: deque[Pending] = deque()  # waiting for the connection to get ready
        self._in_flight: deque[Pending | _Handler] = deque()  # same order as the codec's
        self.versions: ApiVersionTable | None = None  # capped by config api_version
        self._handshake = Handshake(self, settings, versions_known)
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
        elif self.machine.attribute("phase") == "tls":
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
        if sock is None or not self._out or self.machine.attribute("phase") in ("connecting", "tls"):
            return
        try:
            write_some(sock, self._out)
        except OSError as exc:
            self.io_failed(ConnectionLost(f"write to {self.host}:{self.port} failed: {exc}"))
            return
        self._set_interest(_READ | (_WRITE if self._out else 0))

    def request_timed_out(self, pending: Pending) -> None:
        """``pending`` was sent here and its deadline passed: fail it and recycle the connection,
        whose later responses can no longer be trusted to arrive (as Java's NetworkClient)."""
        name = type(pending.request).__name__
        self._fail(pending, RequestTimedOut(f"{name} got no response by its deadline", node_id=self.node_id))
        self.io_failed(ConnectionLost(f"connection recycled after {name} timed out"))

    def disconnect(self, reason: str = "disconnected by the client") -> None:
        """Drop the socket on purpose: no warning, not counted as a failure. Where there is no
        socket (disconnected, backoff, closed) the spec ignores it."""
        self.io_failed(ConnectionLost(reason), deliberate=True)

    def relocate(self, host: str, port: int) -> None:
        """The node now lives at another address: drop the old socket, queued requests follow."""
        self.disconnect(f"node {self.node_id} moved to {host}:{port}")
        self.host, self.port = host, port

    def close(self, reason: str = "the transport is closed") -> None:
        """Enter ``closed``: everything outstanding, queued included, fails with ConnectionLost. Closed already:
        ignored (connection.yaml), fired all the same (a composition's link asks it of every connection)."""
        if not self.machine.is_terminal:
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
        self._reader = self._new_reader()  # the address may have changed (relocate)
        self._codec = RequestCodec(node_id=self.node_id)
        self._handshake.restart()
        try:
            sock, err = open_socket(self.host, self.port, self._attempt, self._settings)
        except socket.gaierror as exc:
            self.io_failed(ConnectionLost(f"cannot resolve {self.host}:{self.port}: {exc}"))
            return
        except OSError as exc:
            self._attempt += 1  # the next attempt takes the next address
            self.io_failed(ConnectionLost(f"cannot create a socket: {exc}"))
            return
        self._attempt += 1
        self.sock = sock
        if err == 0:
            self._set_interest(_READ)
            self.machine.fire("connected")
        elif err in CONNECT_IN_PROGRESS:
            self._set_interest(_WRITE)
        else:
            self.io_failed(ConnectionLost(f"connect to {self.host}:{self.port} failed: {os.strerror(err)}"))

    def start_tls(self) -> None:
        raw = self.sock
        assert raw is not None and self._settings.ssl_context is not None
        self._set_interest(0)  # the wrapped socket is registered anew
        self._tls_heard = False
        try:
            self.sock = wrap(raw, self._settings.ssl_context, self.host, self.port, node_id=self.node_id)
        except SslHandshakeError as exc:
            self._tls_failed(exc)
        except OSError as exc:
            self.io_failed(ConnectionLost(f"cannot start TLS: {exc}"))
        else:
            self._advance_tls()

    def send_api_versions(self) -> None:
        self._handshake.send_api_versions()

    def start_sasl(self) -> None:
        self._handshake.start_sasl()

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
            peer=f"{self.host}:{self.port}", waited_ms=waited, plaintext=self.without("tls"), node_id=self.node_id
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
        self._reader = self._new_reader()  # a frame cut off mid-body: its buffer freed now, not at a reconnect
        self.versions = None
        self._handshake.forget()
        if sock is not None:
            close_quietly(self._selector if self._events else None, sock)
            self._events = 0

    def fail_in_flight(self) -> None:
        cause = self._cause or timeout_cause(self.machine, f"{self.host}:{self.port}")
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
    def _new_reader(self) -> FrameReader:
        return FrameReader(self._settings.receive_buffer_max, node_id=self.node_id, peer=f"{self.host}:{self.port}")

    def _set_interest(self, events: int) -> None:
        if self.sock is not None and events != self._events:
            self._events = set_interest(self._selector, self.sock, self._events, events, self)

    def _finish_connect(self) -> None:
        assert self.sock is not None
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self.io_failed(ConnectionLost(f"connect to {self.host}:{self.port} failed: {os.strerror(err)}"))
            return
        self._set_interest(_READ)
        self.machine.fire("connected")

    def _advance_tls(self) -> None:
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            step = handshake_step(
                self.sock, node_id=self.node_id, peer=f"{self.host}:{self.port}", plaintext=self.without("tls")
            )
        except SslHandshakeError as exc:
            self._tls_failed(exc)
            return
        except ConnectionLost as exc:
            self.io_failed(exc)
            return
        if step == "done":
            self._set_interest(_READ)
            self.machine.fire("tls_established")
        else:
            self._set_interest(_READ if step == "read" else _WRITE)

    def _read(self) -> None:
        sock = self.sock
        if sock is None:
            return
        try:
            for frame in receive(sock, self._read_buffer, self._reader):
                self._dispatch(self._codec.decode(frame))
                if sock is not self.sock:
                    return  # a response closed or replaced the connection
            if self._reader.partial and not self._in_flight:  # unasked: no deadline would end that frame
                raise TransportError(
                    f"{self.host}:{self.port} sent bytes with no request in flight", node_id=self.node_id
                )
        except PeerClosed as closed:
            midway = " in the middle of a response" if closed.midway else ""
            # Brokers close idle connections (connections.max.idle.ms): the next request
            # reconnects, and only a failure to do so is worth reporting.
            self._not_a_failure = self.state == "ready" and not self._in_flight and not self.queued
            self.io_failed(ConnectionLost(f"{self.host}:{self.port} closed the connection{midway}"))
        except ssl.SSLError as exc:
            if self.state == "api_versions" and not isinstance(exc, (ssl.SSLEOFError, ssl.SSLSyscallError)):
                # TLS 1.3 finishes the client's handshake before the broker checks the client
                # certificate: its refusal arrives as an alert on the first read.
                error = handshake_failure(
                    exc, peer=f"{self.host}:{self.port}", plaintext=self.without("tls"), node_id=self.node_id
                )
                error.__cause__ = exc
                self._tls_failed(error)
            else:
                self.io_failed(ConnectionLost(f"read from {self.host}:{self.port} failed: {exc}"))
        except OSError as exc:
            self.io_failed(ConnectionLost(f"read from {self.host}:{self.port} failed: {exc}"))
        except TransportError as exc:  # the stream is out of step: nothing more on it is trusted
            self.io_failed(exc)

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
        try:
            set_version(pending, self.versions)
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

    def fire(self, trigger: str) -> None:
        self.machine.fire(trigger)

    def send_internal(self, request: ApiMessage, handler: _Handler) -> None:
        _, data = self._codec.encode(request, self._settings.client_id)
        self._in_flight.append(handler)
        self._out.append(memoryview(data))
        self.flush()

    # -- failures and completion ----------------------------------------------------------------
    def without(self, layer: str) -> str:
        """The security_protocol minus ``layer`` ("tls" or "sasl"): what to suggest when the
        listener does not speak it."""
        tls = self.uses_tls() and layer != "tls"
        sasl = self.uses_sasl() and layer != "sasl"
        return ("SASL_SSL" if tls else "SASL_PLAINTEXT") if sasl else ("SSL" if tls else "PLAINTEXT")

    def _report(self, cause: TransportError) -> None:
        """Tell the transport and the log about the failure that closed the connection."""
        if isinstance(cause, AuthenticationError) and self._auth_verdict is not None:
            self._auth_verdict(self.node_id, cause)
        reason = cause.args[0] if cause.args else type(cause).__name__
        quiet, self._not_a_failure = self._closing or self._not_a_failure, False
        self.health.report(self.where, reason, self._clock.now_ms(), quiet=quiet)

    def io_failed(self, exc: TransportError, *, deliberate: bool = False) -> None:
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
        if self.machine.attribute("phase") == "tls":
            self.authentication_failed(exc)
        else:
            self.auth_error = exc
            self._auth_failed = True
            self.io_failed(exc)

    def authentication_failed(self, exc: AuthenticationError) -> None:
        if exc.node_id is None:
            exc.node_id = self.node_id
        self.auth_error = exc
        self._cause = exc
        self.machine.fire("authentication_failed")

    def _fail(self, pending: Pending, exc: Exception) -> None:
        if pending.settle(error=clone_error(exc)):
            self._complete(pending)

    def _finish(self, pending: Pending, response: ApiMessage | None) -> None:
        if pending.settle(response=response):
            self._complete(pending)
