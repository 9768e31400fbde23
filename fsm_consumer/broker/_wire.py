"""A tiny blocking Kafka request/response helper on top of kafka-python's protocol classes.

``send_request``: one connection per request. The embedded broker only needs a handful of admin
calls (readiness probe, CreateTopics, Metadata), and a fresh socket per call keeps timeouts and
failures trivially contained.

``Connection``: one socket for several requests, for what the broker ties to a connection: a share
session (KIP-932) lives on the connection whose ShareFetch opened it, so the next ShareFetch or
ShareAcknowledge of that session must go over the same socket.
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Mapping
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from ._errors import BrokerRequestError

_CLIENT_ID = "fsm-consumer-embedded-broker"
_correlation_ids = itertools.count(1)

#: api_key -> (min_version, max_version), as the broker advertised them.
ApiVersionTable = Mapping[int, tuple[int, int]]


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(chunks)} of {size} bytes")
        chunks += chunk
    return bytes(chunks)


def _frame(request: Any, version: int, client_id: str) -> tuple[int, bytes]:
    """``request`` encoded at ``version`` with a fresh correlation id, size-prefixed: (correlation id, bytes)."""
    correlation_id = next(_correlation_ids) & 0x7FFFFFFF
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return correlation_id, request.encode(version=version, header=True, framed=True)


def _read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    return _recv_exact(sock, size)


def _decode(request: Any, response_type: Any, version: int, body: bytes, correlation_id: int) -> Any:
    """The response in ``body``, checked to answer the request sent with ``correlation_id``."""
    try:
        response = response_type.decode(body, version=version, header=True)
    except Exception as exc:  # struct.error, ValueError, ...: the codec has no common base
        raise BrokerRequestError(
            f"could not decode {response_type.__name__} v{version} ({len(body)} bytes): {exc}"
        ) from exc
    got = response.header.correlation_id
    if got != correlation_id:
        raise BrokerRequestError(
            f"{type(request).__name__}: correlation id {got} does not match request {correlation_id}"
        )
    return response


def send_request(host: str, port: int, request: Any, response_type: Any, version: int, *, timeout: float = 2.0) -> Any:
    """Send ``request`` encoded at ``version`` and return the decoded response.

    Any socket failure, short read or correlation mismatch becomes
    :class:`BrokerRequestError`; broker error *codes* are left to the caller.
    """
    correlation_id, payload = _frame(request, version, _CLIENT_ID)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(payload)
            body = _read_frame(sock)
    except OSError as exc:  # includes ConnectionError and socket.timeout
        raise BrokerRequestError(f"{type(request).__name__} v{version} to {host}:{port} failed: {exc}") from exc
    return _decode(request, response_type, version, body, correlation_id)


class Connection:
    """One blocking connection to a broker, for requests that must share a socket.

    A share session (KIP-932) belongs to the connection that opened it: a ShareFetch with session
    epoch 0 opens it, and the later ShareFetch/ShareAcknowledge requests of that session are only
    valid on the same connection. ``request`` sends one request and reads its response before the
    next one goes out (no pipelining; not for use by several threads at once).

    Any failure (connect, send, a short read, a timeout, an undecodable frame, a correlation id
    that does not match) becomes :class:`BrokerRequestError` and closes the connection: the byte
    stream can no longer be trusted to be in step, and a session on it is gone with it. Broker
    error *codes* are left to the caller.
    """

    def __init__(self, host: str, port: int, *, timeout: float = 2.0, client_id: str = _CLIENT_ID) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self._client_id = client_id
        try:
            self._sock: socket.socket | None = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise BrokerRequestError(f"could not connect to {host}:{port}: {exc}") from exc

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._sock is None

    def request(self, request: Any, version: int, *, timeout: float | None = None, response_type: Any = None) -> Any:
        """Send ``request`` encoded at ``version`` on this connection and return its decoded response.

        ``timeout`` bounds this exchange (default: the connection's); a ShareFetch that may wait
        ``max_wait_ms`` on the broker needs more than that. ``response_type`` defaults to the
        response class registered for the request's API key (kafka-python's, and those of
        :mod:`fsm_consumer.protocol`).
        """
        sock = self._sock
        if sock is None:
            raise BrokerRequestError(f"{type(request).__name__}: the connection to {self.host}:{self.port} is closed")
        correlation_id, payload = _frame(request, version, self._client_id)
        if response_type is None:
            response_type = request.header.get_response_class()  # kafka-python's registry, by API key
            if response_type is None:
                raise BrokerRequestError(f"no response class is known for {type(request).__name__}")
        try:
            try:
                sock.settimeout(self.timeout if timeout is None else timeout)
                sock.sendall(payload)
                body = _read_frame(sock)
            except OSError as exc:  # includes ConnectionError and socket.timeout
                raise BrokerRequestError(
                    f"{type(request).__name__} v{version} to {self.host}:{self.port} failed: {exc}"
                ) from exc
            return _decode(request, response_type, version, body, correlation_id)
        except BrokerRequestError:
            self.close()
            raise

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


def fetch_api_versions(host: str, port: int, *, timeout: float = 0.5) -> dict[int, tuple[int, int]]:
    """Ask the broker which API versions it serves.

    Uses ApiVersions v0: every Kafka-compatible broker must answer it, whatever
    else it supports, which is what makes it a good readiness probe.
    """
    response = send_request(host, port, ApiVersionsRequest(), ApiVersionsResponse, 0, timeout=timeout)
    if response.error_code != 0:
        raise BrokerRequestError(f"ApiVersions returned error code {response.error_code}")
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def pick_version(api_versions: ApiVersionTable, request_type: Any) -> int:
    """Highest version both the broker and kafka-python's class support."""
    key = request_type.API_KEY
    if key not in api_versions:
        raise BrokerRequestError(f"broker does not serve {request_type.__name__} (api key {key})")
    low, high = api_versions[key]
    version: int = min(high, request_type.max_version)
    if version < low:
        raise BrokerRequestError(
            f"no common {request_type.__name__} version: broker {low}-{high}, client up to {request_type.max_version}"
        )
    return version
