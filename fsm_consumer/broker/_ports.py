"""Picking a free TCP port on the loopback interface."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_loopback_port() -> int:
    """Ask the kernel for an unused port on 127.0.0.1.

    The socket is closed before the caller binds the port, so another process can
    take it in between; callers that picked the port this way retry on failure.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]
