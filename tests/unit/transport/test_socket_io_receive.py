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


def test_the_rest_of_a_large_frame_is_asked_for_in_one_blocking_read(pair, monkeypatch):
    ours, theirs = pair
    recv_calls = []
    whole = sio._receive_whole
    monkeypatch.setattr(sio, "_receive_whole", lambda s, room: recv_calls.append(len(room)) or whole(s, room))
    theirs.sendall(FRAME[: 4 + HEAD])
    writer = _writing(theirs, FRAME[4 + HEAD :])  # more than the pair buffers: written as it is read
    reader = FrameReader()
    buf = memoryview(bytearray(HEAD + 4))
    frames = _frames(ours, buf, reader) + _drain(ours, buf, reader, writer)
    # one frame, whole and in order; the first blocking read asked for all the rest of its body
    assert frames == [BODY]
    assert recv_calls and recv_calls[0] == len(BODY) - HEAD
    assert not reader.partial
    assert ours.getblocking() is False


def test_a_slow_peer_holds_the_network_thread_for_one_bounded_read_per_call(pair, monkeypatch):
    ours, theirs = pair
    reads = []
    whole = sio._receive_whole
    monkeypatch.setattr(sio, "_receive_whole", lambda s, room: reads.append(n := whole(s, room)) or n)
    body = os.urandom(HEAD + 200_000)
    frame = encode_frame(body)
    theirs.sendall(frame[: 4 + HEAD])

    def trickle():  # 4 KB every 2 ms, ~100 ms in all: a blocking read's 10 ms pass with the frame unfinished
        for i in range(4 + HEAD, len(frame), 4_000):
            time.sleep(0.002)
            theirs.sendall(frame[i : i + 4_000])

    reader = FrameReader()
    buf = memoryview(bytearray(HEAD + 4))
    assert _frames(ours, buf, reader) == []  # the frame's start; then nothing within the bound
    assert reader.partial and reads == []
    writer = threading.Thread(target=trickle)
    writer.start()
    first = _frames(ours, buf, reader)  # from the first 4 KB on
    # the call came back after one blocking read that got part of the rest, its bytes kept: the loop's
    # other work (heartbeats, other brokers, the application's requests) is not held until the frame ends
    first_reads = list(reads)
    frames = first + _drain(ours, buf, reader, writer)
    assert first == [] and len(first_reads) == 1 and 0 < first_reads[0] < 200_000
    assert frames == [body]
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
