"""Request encoding and response decoding for one broker connection.

Kafka answers requests on a connection strictly in the order they were
sent, so the codec keeps a FIFO of in-flight requests: the next response
must carry the oldest correlation id, and that request's api key and
version say how to decode it (responses do not name their own type).

Encoding and decoding are kafka-python's (``kafka.protocol``); this module
only adds correlation, the ApiVersions header rule, strict bounds checking
and typed errors.
"""

from __future__ import annotations

import collections
import functools
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from kafka.protocol.api_header import ResponseClassRegistry, ResponseHeader
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsResponse

from ._errors import CorrelationIdMismatch, ProtocolDecodeError
from ._fetch_views import fetch_body_decoder

__all__ = ["Decoded", "RequestCodec"]

_CORRELATION_ID = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
_UNSUPPORTED_VERSION = 35  # UnsupportedVersionError.errno

# (data, pos) -> (obj, end_pos); kafka-python's compiled decoders.
_DecodeFn = Callable[[Any, int], tuple[Any, int]]


class Decoded(NamedTuple):
    correlation_id: int
    response: ApiMessage
    request: ApiMessage


class _Decoders(NamedTuple):
    header: _DecodeFn
    body: _DecodeFn


class _InFlight(NamedTuple):
    correlation_id: int
    request: ApiMessage
    decoders: _Decoders


@functools.cache
def _decoders(versioned_response_cls: type[ApiMessage]) -> _Decoders:
    """Compiled header and body decoders for one response type and version.

    We call kafka-python's compiled decoders directly instead of
    ``ResponseClass.decode(..., header=True)`` because that entry point
    (a) copies the whole frame into a BytesIO just to parse the header and
    (b) discards the end position, so a truncated body goes unnoticed: a
    length-prefixed field sliced past the end of a memoryview just comes
    back short.
    """
    version = versioned_response_cls._class_version
    response_cls = versioned_response_cls[None]  # the primary class, as kafka-python decodes
    api_key = response_cls.API_KEY
    flexible = response_cls.flexible_version_q(version)
    # ApiVersions responses always use header v0, even for flexible body
    # versions (v3+): a client that does not know the broker's versions yet
    # must be able to read the header (KIP-511). kafka-python encodes this in
    # ApiVersionsResponse.parse_header/encode_header.
    flexible_header = flexible and api_key != ApiKey.ApiVersions
    header_version = 1 if flexible_header else 0
    header = ResponseHeader._struct.compiled_decode_from(
        header_version, compact=False, tagged=flexible_header, data_class=ResponseHeader
    )
    body = fetch_body_decoder(response_cls, version, flexible) if api_key == ApiKey.Fetch else None
    if body is None:
        body = response_cls._struct.compiled_decode_from(
            version, compact=flexible, tagged=flexible, data_class=response_cls
        )
    return _Decoders(header, body)


def prepare(request_cls: type[ApiMessage], version: int) -> None:
    """Compile kafka-python's encoder of ``request_cls`` at ``version`` and the decoders of its response now. Each
    is compiled at its first use (2-8 ms of codegen), which would otherwise fall on the first request of its kind:
    a share member's first ShareAcknowledge goes out in the middle of its first records."""
    flexible = request_cls.flexible_version_q(version)
    request_cls._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)
    response_cls = ResponseClassRegistry._response_class_registry.get(request_cls.API_KEY)
    if response_cls is not None:
        _decoders(response_cls[version])


class RequestCodec:
    """Encodes requests and correlates/decodes their responses; one per connection.

    After any TransportError from ``decode`` the connection's byte stream is
    no longer trustworthy: close it and fail what ``drain()`` returns.
    """

    __slots__ = ("_node_id", "_next_id", "_in_flight")

    def __init__(self, *, node_id: int | None = None) -> None:
        self._node_id = node_id
        self._next_id = 0
        self._in_flight: collections.deque[_InFlight] = collections.deque()

    def __len__(self) -> int:
        """Number of requests awaiting a response."""
        return len(self._in_flight)

    def encode(self, request: ApiMessage, client_id: str | None) -> tuple[int, bytearray]:
        """Size-prefixed bytes for ``request`` (its API_VERSION must be set).

        Returns (correlation_id, data). The request is registered as in
        flight unless it expects no response (Produce with acks=0). The
        header version (flexible or not) follows the request's version, as in
        kafka-python. ``data`` is kafka-python's bytearray; converting it to
        bytes would only add a copy.
        """
        if not isinstance(request, ApiMessage) or not request.is_request():
            raise TypeError(f"not a kafka-python request: {request!r}")
        version = request.API_VERSION
        if version is None:
            raise ValueError(f"{request.name} has no API_VERSION; pick one first")
        correlation_id = self._next_id = (self._next_id + 1) % 2**31
        request.with_header(correlation_id=correlation_id, client_id=client_id)
        response_cls = request.header.get_response_class()
        if response_cls is None:
            raise TypeError(f"kafka-python has no response class for {request.name} v{version}")
        decoders = _decoders(response_cls)
        data = request.encode(header=True, framed=True)
        if request.expect_response():
            self._in_flight.append(_InFlight(correlation_id, request, decoders))
        return correlation_id, data

    def decode(self, frame: bytes | bytearray | memoryview) -> Decoded:
        """Decode one frame payload (no size prefix) as the oldest in-flight response.

        Raises CorrelationIdMismatch if it answers anything else (or nothing
        is in flight) and ProtocolDecodeError if it does not parse exactly.
        """
        if len(frame) < 4:
            raise ProtocolDecodeError(f"{len(frame)}-byte frame has no correlation id", node_id=self._node_id)
        received = _CORRELATION_ID.unpack_from(frame, 0)[0]
        if not self._in_flight:
            raise CorrelationIdMismatch(None, received, node_id=self._node_id)
        expected, request, decoders = self._in_flight[0]
        if received != expected:
            raise CorrelationIdMismatch(expected, received, node_id=self._node_id)
        # The request is answered from here on, whether or not the body parses.
        self._in_flight.popleft()
        try:
            header, pos = decoders.header(frame, 0)
            body = decoders.body
            if request.API_KEY == ApiKey.ApiVersions and _ERROR_CODE.unpack_from(frame, pos)[0] == _UNSUPPORTED_VERSION:
                # A broker that rejects our ApiVersions version answers in v0 so that we can read which
                # versions it does support; any other error (INVALID_REQUEST) comes in the version asked.
                body = _decoders(ApiVersionsResponse[0]).body
            response, end = body(frame, pos)
        except Exception as exc:  # any parse failure: struct.error, IndexError, ValueError...
            raise ProtocolDecodeError(
                f"cannot decode the answer to {request.name} v{request.API_VERSION} "
                f"(correlation id {expected}): {type(exc).__name__}: {exc}",
                node_id=self._node_id,
            ) from exc
        if end != len(frame):
            raise ProtocolDecodeError(
                f"the answer to {request.name} v{request.API_VERSION} "
                f"(correlation id {expected}) "
                f"{'is truncated' if end > len(frame) else 'has trailing bytes'}: "
                f"parsed {end} of {len(frame)} bytes",
                node_id=self._node_id,
            )
        response._header = header  # as kafka-python's decode(header=True) does
        return Decoded(expected, response, request)

    def drain(self) -> list[tuple[int, ApiMessage]]:
        """Forget every in-flight request and return them, oldest first.

        For the transport to fail them when the connection closes.
        """
        drained = [(entry.correlation_id, entry.request) for entry in self._in_flight]
        self._in_flight.clear()
        return drained
