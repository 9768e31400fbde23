"""Kafka frame boundaries: a 4-byte big-endian size prefix, then the payload.

``FrameReader`` is sans-IO: feed it whatever the socket returned and it
hands back the complete payloads. It validates each size prefix before
allocating or buffering anything of the body, so a hostile or desynced
peer cannot make us reserve gigabytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from ._errors import FrameTooLarge

_body_buffer: Callable[[int], bytearray]
try:  # compiled (transport/_cbuffer.c): a body's buffer not zeroed first, every byte is received into it
    from ._cbuffer import uninitialized as _body_buffer
except ImportError:  # installed without a C compiler
    _body_buffer = bytearray

__all__ = ["DEFAULT_RECEIVE_BUFFER_MAX", "FrameReader", "encode_frame"]

DEFAULT_RECEIVE_BUFFER_MAX = 100 * 1024 * 1024  # 100 MiB, like kafka-python

_SIZE = struct.Struct(">i")
_INT32_MAX = 2**31 - 1


class FrameReader:
    """Splits a byte stream into frames; one instance per connection.

    Frames come back as read-only ``memoryview`` objects rather than
    ``bytes``: turning a buffered body into ``bytes`` would copy every
    Fetch response a second time. kafka-python's decoders take any buffer.
    """

    __slots__ = ("_limit", "_node_id", "_peer", "_prefix", "_prefix_len", "_body", "_filled", "_error")

    def __init__(
        self,
        receive_buffer_max: int = DEFAULT_RECEIVE_BUFFER_MAX,
        *,
        node_id: int | None = None,
        peer: str | None = None,
    ) -> None:
        if not 0 <= receive_buffer_max <= _INT32_MAX:
            raise ValueError(f"receive_buffer_max must be in [0, {_INT32_MAX}]")
        self._limit = receive_buffer_max
        self._node_id = node_id  # node_id and peer (host:port) only name the broker in FrameTooLarge
        self._peer = peer
        self._prefix = bytearray(4)  # a size prefix split across reads
        self._prefix_len = 0
        self._body: memoryview | None = None  # writable view of the frame being filled
        self._filled = 0
        self._error: FrameTooLarge | None = None

    @property
    def partial(self) -> bool:
        """True while part of a frame (prefix or body) is buffered.

        A connection that closes in this state lost a response mid-frame.
        """
        return self._prefix_len > 0 or self._body is not None

    def room(self) -> memoryview | None:
        """The unfilled rest of the frame body being assembled, or None between frames.

        A caller may receive straight into it (``sock.recv_into(room)``) and then report how many
        bytes came with ``received``: the body is then not copied from a read buffer.
        """
        if self._body is None:
            return None
        return self._body[self._filled :]

    def received(self, n: int) -> list[memoryview]:
        """``n`` bytes were written into ``room()``: the frame, if that completed it."""
        body = self._body
        if body is None or not 0 <= n <= len(body) - self._filled:
            raise ValueError(f"received {n} bytes, room for {0 if body is None else len(body) - self._filled}")
        self._filled += n
        if self._filled < len(body):
            return []
        self._body = None
        return [body.toreadonly()]

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Consume ``data``; return the payloads of every frame it completed.

        Raises FrameTooLarge for a size prefix outside [0, receive_buffer_max].
        The stream cannot be resynchronised after that, so the error is
        sticky: every later call raises it again.
        """
        if self._error is not None:
            raise self._error
        view = memoryview(data).cast("B")
        # Views into an immutable ``bytes`` chunk can be handed out as-is;
        # a mutable chunk (e.g. a recv_into buffer) may be overwritten by the
        # caller, so its bytes must be copied out.
        immutable = view.readonly
        end = len(view)
        pos = 0
        frames: list[memoryview] = []
        while pos < end:
            if self._body is None:
                if self._prefix_len == 0 and end - pos >= 4:
                    size = _SIZE.unpack_from(view, pos)[0]
                    pos += 4
                else:
                    take = min(4 - self._prefix_len, end - pos)
                    self._prefix[self._prefix_len : self._prefix_len + take] = view[pos : pos + take]
                    self._prefix_len += take
                    pos += take
                    if self._prefix_len < 4:
                        break
                    self._prefix_len = 0
                    size = _SIZE.unpack_from(self._prefix)[0]
                if size < 0 or size > self._limit:
                    self._error = FrameTooLarge(size, self._limit, node_id=self._node_id, peer=self._peer)
                    raise self._error
                if end - pos >= size:
                    # The whole frame is in this chunk: no reassembly needed.
                    frame = view[pos : pos + size]
                    frames.append(frame if immutable else memoryview(frame.tobytes()))
                    pos += size
                    continue
                # Preallocate the exact size so the body is filled in place;
                # growing a buffer chunk by chunk would copy it repeatedly.
                self._body = memoryview(_body_buffer(size))
                self._filled = 0
            body = self._body
            take = min(len(body) - self._filled, end - pos)
            # The one unavoidable copy: socket chunk -> frame buffer.
            body[self._filled : self._filled + take] = view[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled == len(body):
                frames.append(body.toreadonly())
                self._body = None
        return frames


def encode_frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix ``payload`` with its 4-byte big-endian size."""
    size = len(payload)
    if size > _INT32_MAX:
        raise ValueError(f"payload of {size} bytes does not fit an int32 size prefix")
    return _SIZE.pack(size) + bytes(payload)
