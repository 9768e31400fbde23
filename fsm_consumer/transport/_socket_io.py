"""The non-blocking socket work of a connection, without its state: opening a socket to one of a host's
addresses, writing what the socket takes of the output buffer, and reading whole frames.

Failures come back as ``OSError`` (and ``ssl.SSLError``) for the connection to word and report, or as
``PeerClosed`` when the broker closed the connection.
"""

from __future__ import annotations

import errno
import selectors
import socket
import ssl
import struct
import sys
from collections import deque
from collections.abc import Iterator

from ._framing import FrameReader
from ._settings import KafkaSettings

CONNECT_IN_PROGRESS = {errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY, errno.EAGAIN}
# Plain sockets: bytes per send() call; bigger gains nothing once the kernel buffer is full.
_PLAIN_WRITE_CHUNK = 1 << 20
# TLS: one record per SSL_write, retried with the same bytes after WANT_WRITE as OpenSSL requires.
_TLS_WRITE_CHUNK = 16 * 1024
# Bytes read from one plain socket per poll before the others get their turn (the selector is
# level-triggered, so the rest is read next poll). TLS sockets are drained fully: bytes OpenSSL
# has buffered do not make the descriptor readable again.
_READ_BUDGET = 8 << 20
_DIRECT_READ_MIN = 64 << 10  # below this a frame's rest is read through the shared buffer
# The rest of a large frame on a plain socket is read in one blocking recv (MSG_WAITALL) of at most this
# long: the interpreter lock is taken back once per frame instead of once per readable chunk (~30 per
# 4 MB Fetch response on loopback), each a wait while the application thread decodes. A broker slower
# than that (stalled, or far away) holds the network thread this long per readable event at most.
_WHOLE_FRAME_WAIT = 0.01
# SO_RCVTIMEO's struct timeval (Linux: two longs); elsewhere the frame is read as it becomes readable.
_RCVTIMEO = (
    struct.pack("ll", 0, int(_WHOLE_FRAME_WAIT * 1e6))
    if sys.platform == "linux" and hasattr(socket, "MSG_WAITALL")
    else None
)


class PeerClosed(Exception):
    """The broker closed the connection; ``midway``: in the middle of a response."""

    def __init__(self, midway: bool) -> None:
        super().__init__(midway)
        self.midway = midway


def open_socket(host: str, port: int, attempt: int, settings: KafkaSettings) -> tuple[socket.socket, int]:
    """A non-blocking socket connecting to ``host:port`` and ``connect_ex``'s errno (0: connected,
    ``CONNECT_IN_PROGRESS``: wait for writability). Several addresses (IPv4 and IPv6, round-robin DNS):
    attempt ``n`` takes the n-th. Raises ``OSError`` (``socket.gaierror`` when the name does not resolve)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[attempt % len(infos)]
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    try:
        if family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # requests are whole frames
        if settings.send_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, settings.send_buffer_bytes)
        if settings.receive_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, settings.receive_buffer_bytes)
        err = sock.connect_ex(address)
    except OSError as exc:
        err = exc.errno or errno.EIO
    return sock, err


def write_some(sock: socket.socket, out: deque[memoryview]) -> None:
    """Send from the head of ``out`` until the socket takes no more; what is sent leaves ``out``.
    Raises ``OSError`` for a failed write."""
    chunk = _TLS_WRITE_CHUNK if isinstance(sock, ssl.SSLSocket) else _PLAIN_WRITE_CHUNK
    while out:
        head = out[0]
        try:
            sent = sock.send(head[:chunk])
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return
        if sent >= len(head):
            out.popleft()
        else:
            out[0] = head[sent:]


def receive(sock: socket.socket, buf: memoryview, reader: FrameReader) -> Iterator[memoryview]:
    """The frames readable now, up to a plain socket's budget. Raises ``PeerClosed``, ``OSError``
    (``ssl.SSLError`` included) and the reader's ``TransportError`` for a stream out of step."""
    budget = None if isinstance(sock, ssl.SSLSocket) else _READ_BUDGET
    whole = budget is not None and _RCVTIMEO is not None
    while True:
        # the rest of a large frame (a Fetch response) goes straight into its body, not through buf
        room = reader.room()
        direct = room is not None and len(room) >= _DIRECT_READ_MIN
        unfinished = False
        try:
            if room is None or not direct:
                n = sock.recv_into(buf)
            elif whole:
                n = _receive_whole(sock, room)
                unfinished = n < len(room)  # the bound passed first (a slow broker): the loop's other work next
            else:
                n = sock.recv_into(room)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        if n == 0:
            raise PeerClosed(reader.partial)
        yield from reader.received(n) if direct else reader.feed(buf[:n])
        if unfinished:
            return  # the selector calls back when more has come
        if budget is not None:
            budget -= n
            if budget <= 0:
                return


def _receive_whole(sock: socket.socket, room: memoryview) -> int:
    """Receive into all of ``room`` in one blocking call bounded by ``_WHOLE_FRAME_WAIT``: what arrived by
    then, ``BlockingIOError`` if nothing did. The socket is non-blocking again after."""
    assert _RCVTIMEO is not None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _RCVTIMEO)
    sock.setblocking(True)
    try:
        return sock.recv_into(room, 0, socket.MSG_WAITALL)
    finally:
        sock.setblocking(False)


def set_interest(selector: selectors.BaseSelector, sock: socket.socket, old: int, new: int, owner: object) -> int:
    """Register, change or drop ``sock``'s selector interest from ``old`` to ``new``; returns ``new``."""
    if not old:
        selector.register(sock, new, owner)
    elif not new:
        selector.unregister(sock)
    else:
        selector.modify(sock, new, owner)
    return new


def close_quietly(selector: selectors.BaseSelector | None, sock: socket.socket) -> None:
    """Unregister ``sock`` (when a selector is given) and close it; a socket already gone is no error."""
    if selector is not None:
        try:
            selector.unregister(sock)
        except (KeyError, ValueError, OSError):
            pass
    try:
        sock.close()
    except OSError:
        pass
