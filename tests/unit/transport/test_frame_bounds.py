"""Issue 48, untrusted bytes: the transport's frame reading is bounded.

A size prefix that is negative or above ``receive_buffer_max`` closes that connection with an error naming
the broker, the size and the setting, without allocating a buffer of that size; a frame whose body never
completes (a broker that goes quiet mid-frame, or trickles a byte at a time) is cut off by the request
timeout, and the partial buffer goes with the connection. Loopback peers play the hostile broker: what is
tested is the transport's reaction to bytes, not a broker's behaviour.
"""

from __future__ import annotations

import gc
import logging
import struct
import threading
import time
import tracemalloc
import weakref

import pytest
from fake_broker import default_versions, metadata, triggers, wait_done
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from fsm_consumer.machines import FakeClock
from fsm_consumer.transport import (
    ConnectionLost,
    FrameReader,
    FrameTooLarge,
    RequestTimedOut,
    TransportError,
    _framing,
    encode_frame,
)

LOGGER = "fsm_consumer.transport"
LIMIT = 1 << 20


class _Body(bytearray):
    """A frame body buffer that can be watched with a weak reference (a plain bytearray cannot)."""


@pytest.fixture
def bodies(monkeypatch) -> list[tuple[int, weakref.ref]]:
    """Every frame body FrameReader allocates: its size and a weak reference to it."""
    made: list[tuple[int, weakref.ref]] = []

    def allocate(size: int) -> bytearray:
        body = _Body(size)
        made.append((size, weakref.ref(body)))
        return body

    monkeypatch.setattr(_framing, "_body_buffer", allocate)
    return made


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


# -- the reader: refused before any allocation ---------------------------------------------------


@pytest.mark.parametrize("size", [-1, -(2**31), LIMIT + 1, 2**31 - 1])
@pytest.mark.parametrize("split", [False, True], ids=["whole-prefix", "split-prefix"])
def test_a_size_prefix_out_of_bounds_is_refused_before_any_body_is_allocated(size, split, bodies):
    reader = FrameReader(LIMIT, node_id=3, peer="broker-3:9092")
    prefix = struct.pack(">i", size)
    with pytest.raises(FrameTooLarge) as info:
        if split:  # the prefix in two reads: assembled in the reader's 4-byte scratch, not a body
            assert reader.feed(prefix[:3]) == []
            reader.feed(prefix[3:] + b"\x00" * 64)
        else:
            reader.feed(prefix + b"\x00" * 64)
    assert bodies == [] and reader.room() is None and not reader.partial
    error = info.value
    assert (error.size, error.limit, error.node_id, error.peer) == (size, LIMIT, 3, "broker-3:9092")
    with pytest.raises(FrameTooLarge):  # sticky: the stream cannot be trusted past a bad prefix
        reader.feed(encode_frame(b"ok"))
    assert bodies == []


def test_a_prefix_at_the_limit_is_accepted_and_its_body_allocated(bodies):
    """The control for the test above: the spy does see the reader's allocations."""
    reader = FrameReader(LIMIT)
    assert reader.feed(struct.pack(">i", LIMIT) + b"abc") == []
    assert [size for size, _ in bodies] == [LIMIT] and reader.partial


def test_a_huge_prefix_costs_no_memory_of_its_size():
    reader = FrameReader()  # the default limit, 100 MiB: a 2 GiB prefix must not get near it
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLarge):
            reader.feed(struct.pack(">i", 2**31 - 1) + b"\x00" * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"{peak} bytes allocated to refuse a frame"


def test_the_message_names_the_broker_the_size_the_limit_and_the_setting():
    too_large = FrameTooLarge(2**31 - 1, LIMIT, node_id=3, peer="broker-3:9092")
    text = str(too_large)
    assert text.startswith("[node 3] ") and "broker-3:9092" in text
    assert str(2**31 - 1) in text and str(LIMIT) in text
    assert "raise receive_buffer_max" in text
    negative = str(FrameTooLarge(-7, LIMIT, node_id=3, peer="broker-3:9092"))
    assert negative.startswith("[node 3] ") and "broker-3:9092" in negative and "-7" in negative
    assert "negative" in negative and "receive_buffer_max" in negative
    assert "raise receive_buffer_max" not in negative  # no size would fit a negative one


# -- a connection that reads a bad prefix ------------------------------------------------------------


@pytest.mark.parametrize("size", [-1, LIMIT + 1, 2**31 - 1])
def test_a_bad_prefix_closes_that_connection_and_fails_its_requests(size, fake_broker, transports, caplog, bodies):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    hostile = [True]

    def handler(api_key, version, request):
        if api_key == ApiKey.Metadata and hostile[0]:
            return struct.pack(">i", size) + b"\x00" * 16  # then whatever: the prefix says it all
        return None

    broker = fake_broker(handler, node_id=1)
    t = transports({"bootstrap_servers": broker.address, "receive_buffer_max": LIMIT, "reconnect_backoff_ms": 10})
    t.update_brokers({1: ("127.0.0.1", broker.port)})
    doomed = [t.send(metadata("a"), node=1), t.send(metadata("b"), node=1)]  # both in flight on it
    wait_done(t, *doomed)

    for p in doomed:
        assert isinstance(p.error, FrameTooLarge) and isinstance(p.error, TransportError)
        assert p.error.size == size and p.error.node_id == 1
        text = str(p.error)
        assert text.startswith("[node 1] ") and f"127.0.0.1:{broker.port}" in text
        assert str(size) in text and str(LIMIT) in text and "receive_buffer_max" in text
    assert doomed[0].error is not doomed[1].error  # one copy per request: no shared traceback
    assert all(s <= LIMIT for s, _ in bodies), "a buffer of the bad size was allocated"

    conn = t.connection(1)
    assert conn is not None and conn.sock is None and t.connection_state(1) == "backoff"
    assert triggers(t, 1)[-1] == "io_error"
    [warning] = warnings(caplog)  # said once, as a WARNING, with the broker's address
    assert warning.startswith(f"connection to node 1 (127.0.0.1:{broker.port}) failed: frame size {size}")
    assert t.node_states()[1]["failures"] == 1

    hostile[0] = False  # not reused: the next request gets a connection of its own
    again = t.send(metadata("c"), node=1)
    wait_done(t, again)
    assert again.error is None and broker.accepted == 2


# -- a frame that never completes ---------------------------------------------------------------------


def _read_request(client) -> tuple[int, int, int] | None:
    """The next request's (api_key, version, correlation_id) from a blocking ``client``."""
    prefix = _recv_exact(client, 4)
    payload = prefix and _recv_exact(client, struct.unpack(">i", prefix)[0])
    return struct.unpack_from(">hhi", payload) if payload else None


def _recv_exact(client, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        try:
            chunk = client.recv(size - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


class SlowBroker:
    """Answers ApiVersions, then answers Metadata with a frame of ``size`` bytes of which it sends the
    prefix and a few bytes, then ``trickle``: one more byte every 50 ms, or (False) nothing. ``cut`` is
    set once the client has dropped the connection."""

    def __init__(self, scripted_peer, *, trickle: bool, size: int = 500_000, unasked: bool = False) -> None:
        self.trickle, self.size, self.unasked = trickle, size, unasked
        self.cut = threading.Event()
        self.peer = scripted_peer(self._script)

    @staticmethod
    def _api_versions(client, version: int, correlation_id: int) -> None:
        entry = ApiVersionsResponse.ApiVersion
        answer = ApiVersionsResponse[version](
            error_code=0,
            throttle_time_ms=0,
            api_keys=[entry(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in default_versions().items()],
        )
        answer.with_header(correlation_id=correlation_id)
        client.sendall(bytes(answer.encode(header=True, framed=True)))

    def _script(self, peer, client) -> None:
        client.settimeout(5)
        api_key, version, correlation_id = _read_request(client)
        assert api_key == ApiKey.ApiVersions
        self._api_versions(client, version, correlation_id)
        request = _read_request(client)
        if self.unasked:  # the request answered whole: then a frame begins that nothing asked for
            assert request is not None and request[0] == ApiKey.ApiVersions
            self._api_versions(client, request[1], request[2])
            time.sleep(0.1)
            client.sendall(struct.pack(">ii", self.size, 12345) + b"\x00" * 4)
        else:
            assert request is not None and request[0] == ApiKey.Metadata
            client.sendall(struct.pack(">ii", self.size, request[2]) + b"\x00" * 4)
        client.settimeout(0.05)
        while not peer.stopped:
            try:
                if self.trickle:
                    time.sleep(0.05)
                    client.send(b"\x00")
                elif client.recv(1) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        self.cut.set()


def _poll_until(t, condition, what: str, timeout: float = 2.0) -> None:
    """Poll in real time (the bytes are real) until ``condition()``; a fake clock stays put."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"not {what} within {timeout} s: {t!r}"
        t.poll(20)


@pytest.mark.parametrize("trickle", [True, False], ids=["trickling", "stalled"])
def test_a_frame_that_never_completes_is_cut_off_by_the_request_timeout(
    trickle, scripted_peer, transports, caplog, bodies
):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    broker = SlowBroker(scripted_peer, trickle=trickle)
    clock = FakeClock(1000.0)
    t = transports({"bootstrap_servers": broker.peer.address, "receive_buffer_max": LIMIT}, clock=clock)
    p = t.send(metadata("a"), timeout_ms=1000)  # its deadline: 2000 on the fake clock
    behind = t.send(metadata("b"), timeout_ms=60_000)  # pipelined behind it on the same connection

    def mid_frame() -> bool:
        conn = t.connection(-1)
        return conn is not None and conn._reader.partial

    _poll_until(t, mid_frame, "mid-frame")
    conn = t.connection(-1)
    assert [size for size, _ in bodies] == [broker.size]  # within bounds: allocated once, filled in place
    body = bodies[0][1]

    def room() -> int:
        return len(conn._reader.room())

    left = room()
    for _ in range(3):  # 900 ms of the 1000 pass; bytes keep coming (or not), the deadline stays put
        clock.advance(300)
        if trickle:
            _poll_until(t, lambda before=left: room() < before, "another byte")
            left = room()
        else:
            t.poll(50)
        assert not p.done and conn.sock is not None
    if trickle:
        assert room() <= broker.size - 8 - 3  # the correlation id, 4 bytes, then a byte a step at least
    else:
        assert room() == broker.size - 8

    clock.advance(100)  # the deadline
    t.poll(0)
    assert isinstance(p.error, RequestTimedOut) and p.error.node_id == -1
    assert isinstance(behind.error, ConnectionLost) and "recycled" in str(behind.error)
    assert conn.sock is None and t.connection_state(-1) == "backoff"
    assert triggers(t, -1)[-1] == "io_error"
    assert not conn._reader.partial
    gc.collect()
    assert body() is None, "the unfinished frame's buffer outlived its connection"
    [warning] = warnings(caplog)
    assert "node -1" in warning and "timed out" in warning
    assert broker.cut.wait(2), "the broker was not cut off"


def test_a_frame_nothing_asked_for_closes_the_connection_at_once(scripted_peer, transports, caplog, bodies):
    # with no request in flight no deadline would ever end it: bytes nobody asked for put the stream out of step
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    broker = SlowBroker(scripted_peer, trickle=True, unasked=True)
    t = transports({"bootstrap_servers": broker.peer.address, "receive_buffer_max": LIMIT}, clock=FakeClock(1000.0))
    asked = t.send(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), timeout_ms=60_000)
    _poll_until(t, lambda: asked.done, "answered")
    assert asked.error is None
    conn = t.connection(-1)
    _poll_until(t, lambda: conn.sock is None, "closed")
    assert t.connection_state(-1) == "backoff" and not conn._reader.partial
    gc.collect()
    assert all(body() is None for _, body in bodies), "the unasked frame's buffer outlived its connection"
    [warning] = warnings(caplog)
    assert "no request in flight" in warning and "node -1" in warning
    assert broker.cut.wait(2), "the broker was not cut off"
