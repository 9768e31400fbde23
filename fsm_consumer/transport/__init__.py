"""Broker transport.

So far only the sans-IO wire layer: framing, request/response codec,
API version negotiation, SASL mechanisms and the typed errors they raise.
"""

from ._codec import Decoded, RequestCodec
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
from ._framing import DEFAULT_RECEIVE_BUFFER_MAX, FrameReader, encode_frame
from ._sasl import PlainMechanism, SaslMechanism, ScramMechanism
from ._versions import Api, ApiVersionTable, client_version_range, request_class

__all__ = [
    "DEFAULT_RECEIVE_BUFFER_MAX",
    "Api",
    "ApiVersionTable",
    "AuthenticationError",
    "ConnectionLost",
    "CorrelationIdMismatch",
    "Decoded",
    "FrameReader",
    "FrameTooLarge",
    "NodeNotReady",
    "PlainMechanism",
    "ProtocolDecodeError",
    "RequestCodec",
    "RequestTimedOut",
    "SaslMechanism",
    "ScramMechanism",
    "TransportError",
    "UnsupportedVersion",
    "client_version_range",
    "encode_frame",
    "request_class",
]
