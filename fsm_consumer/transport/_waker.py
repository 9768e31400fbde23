"""A socketpair that lets any thread interrupt a select() in the transport's thread."""

from __future__ import annotations

import socket

__all__ = ["Waker"]


class Waker:
    """Register ``fileno()`` for reading; ``wake()`` (any thread) makes it readable, ``drain()``
    (the polling thread) makes it quiet again."""

    __slots__ = ("_reader", "_writer")

    def __init__(self) -> None:
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)

    def fileno(self) -> int:
        return self._reader.fileno()

    def wake(self) -> None:
        try:
            self._writer.send(b"\x00")
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already: the reader will see one
        except OSError:
            pass  # closed: the transport is gone, nothing to wake

    def drain(self) -> None:
        try:
            while self._reader.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        self._writer.close()
        self._reader.close()
