"""FrameReader / encode_frame: boundaries, limits, zero-copy behaviour."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm_consumer.transport import DEFAULT_RECEIVE_BUFFER_MAX, FrameReader, FrameTooLarge, encode_frame


def test_encode_frame_prefixes_big_endian_size():
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(bytearray(b"xy")) == b"\x00\x00\x00\x02xy"


def test_several_frames_in_one_chunk():
    stream = encode_frame(b"one") + encode_frame(b"") + encode_frame(b"three")
    frames = FrameReader().feed(stream)
    assert [bytes(f) for f in frames] == [b"one", b"", b"three"]


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 64])
def test_any_chunking_yields_the_same_frames(chunk):
    payloads = [b"a" * 10, b"", bytes(range(256)) * 3, b"z"]
    stream = b"".join(encode_frame(p) for p in payloads)
    reader = FrameReader()
    frames = []
    for i in range(0, len(stream), chunk):
        frames.extend(reader.feed(stream[i : i + chunk]))
    assert [bytes(f) for f in frames] == payloads
    assert not reader.partial


def test_partial_tracks_prefix_and_body():
    reader = FrameReader()
    assert not reader.partial
    assert reader.feed(b"\x00\x00") == []
    assert reader.partial  # half a prefix
    assert reader.feed(b"\x00\x02a") == []
    assert reader.partial  # half a body
    assert [bytes(f) for f in reader.feed(b"b")] == [b"ab"]
    assert not reader.partial


def test_oversized_prefix_rejected_before_body_arrives():
    reader = FrameReader(receive_buffer_max=10, node_id=7)
    with pytest.raises(FrameTooLarge) as info:
        reader.feed(struct.pack(">i", 11))  # no body bytes at all yet
    assert info.value.size == 11 and info.value.limit == 10
    assert info.value.node_id == 7
    assert "node 7" in str(info.value)


def test_negative_prefix_rejected():
    with pytest.raises(FrameTooLarge) as info:
        FrameReader().feed(struct.pack(">i", -1) + b"junk")
    assert info.value.size == -1


def test_limit_is_inclusive_and_default_is_100_mib():
    assert DEFAULT_RECEIVE_BUFFER_MAX == 100 * 1024 * 1024
    reader = FrameReader(receive_buffer_max=3)
    assert [bytes(f) for f in reader.feed(encode_frame(b"abc"))] == [b"abc"]


def test_huge_prefix_split_across_chunks_is_rejected_without_allocating():
    reader = FrameReader()
    reader.feed(b"\x7f\xff")
    with pytest.raises(FrameTooLarge):
        reader.feed(b"\xff\xff")


def test_error_is_sticky():
    reader = FrameReader(receive_buffer_max=1)
    with pytest.raises(FrameTooLarge):
        reader.feed(encode_frame(b"toolong"))
    with pytest.raises(FrameTooLarge):
        reader.feed(encode_frame(b"x"))  # stream is desynchronised for good


def test_frames_from_immutable_chunk_are_views_without_copy():
    stream = encode_frame(b"hello")
    [frame] = FrameReader().feed(stream)
    assert isinstance(frame, memoryview)
    assert frame.obj is stream  # a view into the caller's bytes, not a copy
    assert frame.readonly


def test_frames_from_mutable_chunk_survive_buffer_reuse():
    buf = bytearray(encode_frame(b"hello"))
    [frame] = FrameReader().feed(buf)
    buf[4:9] = b"XXXXX"  # e.g. a recv_into buffer being reused
    assert bytes(frame) == b"hello"


def test_reassembled_frame_is_read_only():
    reader = FrameReader()
    reader.feed(encode_frame(b"abcdef")[:6])
    [frame] = reader.feed(b"cdef")
    assert bytes(frame) == b"abcdef"
    assert frame.readonly


def test_large_frame_in_many_chunks_is_filled_in_place():
    payload = bytes(range(256)) * 40_000  # ~10 MB
    stream = encode_frame(payload)
    reader = FrameReader()
    chunk = 65536
    frames = []
    for i in range(0, len(stream), chunk):
        frames.extend(reader.feed(memoryview(stream)[i : i + chunk]))
    assert len(frames) == 1
    assert frames[0] == payload


def test_invalid_limit():
    with pytest.raises(ValueError):
        FrameReader(receive_buffer_max=-1)


@given(st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=5), st.integers(1, 97), st.integers(1, 50))
def test_receiving_into_room_gives_the_same_frames_as_feeding(payloads, chunk, direct):
    """A connection may receive a body's rest straight into ``room()``; the frames are the same."""
    stream = b"".join(encode_frame(p) for p in payloads)
    reader = FrameReader()
    got, pos = [], 0
    while pos < len(stream):
        room = reader.room()
        if room is not None and len(room) > 0:
            n = min(direct, len(room), len(stream) - pos)
            room[:n] = stream[pos : pos + n]
            got += reader.received(n)
        else:
            n = min(chunk, len(stream) - pos)
            got += reader.feed(stream[pos : pos + n])
        pos += n
    assert [bytes(f) for f in got] == payloads
    assert reader.room() is None and not reader.partial


def test_received_more_than_room_is_refused():
    reader = FrameReader()
    assert reader.room() is None
    assert reader.feed(encode_frame(b"abcdef")[:6]) == []
    assert len(reader.room()) == 4
    with pytest.raises(ValueError, match="room for 4"):
        reader.received(5)


def test_a_body_buffer_not_zeroed_first_holds_only_received_bytes():
    """Built with its C module, a frame's buffer is allocated without being written (transport/_cbuffer.c):
    memory just freed by an earlier frame, full of its bytes, is what the next one gets, and every byte of
    a frame handed out is still one received for it."""
    size = 1 << 20
    reader = FrameReader()
    for fill in (b"\xab", b"\x00", b"\xcd"):
        payload = fill * (size // 2) + bytes(range(256)) * (size // 512)
        stream = encode_frame(payload)
        got = reader.feed(stream[:1000])
        while (room := reader.room()) is not None:  # the connection's way: straight into the buffer
            start = len(stream) - len(room)
            n = min(len(room), 300_000)
            room[:n] = stream[start : start + n]
            got += reader.received(n)
        assert [bytes(f) for f in got] == [payload]


def test_the_compiled_buffer_is_a_bytearray_of_the_size_asked():
    cbuffer = pytest.importorskip("fsm_consumer.transport._cbuffer", reason="installed without a C compiler")
    from fsm_consumer.transport import _framing

    assert _framing._body_buffer is cbuffer.uninitialized
    for n in (0, 1, 65536, 4 << 20):
        b = cbuffer.uninitialized(n)
        assert type(b) is bytearray and len(b) == n
    with pytest.raises(ValueError, match="negative"):
        cbuffer.uninitialized(-1)
