"""``receive`` over a real socket pair: the rest of a large frame read in one blocking call that is bounded,
leaves the socket non-blocking, and loses nothing when the peer stalls or closes mid-frame."""

from __future__ import annotations

import os
import select
import socket
import threading
import time

import pytest

from fsm_consumer.transport import FrameReader, encode_frame
from fsm_consumer.transport import _socket_io as sio

pytestmark = pytest.mark.skipif(sio._RCVTIMEO is None, reason="the bounded whole-frame read is Linux only")

BODY = os.urandom(3 << 20)  # a Fetch response's size: far above the direct-read minimum
FRAME = encode_frame(BODY)
HEAD = 100_000  # what the first read (through the shared buffer) takes


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    yield ours, theirs
    ours.close()
    theirs.close()


def _readable(sock: socket.socket) -> None:
    select.select([sock], [], [], 5)


def _frames(sock, buf, reader):
    _readable(sock)
    return [bytes(f) for f in sio.receive(sock, buf, reader)]


def _drain(sock, buf, reader, writer: threading.Thread) -> list[bytes]:
    """The frames received until ``writer`` is done and nothing is left to read."""
    frames = []
    while writer.is_alive() or _pending(sock):
        if _pending(sock):
            frames += [bytes(f) for f in sio.receive(sock, buf, reader)]
        else:
            writer.join(0.001)
    writer.join()
    return frames


def _pending(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def _writing(sock: socket.socket, data: bytes, then_close: bool = False) -> threading.Thread:
    """A thread writing ``data`` (more than the socket pair buffers) as the reader takes it."""

    def write():
        sock.sendall(data)
        if then_close:
            sock.close()

    writer = threading.Thread(target=write)
    writer.start()
    return writer


def test_the_rest_of_a_large_frame_comes_in_one_call_while_the_peer_is_still_writing(pair, monkeypatch):
    ours, theirs = pair
    recv_calls = []
    whole = sio._receive_whole
    monkeypatch.setattr(sio, "_receive_whole", lambda s, room: recv_calls.append(len(room)) or whole(s, room))
    theirs.sendall(FRAME[: 4 + HEAD])

    def rest():  # in pieces, each well within the bound: the broker streaming a response
        for i in range(4 + HEAD, len(FRAME), 256 << 10):
            theirs.sendall(FRAME[i : i + (256 << 10)])
            time.sleep(0.001)

    writer = threading.Thread(target=rest)
    writer.start()
    reader = FrameReader()
    buf = memoryview(bytearray(HEAD + 4))
    first = _frames(ours, buf, reader)
    _drain(ours, buf, reader, writer)  # (only if that call returned early) frees the writer
    # one frame, whole and in order, read by one receive call; the blocking read filled the rest of the
    # body (the kernel may end a wait early, so a second blocking read may finish it)
    assert first == [BODY]
    assert recv_calls and recv_calls[0] == len(BODY) - HEAD
    assert not reader.partial
    assert ours.getblocking() is False


def test_a_peer_that_stalls_mid_frame_returns_control_and_the_frame_completes_later(pair):
    ours, theirs = pair
    reader = FrameReader()
    buf = memoryview(bytearray(HEAD + 4))
    half = len(FRAME) // 2
    writer = _writing(theirs, FRAME[:half])
    frames = _drain(ours, buf, reader, writer)  # each call returns once nothing more came within the bound
    # the writer stopped half way: receive gave up waiting after the bound, with nothing lost
    assert frames == []
    assert reader.partial
    assert ours.getblocking() is False
    with pytest.raises(BlockingIOError):  # still non-blocking: nothing more to read now
        ours.recv(1)
    frames += _drain(ours, buf, reader, _writing(theirs, FRAME[half:]))
    assert frames == [BODY]


def test_a_peer_that_closes_mid_frame_is_reported_as_closed_midway(pair):
    ours, theirs = pair
    reader = FrameReader()
    writer = _writing(theirs, FRAME[: len(FRAME) // 3], then_close=True)
    buf = memoryview(bytearray(HEAD + 4))
    with pytest.raises(sio.PeerClosed) as closed:
        while True:
            assert _frames(ours, buf, reader) == []
    writer.join()
    assert closed.value.midway
    assert ours.getblocking() is False
