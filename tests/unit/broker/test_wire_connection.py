"""_wire.Connection's framing against a loopback socket server thread that answers with canned, correctly framed
responses: several requests over one socket (a share session's ShareFetch and ShareAcknowledge must share
the connection that opened the session), the correlation id checked, every failure a BrokerRequestError that
closes the connection. No broker: the share protocol itself is proven in tests/integration."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from fsm_consumer.broker import BrokerRequestError
from fsm_consumer.broker._wire import Connection, send_request
from fsm_consumer.protocol import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)

TOPIC = uuid.UUID("5a3c1e2f-8b4d-4c6e-9f10-a1b2c3d4e5f6")
MEMBER = "kJ0Yq3vVQ8G7x2b1nM4pZw"

#: (api key, api version, correlation id, request bytes after the size) -> the bytes to send back, or None
Answer = Callable[[int, int, int, bytes], bytes | None]


class HangUp(bytes):
    """An answer after which the broker closes the connection."""


def framed(response: Any, correlation_id: int) -> bytes:
    response.with_header(correlation_id=correlation_id)
    data: bytes = response.encode(header=True, framed=True)  # at the version the response was built with
    return data


def share_fetch(epoch: int) -> Any:
    return ShareFetchRequest(
        version=2,
        group_id="orders-share",
        member_id=MEMBER,
        share_session_epoch=epoch,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=500,
        batch_size=500,
        topics=[ShareFetchRequest.FetchTopic(topic_id=TOPIC, partitions=[])],
        forgotten_topics_data=[],
    )


def fetched(epoch_seen: int) -> Any:
    return ShareFetchResponse(
        version=2,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        acquisition_lock_timeout_ms=30000 + epoch_seen,  # tells the test which request this answered
        responses=[],
        node_endpoints=[],
    )


def acknowledged() -> Any:
    return ShareAcknowledgeResponse(
        version=2,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        acquisition_lock_timeout_ms=15000,
        responses=[],
        node_endpoints=[],
    )


def share_answer(key: int, version: int, correlation_id: int, payload: bytes) -> bytes | None:
    """A broker that answers ShareFetch (with the session epoch it read) and ShareAcknowledge."""
    if key == ShareFetchRequest.API_KEY:
        request = ShareFetchRequest.decode(payload, version=version, header=True)
        return framed(fetched(request.share_session_epoch), correlation_id)
    if key == ShareAcknowledgeRequest.API_KEY:
        return framed(acknowledged(), correlation_id)
    if key == ApiVersionsRequest.API_KEY:
        return framed(ApiVersionsResponse(version=version, error_code=0, api_keys=[]), correlation_id)
    raise AssertionError(f"unexpected api key {key}")


class CannedBroker:
    """A listening socket on 127.0.0.1 whose thread reads size-prefixed requests and writes what ``answer``
    returns (None: nothing, the socket stays open; a HangUp: that, then it closes the socket); it records each
    connection and each request's header."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.accepted = 0
        self.requests: list[tuple[int, int, int, int]] = []  # (connection number, api key, version, correlation id)
        self.eof = threading.Event()  # a client closed its side
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            self.accepted += 1
            threading.Thread(target=self._converse, args=(conn, self.accepted), daemon=True).start()

    def _converse(self, conn: socket.socket, number: int) -> None:
        with conn:
            while True:
                head = self._read(conn, 4)
                if head is None:
                    self.eof.set()
                    return
                payload = self._read(conn, struct.unpack(">i", head)[0])
                assert payload is not None
                key, version, correlation_id = struct.unpack(">hhi", payload[:8])  # request header v1/v2
                self.requests.append((number, key, version, correlation_id))
                reply = self.answer(key, version, correlation_id, payload)
                if reply is not None:
                    conn.sendall(reply)
                if isinstance(reply, HangUp):
                    return

    @staticmethod
    def _read(conn: socket.socket, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            try:
                chunk = conn.recv(size - len(data))
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def broker_with() -> Iterator[Callable[[Answer], CannedBroker]]:
    started: list[CannedBroker] = []

    def start(answer: Answer) -> CannedBroker:
        started.append(CannedBroker(answer))
        return started[-1]

    yield start
    for b in started:
        b.close()


def test_a_share_session_goes_over_one_connection(broker_with: Callable[[Answer], CannedBroker]) -> None:
    broker = broker_with(share_answer)
    with Connection("127.0.0.1", broker.port, timeout=2.0) as conn:
        opened = conn.request(share_fetch(0), 2)  # the response class: the registry's, by API key
        continued = conn.request(share_fetch(1), 2, timeout=1.0)
        ack = conn.request(
            ShareAcknowledgeRequest(version=2, group_id="orders-share", member_id=MEMBER, share_session_epoch=2),
            2,
        )
        assert not conn.closed
    assert conn.closed
    assert isinstance(opened, ShareFetchResponse) and isinstance(continued, ShareFetchResponse)
    assert (opened.acquisition_lock_timeout_ms, continued.acquisition_lock_timeout_ms) == (30000, 30001)
    assert isinstance(ack, ShareAcknowledgeResponse) and ack.acquisition_lock_timeout_ms == 15000
    # one connection, three requests in order, each answered under its own correlation id
    assert broker.accepted == 1
    assert [(n, key, v) for n, key, v, _ in broker.requests] == [(1, 78, 2), (1, 78, 2), (1, 79, 2)]
    ids = [c for *_, c in broker.requests]
    assert len(set(ids)) == 3
    assert [opened.header.correlation_id, continued.header.correlation_id, ack.header.correlation_id] == ids
    assert broker.eof.wait(2.0)  # leaving the block closed the socket


def test_an_explicit_response_type(broker_with: Callable[[Answer], CannedBroker]) -> None:
    broker = broker_with(share_answer)
    with Connection("127.0.0.1", broker.port) as conn:
        response = conn.request(share_fetch(0), 2, response_type=ShareFetchResponse)
    assert response.acquisition_lock_timeout_ms == 30000


def test_a_mismatched_correlation_id_closes_the_connection(broker_with: Callable[[Answer], CannedBroker]) -> None:
    broker = broker_with(lambda key, v, cid, payload: framed(fetched(0), cid + 1))
    conn = Connection("127.0.0.1", broker.port)
    with pytest.raises(BrokerRequestError, match="correlation id .* does not match request"):
        conn.request(share_fetch(0), 2)
    assert conn.closed
    with pytest.raises(BrokerRequestError, match="is closed"):
        conn.request(share_fetch(1), 2)
    assert len(broker.requests) == 1  # nothing more was sent
    assert broker.eof.wait(2.0)


def test_a_frame_cut_short_is_an_error(broker_with: Callable[[Answer], CannedBroker]) -> None:
    def half_then_hang_up(key: int, v: int, cid: int, payload: bytes) -> bytes:
        whole = framed(fetched(0), cid)
        return HangUp(whole[: len(whole) // 2])

    broker = broker_with(half_then_hang_up)
    conn = Connection("127.0.0.1", broker.port, timeout=2.0)
    with pytest.raises(
        BrokerRequestError, match=r"ShareFetchRequest v2 to 127.0.0.1:\d+ failed: connection closed after"
    ):
        conn.request(share_fetch(0), 2)
    assert conn.closed


def test_a_peer_that_hangs_up_is_an_error(broker_with: Callable[[Answer], CannedBroker]) -> None:
    broker = broker_with(lambda key, v, cid, payload: HangUp())
    conn = Connection("127.0.0.1", broker.port, timeout=2.0)
    with pytest.raises(BrokerRequestError, match="connection closed after 0 of 4 bytes"):
        conn.request(share_fetch(0), 2)
    assert conn.closed


def test_no_answer_times_out(broker_with: Callable[[Answer], CannedBroker]) -> None:
    broker = broker_with(lambda key, v, cid, payload: None)
    conn = Connection("127.0.0.1", broker.port, timeout=5.0)
    started = time.monotonic()
    with pytest.raises(BrokerRequestError, match="timed out"):
        conn.request(share_fetch(0), 2, timeout=0.2)  # the request's timeout, not the connection's
    assert time.monotonic() - started < 2.0
    assert conn.closed


def test_an_undecodable_answer_is_an_error(broker_with: Callable[[Answer], CannedBroker]) -> None:
    def garbage(key: int, v: int, cid: int, payload: bytes) -> bytes:
        body = struct.pack(">i", cid) + b"\x00" + b"\xff\xff"  # header v1, then a truncated body
        return struct.pack(">i", len(body)) + body

    broker = broker_with(garbage)
    conn = Connection("127.0.0.1", broker.port)
    with pytest.raises(BrokerRequestError, match="could not decode ShareFetchResponse"):
        conn.request(share_fetch(0), 2)
    assert conn.closed


def test_connect_failure_is_a_broker_request_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    # nothing listens there any more
    with pytest.raises(BrokerRequestError, match=f"could not connect to 127.0.0.1:{port}"):
        Connection("127.0.0.1", port, timeout=1.0)


def test_send_request_still_one_shot(broker_with: Callable[[Answer], CannedBroker]) -> None:
    broker = broker_with(share_answer)
    for _ in range(2):
        response = send_request("127.0.0.1", broker.port, ApiVersionsRequest(), ApiVersionsResponse, 0)
        assert response.error_code == 0
    assert broker.accepted == 2
