"""FaultProxy: a TCP proxy on loopback in front of one broker, which the broker advertises (so every
connection a client makes after bootstrap goes through it too), with network faults switched on and off
while clients run: latency on answers, a connection reset in the middle of a frame of a chosen API (the
request's, so the broker never sees it whole, or the answer's, so the broker acted but the client cannot
know), and a blackhole for one client id (its frames are swallowed both ways, its sockets stay open: a
network that drops everything, as a pulled cable does).

It reads only each frame's size and, of a request, its header (kafka-python's ``RequestHeader``: API
key, correlation id, client id) to know which API and client a frame belongs to; bytes pass unchanged.
Plaintext listeners only (TLS would hide the headers). One thread per direction per connection: a
test aid for a handful of clients, not a production proxy.

    proxy = FaultProxy()                       # binds its port at once
    broker = KafkaBroker(advertised_port=proxy.port)
    proxy.forward_to(broker.host, broker.port)  # now accepting
    proxy.reset("OffsetCommit", direction="response")
"""

from __future__ import annotations

import io
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Literal

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.api_key import ApiKey

from ..broker._ports import LOOPBACK

__all__ = ["FaultProxy", "ResetDone"]

Direction = Literal["request", "response"]


def api_key_of(api: str | int) -> int:
    """``"OffsetCommit"`` (or ``"OffsetCommitRequest"``, or the key itself) -> its API key."""
    if isinstance(api, int):
        return api
    name = api.removesuffix("Request").removesuffix("Response")
    try:
        return int(ApiKey[name])
    except KeyError:
        raise ValueError(f"unknown Kafka API {api!r} (e.g. JoinGroup, SyncGroup, OffsetCommit, Fetch)") from None


def api_name(key: int | None) -> str:
    try:
        return ApiKey(key).name if key is not None else "?"
    except ValueError:
        return str(key)


@dataclass
class _Reset:
    api: int
    direction: Direction
    client: str | None
    times: int


@dataclass(frozen=True)
class ResetDone:
    """A reset the proxy carried out: when (monotonic s), whose connection, in which frame."""

    t: float
    client: str | None
    api: str
    direction: Direction
    correlation_id: int


@dataclass
class _Link:
    """One client connection and its upstream one."""

    client_sock: socket.socket
    upstream_sock: socket.socket
    client: str | None = None  # the client id, from its first request
    apis: dict[int, int] = field(default_factory=dict)  # correlation id -> API key, for the answers
    dead: bool = False


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _frames(sock: socket.socket) -> Iterator[tuple[bytes, bytes]]:
    """(size prefix, frame) until the peer closes."""
    while True:
        prefix = _read_exactly(sock, 4)
        if prefix is None:
            return
        (size,) = struct.unpack(">i", prefix)
        frame = _read_exactly(sock, size)
        if frame is None:
            return
        yield prefix, frame


class FaultProxy:
    """See the module's docstring. Faults apply to frames read from when they are set."""

    def __init__(self, port: int = 0) -> None:
        self._listener = socket.create_server((LOOPBACK, port))
        self.port: int = self._listener.getsockname()[1]
        self._upstream: tuple[str, int] | None = None
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._latency: dict[str | None, float] = {}  # client (None: everyone) -> seconds added to each answer
        self._resets: list[_Reset] = []
        self._blackholed: set[str] = set()
        self.resets_done: list[ResetDone] = []
        #: frames swallowed per blackholed client id
        self.swallowed: dict[str, int] = {}
        self._closed = False

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def forward_to(self, host: str, port: int) -> FaultProxy:
        """Start accepting, each connection forwarded to ``host:port``."""
        self._upstream = (host, port)
        threading.Thread(target=self._accept, name=f"fault-proxy-{self.port}", daemon=True).start()
        return self

    # -- faults ---------------------------------------------------------------------------------

    def latency(self, ms: float, client: str | None = None) -> None:
        """Hold each answer ``ms`` (to ``client``'s connections, or everyone's) before passing it on; 0 ends it."""
        with self._lock:
            if ms > 0:
                self._latency[client] = ms / 1000
            else:
                self._latency.pop(client, None)

    def reset(
        self, api: str | int, *, direction: Direction = "response", client: str | None = None, times: int = 1
    ) -> None:
        """The next ``times`` frames of ``api`` (its requests or its answers, of ``client`` or anyone's): pass
        the first half of the frame, then reset both connections (RST, no FIN)."""
        if direction not in ("request", "response"):
            raise ValueError(f"direction must be 'request' or 'response', not {direction!r}")
        with self._lock:
            self._resets.append(_Reset(api_key_of(api), direction, client, times))

    def blackhole(self, client: str) -> None:
        """Swallow every frame to and from ``client``'s connections (new ones too) until ``heal``."""
        with self._lock:
            self._blackholed.add(client)

    def heal(self, client: str | None = None) -> None:
        """End ``client``'s blackhole (or every one)."""
        with self._lock:
            if client is None:
                self._blackholed.clear()
            else:
                self._blackholed.discard(client)

    def clear(self) -> None:
        """Every fault off (resets not yet carried out are dropped)."""
        with self._lock:
            self._latency.clear()
            self._resets.clear()
            self._blackholed.clear()

    def pending_resets(self) -> int:
        with self._lock:
            return sum(r.times for r in self._resets)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        self._closed = True
        with suppress(OSError):
            self._listener.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            self._drop(link, abort=False)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._upstream is not None
        while not self._closed:
            try:
                client_sock, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream_sock = socket.create_connection(self._upstream, timeout=5)
                upstream_sock.settimeout(None)
            except OSError:  # the broker is down: as if the connection were refused
                client_sock.close()
                continue
            for s in (client_sock, upstream_sock):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client_sock, upstream_sock)
            with self._lock:
                self._links = [x for x in self._links if not x.dead] + [link]
            threading.Thread(target=self._requests, args=(link,), daemon=True).start()
            threading.Thread(target=self._answers, args=(link,), daemon=True).start()

    def _take_reset(self, link: _Link, api: int, direction: Direction) -> bool:
        with self._lock:
            for r in self._resets:
                if r.api == api and r.direction == direction and r.client in (None, link.client):
                    r.times -= 1
                    if r.times <= 0:
                        self._resets.remove(r)
                    return True
        return False

    def _swallowed(self, link: _Link) -> bool:
        with self._lock:
            if link.client is not None and link.client in self._blackholed:
                self.swallowed[link.client] = self.swallowed.get(link.client, 0) + 1
                return True
        return False

    def _cut(self, link: _Link, to: socket.socket, prefix: bytes, frame: bytes, done: ResetDone) -> None:
        with suppress(OSError):
            to.sendall(prefix + frame[: len(frame) // 2])
        with self._lock:
            self.resets_done.append(done)
        self._drop(link, abort=True)

    def _done(self, link: _Link, api: int, direction: Direction, corr: int) -> ResetDone:
        return ResetDone(time.monotonic(), link.client, api_name(api), direction, corr)

    def _requests(self, link: _Link) -> None:
        try:
            for prefix, frame in _frames(link.client_sock):
                header = RequestHeader.decode(io.BytesIO(frame))
                api, corr = header.request_api_key, header.correlation_id
                if link.client is None:
                    link.client = header.client_id
                if self._swallowed(link):
                    continue
                if self._take_reset(link, api, "request"):
                    self._cut(link, link.upstream_sock, prefix, frame, self._done(link, api, "request", corr))
                    return
                link.apis[corr] = api
                link.upstream_sock.sendall(prefix + frame)
        except OSError:
            pass
        self._drop(link, abort=False)

    def _answers(self, link: _Link) -> None:
        try:
            for prefix, frame in _frames(link.upstream_sock):
                read_at = time.monotonic()
                (corr,) = struct.unpack(">i", frame[:4])
                api = link.apis.pop(corr, -1)
                if self._swallowed(link):
                    continue
                with self._lock:
                    delay = self._latency.get(link.client, self._latency.get(None, 0.0))
                if delay:
                    time.sleep(max(0.0, read_at + delay - time.monotonic()))
                if self._take_reset(link, api, "response"):
                    self._cut(link, link.client_sock, prefix, frame, self._done(link, api, "response", corr))
                    return
                link.client_sock.sendall(prefix + frame)
        except OSError:
            pass
        self._drop(link, abort=False)

    def _drop(self, link: _Link, *, abort: bool) -> None:
        """Close both sockets: with ``abort``, a reset (SO_LINGER 0: RST instead of FIN). Shutting the
        reading side first wakes the other direction's thread blocked in recv (close alone may not)."""
        link.dead = True
        for s in (link.client_sock, link.upstream_sock):
            with suppress(OSError):
                if abort:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RD if abort else socket.SHUT_RDWR)
            with suppress(OSError):
                s.close()
