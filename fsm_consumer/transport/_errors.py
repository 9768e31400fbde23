"""Typed failures of the transport layer.

Every error raised by the wire layer is a ``TransportError`` so the
connection state machine can catch one type and close the connection.
``node_id`` is the broker the error belongs to when the raiser knows it;
the pure SASL mechanisms do not, so the transport may set it afterwards.
"""

from __future__ import annotations

import copy
from typing import Any


class TransportError(Exception):
    """Base of every transport failure; the connection is unusable afterwards."""

    def __init__(self, message: str, *, node_id: int | None = None) -> None:
        super().__init__(message)
        self.node_id = node_id

    def __str__(self) -> str:
        message = super().__str__()
        if self.node_id is None:
            return message
        return f"[node {self.node_id}] {message}"

    def __reduce__(self):
        # Subclasses take keyword-only or extra arguments, which the default
        # Exception pickling (cls(*args)) cannot replay.
        return _restore, (type(self), self.args, self.__dict__)


def _restore(cls: type[TransportError], args: tuple, state: dict) -> TransportError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class FrameTooLarge(TransportError):
    """A size prefix was negative or above ``receive_buffer_max``; ``peer`` is the broker's host:port when
    known. The message says whether raising the setting can help: for a negative size it cannot."""

    def __init__(self, size: int, limit: int, *, node_id: int | None = None, peer: str | None = None) -> None:
        where = f" from {peer}" if peer else ""
        if size < 0:
            message = (
                f"frame size {size}{where} is negative (receive_buffer_max is {limit}): the stream is out of step "
                f"or the listener does not speak Kafka"
            )
        else:
            message = (
                f"frame size {size}{where} is above receive_buffer_max ({limit}): raise receive_buffer_max if "
                f"responses that large are expected; else the listener does not speak Kafka (or not over this "
                f"security_protocol)"
            )
        super().__init__(message, node_id=node_id)
        self.size = size
        self.limit = limit
        self.peer = peer


class CorrelationIdMismatch(TransportError):
    """A response did not answer the oldest in-flight request.

    ``expected`` is None when a response arrived with nothing in flight.
    """

    def __init__(self, expected: int | None, received: int | None, *, node_id: int | None = None) -> None:
        if expected is None:
            message = f"response with correlation id {received} but nothing in flight"
        else:
            message = f"expected correlation id {expected}, received {received}"
        super().__init__(message, node_id=node_id)
        self.expected = expected
        self.received = received


class ProtocolDecodeError(TransportError):
    """A frame's header or body could not be decoded (truncated or garbage)."""


class UnsupportedVersion(TransportError):
    """Client and broker share no version of an API.

    ``retry_version`` is set when the broker rejected our ApiVersions request
    version and told us which one it does speak.
    """

    def __init__(
        self, message: str, *, api_key: int, node_id: int | None = None, retry_version: int | None = None
    ) -> None:
        super().__init__(message, node_id=node_id)
        self.api_key = api_key
        self.retry_version = retry_version


class AuthenticationError(TransportError):
    """SASL or TLS (SslHandshakeError) authentication failed: a setting is wrong, and reconnecting
    will not fix it. The message says which setting to check; it never includes the password."""


class ConnectionLost(TransportError):
    """The socket closed or failed while the connection was in use."""


class RequestTimedOut(TransportError):
    """No response arrived within the request's deadline."""


class NodeNotReady(TransportError):
    """A request was issued to a node that is not connected and ready."""


def clone_error(exc: Exception) -> Exception:
    """A copy of ``exc`` (its cause kept) for one request: raising one shared instance in
    several places would chain unrelated tracebacks onto it."""
    error = copy.copy(exc)
    error.__cause__ = exc.__cause__
    return error


# What a handshake_timed_out interrupted, for its message.
_HANDSHAKE_STEPS = {
    "tls_handshake": "the TLS handshake",
    "api_versions": "the ApiVersions handshake",
    "authenticating": "SASL authentication",
}


def timeout_cause(machine: Any, peer: str) -> TransportError:
    """Why a connection machine entered backoff when no I/O outcome said why: one of its timeouts (the
    transition just taken says which)."""
    record = machine.log[-1] if machine.log else None
    if record is not None and record.trigger == "connect_timed_out":
        waited = machine.durations["connect_timeout"]
        return ConnectionLost(f"connect to {peer} timed out after {waited:g} ms")
    if record is not None and record.trigger == "handshake_timed_out":
        waited = machine.durations["handshake_timeout"]
        step = _HANDSHAKE_STEPS.get(record.source, record.source)
        return ConnectionLost(f"{peer} did not finish {step} within {waited:g} ms")
    return ConnectionLost("connection closed")
