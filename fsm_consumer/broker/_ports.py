"""Picking a free TCP port on the loopback interface, and telling whether one is taken."""

from __future__ import annotations

import errno
import socket

LOOPBACK = "127.0.0.1"


def free_loopback_port() -> int:
    """Ask the kernel for an unused port on 127.0.0.1.

    The socket is closed before the caller binds the port, so another process can
    take it in between; callers that picked the port this way retry on failure.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]  # an AF_INET address: (host, port)
        return port


def port_in_use(port: int) -> bool:
    """Whether some socket holds ``port`` on 127.0.0.1 so that a server could not bind it: one listening
    there (or on every interface), or bound without SO_REUSEADDR. Connections left in TIME_WAIT by a
    server that exited do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False
