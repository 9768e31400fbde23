"""TLS: the client SSLContext from config keys, and one non-blocking handshake step."""

from __future__ import annotations

import ssl
from typing import Literal

from ._errors import AuthenticationError, ConnectionLost

__all__ = ["SslHandshakeError", "build_ssl_context", "handshake_step"]


class SslHandshakeError(AuthenticationError):
    """The TLS handshake failed: untrusted certificate, wrong host name, no common protocol.

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


def handshake_step(sock: ssl.SSLSocket, *, node_id: int | None) -> Literal["done", "read", "write"]:
    """Advance a non-blocking handshake: "done", or which readiness to wait for before retrying.

    Raises SslHandshakeError when the peer or its certificate is refused, ConnectionLost when
    the connection broke mid-handshake.
    """
    try:
        sock.do_handshake()
    except ssl.SSLWantReadError:
        return "read"
    except ssl.SSLWantWriteError:
        return "write"
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError) as exc:
        raise ConnectionLost(f"connection closed during the TLS handshake: {exc}", node_id=node_id) from exc
    except ssl.SSLError as exc:  # verification failures (SSLCertVerificationError) included
        raise SslHandshakeError(f"TLS handshake failed: {exc}", node_id=node_id) from exc
    except OSError as exc:
        raise ConnectionLost(f"connection failed during the TLS handshake: {exc}", node_id=node_id) from exc
    return "done"
