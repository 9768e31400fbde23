"""A tiny blocking Kafka request/response helper on top of kafka-python's protocol classes.

One connection per request: the embedded broker only needs a handful of admin
calls (readiness probe, CreateTopics, Metadata), and a fresh socket per call
keeps timeouts and failures trivially contained.
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


def send_request(host: str, port: int, request: Any, response_type: Any, version: int, *, timeout: float = 2.0) -> Any:
    """Send ``request`` encoded at ``version`` and return the decoded response.

    Any socket failure, short read or correlation mismatch becomes
    :class:`BrokerRequestError`; broker error *codes* are left to the caller.
    """
    correlation_id = next(_correlation_ids) & 0x7FFFFFFF
    request.with_header(correlation_id=correlation_id, client_id=_CLIENT_ID)
    payload = request.encode(version=version, header=True, framed=True)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(payload)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            body = _recv_exact(sock, size)
    except OSError as exc:  # includes ConnectionError and socket.timeout
        raise BrokerRequestError(f"{type(request).__name__} v{version} to {host}:{port} failed: {exc}") from exc
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
