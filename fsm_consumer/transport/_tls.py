"""TLS: the client SSLContext from config keys, one non-blocking handshake step, and what a
failed handshake means for the user (what failed, and which setting fixes it)."""

from __future__ import annotations

import socket
import ssl
from typing import Literal

from ._errors import AuthenticationError, ConnectionLost

__all__ = ["SslHandshakeError", "build_ssl_context", "handshake_failure", "handshake_step", "silent_listener", "wrap"]

# OpenSSL's reasons when the peer's bytes are not TLS records at all (a plaintext listener).
_NOT_TLS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "RECORD_LAYER_FAILURE",
        "PACKET_LENGTH_TOO_LONG",
        "HTTP_REQUEST",
        "HTTPS_PROXY_REQUEST",
        "UNKNOWN_PROTOCOL",
        "RECORD_TOO_LONG",
        "BAD_PACKET_LENGTH",
    }
)
# ... when the broker refused the client's certificate (or the lack of one).
_CLIENT_CERT_REFUSED = frozenset(
    {
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "TLSV1_ALERT_ACCESS_DENIED",
        "PEER_DID_NOT_RETURN_A_CERTIFICATE",
    }
)
# ... when the two sides share no protocol version or cipher suite.
_NOTHING_IN_COMMON = frozenset(
    {
        "SSLV3_ALERT_HANDSHAKE_FAILURE",
        "NO_PROTOCOLS_AVAILABLE",
        "UNSUPPORTED_PROTOCOL",
        "TLSV1_ALERT_PROTOCOL_VERSION",
        "NO_SHARED_CIPHER",
        "NO_CIPHERS_AVAILABLE",
        "TLSV1_ALERT_INSUFFICIENT_SECURITY",
    }
)
# X509_V_ERR_* codes of SSLCertVerificationError.verify_code
_NAME_MISMATCH = {62, 64}  # HOSTNAME_MISMATCH, IP_ADDRESS_MISMATCH
_NOT_VALID_NOW = {9, 10}  # CERT_NOT_YET_VALID, CERT_HAS_EXPIRED


class SslHandshakeError(AuthenticationError):
    """The TLS handshake failed: untrusted certificate, wrong host name, no common protocol, or
    a listener that does not speak TLS (the message says which, and the setting that fixes it).

    An AuthenticationError, as Java's SslAuthenticationException: retrying soon cannot fix it,
    so waiting requests fail at once and the node backs off the maximum. ``__cause__`` is the
    ssl module's error.
    """


def build_ssl_context(
    *,
    ssl_context: ssl.SSLContext | None = None,
    ssl_cafile: str | None = None,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    ssl_password: str | None = None,
    ssl_check_hostname: bool = True,
) -> ssl.SSLContext:
    """The given context, else a verifying client context built from kafka-python's keys.

    Without ``ssl_cafile`` the system's trusted CAs are used. Errors (missing file, wrong key
    password) are raised here, when the transport is built, not on the first connection.
    """
    if ssl_context is not None:
        return ssl_context
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ssl_cafile:
        context.load_verify_locations(cafile=ssl_cafile)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if ssl_certfile:
        # The password goes to OpenSSL only; its errors do not echo it.
        context.load_cert_chain(ssl_certfile, ssl_keyfile, password=ssl_password)
    context.check_hostname = ssl_check_hostname
    return context


def wrap(raw: socket.socket, context: ssl.SSLContext, host: str, port: int, *, node_id: int) -> ssl.SSLSocket:
    """``raw`` wrapped for a client handshake with ``host`` (run step by step by ``handshake_step``). Raises
    ``SslHandshakeError`` when the context refuses (bad settings) and ``OSError`` for the socket."""
    try:
        return context.wrap_socket(raw, server_hostname=host, do_handshake_on_connect=False)
    except (ssl.SSLError, ValueError) as exc:
        error = SslHandshakeError(
            f"cannot start TLS with {host}:{port}: {exc}: check the ssl_* settings or the ssl_context", node_id=node_id
        )
        raise error from exc


def handshake_step(
    sock: ssl.SSLSocket, *, node_id: int | None, peer: str, plaintext: str = "PLAINTEXT"
) -> Literal["done", "read", "write"]:
    """Advance a non-blocking handshake: "done", or which readiness to wait for before retrying.

    Raises SslHandshakeError when the handshake failed in a way reconnecting will not fix (see
    ``handshake_failure``), ConnectionLost when the network failed under it. ``peer`` is
    "host:port" and ``plaintext`` the security_protocol to suggest if the listener is not TLS.
    """
    try:
        sock.do_handshake()
    except ssl.SSLWantReadError:
        return "read"
    except ssl.SSLWantWriteError:
        return "write"
    except (ssl.SSLError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:
        raise handshake_failure(exc, peer=peer, plaintext=plaintext, node_id=node_id) from exc
    except OSError as exc:  # unreachable, timed out: the network, which a reconnect may get past
        raise ConnectionLost(f"connection to {peer} failed during the TLS handshake: {exc}", node_id=node_id) from exc
    return "done"


def handshake_failure(
    exc: BaseException, *, peer: str, plaintext: str = "PLAINTEXT", node_id: int | None = None
) -> SslHandshakeError:
    """The SslHandshakeError for ``exc`` (raised by the handshake or the first TLS read): what
    failed, and the setting that fixes it. The caller chains ``exc`` as its cause."""
    reason = getattr(exc, "reason", None) or ""
    if isinstance(exc, ssl.SSLCertVerificationError):
        what = f"certificate verify failed ({str(exc.verify_message).rstrip('.')})"
        if exc.verify_code in _NAME_MISMATCH:
            fix = (
                "connect by a name the broker's certificate lists (its advertised listener), "
                "or set ssl_check_hostname=False"
            )
        elif exc.verify_code in _NOT_VALID_NOW:
            fix = "renew the broker's certificate (or fix this host's clock)"
        else:
            fix = (
                "set ssl_cafile to the CA that signed the broker's certificate (or pass an ssl_context that trusts it)"
            )
    elif reason in _NOT_TLS:
        what = f"the answer is not TLS ({reason.lower().replace('_', ' ')})"
        fix = _not_tls(plaintext, certain=True)
    elif isinstance(
        exc,
        (
            ssl.SSLEOFError,
            ssl.SSLZeroReturnError,
            ssl.SSLSyscallError,
            ConnectionResetError,
            ConnectionAbortedError,
            BrokenPipeError,
        ),
    ):
        # A plaintext Kafka listener reads the ClientHello as a frame of ~370 MB and hangs up.
        what = "the broker closed the connection"
        fix = (
            f"{_not_tls(plaintext, certain=False)}; if it wants a client certificate, set ssl_certfile and ssl_keyfile"
        )
    elif reason in _CLIENT_CERT_REFUSED:
        what = f"the broker refused the client certificate ({reason.lower().replace('_', ' ')})"
        fix = "set ssl_certfile and ssl_keyfile to a certificate the broker trusts"
    elif reason in _NOTHING_IN_COMMON:
        what = f"no TLS version or cipher in common ({reason.lower().replace('_', ' ')})"
        # TLS 1.2 brokers also answer a missing client certificate with handshake_failure.
        fix = (
            "check the broker's ssl.enabled.protocols and cipher suites (or pass an ssl_context that allows "
            "them), and whether it wants a client certificate (ssl_certfile, ssl_keyfile)"
        )
    else:
        what = str(exc) or type(exc).__name__
        fix = "check the broker's TLS listener and the ssl_* settings"
    return SslHandshakeError(f"TLS handshake with {peer} failed: {what}: {fix}", node_id=node_id)


def silent_listener(
    *, peer: str, waited_ms: float, plaintext: str = "PLAINTEXT", node_id: int | None = None
) -> SslHandshakeError:
    """The peer accepted the connection and then said nothing to our ClientHello: what a
    plaintext listener does when it takes the ClientHello for the start of a large frame."""
    return SslHandshakeError(
        f"TLS handshake with {peer} failed: no answer to the ClientHello within {waited_ms:g} ms: "
        f"{_not_tls(plaintext, certain=False)}",
        node_id=node_id,
    )


def _not_tls(plaintext: str, *, certain: bool) -> str:
    return (
        f"the listener {'does' if certain else 'probably does'} not speak TLS: "
        f"use security_protocol={plaintext!r} or the broker's SSL port"
    )
