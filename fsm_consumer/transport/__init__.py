"""Broker transport.

The sans-IO wire layer (framing, request/response codec, API version
negotiation, SASL mechanisms, typed errors) and the I/O on top of it:
``KafkaTransport`` (non-blocking sockets, one ``connection`` machine per
node) and ``FaultyTransport`` (fault injection for tests).
"""

from ._backoff import ReconnectBackoff
from ._base import Pending, Transport
from ._codec import Decoded, RequestCodec
from ._connection import Connection
from ._errors import (
    AuthenticationError,
    ConnectionLost,
    CorrelationIdMismatch,
    FrameTooLarge,
    NodeNotReady,
    ProtocolDecodeError,
    RequestTimedOut,
    TransportError,
    UnsupportedVersion,
)
from ._faulty import FaultyTransport
from ._framing import DEFAULT_RECEIVE_BUFFER_MAX, FrameReader, encode_frame
from ._kafka import KafkaTransport
from ._sasl import OAuthBearerMechanism, PlainMechanism, SaslMechanism, ScramMechanism
from ._settings import KafkaSettings, parse_servers
from ._tls import SslHandshakeError, build_ssl_context
from ._versions import Api, ApiVersionTable, client_version_range, request_class
from ._waker import Waker

__all__ = [
    "DEFAULT_RECEIVE_BUFFER_MAX",
    "Api",
    "ApiVersionTable",
    "AuthenticationError",
    "Connection",
    "ConnectionLost",
    "CorrelationIdMismatch",
    "Decoded",
    "FrameReader",
    "FaultyTransport",
    "FrameTooLarge",
    "KafkaSettings",
    "KafkaTransport",
    "NodeNotReady",
    "OAuthBearerMechanism",
    "Pending",
    "PlainMechanism",
    "ProtocolDecodeError",
    "ReconnectBackoff",
    "RequestCodec",
    "RequestTimedOut",
    "SaslMechanism",
    "ScramMechanism",
    "SslHandshakeError",
    "Transport",
    "TransportError",
    "UnsupportedVersion",
    "Waker",
    "build_ssl_context",
    "client_version_range",
    "encode_frame",
    "parse_servers",
    "request_class",
]
