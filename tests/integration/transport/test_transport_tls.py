"""TLS to the real broker through a TLS-terminating forwarder written here.

Tansu 0.6's broker has --cert/--key flags, but they cannot be given together and with --cert
alone the listener stays plaintext (a ClientHello is read as a Kafka frame). So the test puts
a loopback forwarder in front: TLS from the client, plaintext to the broker.
"""

from __future__ import annotations

import datetime
import select
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from fsm_consumer.transport import AuthenticationError, KafkaTransport, Pending, SslHandshakeError
from loopback_server import LoopbackServer

pytestmark = pytest.mark.integration


# -- certificates ---------------------------------------------------------------------------------

def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, issuer: str, public_key, signing_key, *, ca: bool, sans: list[x509.GeneralName]):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(public_key).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    return builder.sign(signing_key, hashes.SHA256())


def _pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA, a server certificate it signed for "localhost" only, and an unrelated CA."""
    d = tmp_path_factory.mktemp("pki")
    ca_key, other_key, server_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _cert("Transport Test CA", "Transport Test CA", ca_key.public_key(), ca_key, ca=True, sans=[])
    other = _cert("Some Other CA", "Some Other CA", other_key.public_key(), other_key, ca=True, sans=[])
    server = _cert("localhost", "Transport Test CA", server_key.public_key(), ca_key, ca=False,
                   sans=[x509.DNSName("localhost")])
    paths = {"ca": d / "ca.pem", "other_ca": d / "other-ca.pem", "cert": d / "server.pem", "key": d / "server.key"}
    paths["ca"].write_bytes(_pem(ca))
    paths["other_ca"].write_bytes(_pem(other))
    paths["cert"].write_bytes(_pem(server))
    paths["key"].write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))
    return paths


# -- the forwarder ----------------------------------------------------------------------------------

class TlsForwarder(LoopbackServer):
    """Accepts TLS on loopback and relays the plaintext to ``upstream``; one thread per client."""

    def __init__(self, context: ssl.SSLContext, upstream: tuple[str, int]) -> None:
        self.context = context
        self.upstream = upstream
        self.handshakes_ok = 0
        self.handshake_errors: list[str] = []
        family, _, _, _, address = socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)[0]
        super().__init__("tls-forwarder", family, address[0])

    def _serve(self, raw: socket.socket) -> None:
        raw.settimeout(5)
        try:
            tls = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self.handshake_errors.append(str(exc))
            raw.close()
            return
        self.handshakes_ok += 1
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            tls.close()
            return
        try:
            self._pump(tls, upstream)
        finally:
            tls.close()
            upstream.close()

    def _pump(self, tls: ssl.SSLSocket, upstream: socket.socket) -> None:
        # One thread per connection touches the SSL object, so no locking is needed.
        while not self._stop.is_set():
            readable = [tls] if tls.pending() else select.select([tls, upstream], [], [], 0.05)[0]
            for sock in readable:
                try:
                    data = sock.recv(65536)
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                except OSError:
                    return
                if not data:
                    return
                (upstream if sock is tls else tls).sendall(data)


@pytest.fixture(scope="module")
def forwarder(pki, broker) -> Iterator[TlsForwarder]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["cert"], pki["key"])
    host, port = broker.bootstrap_servers.split(":")
    f = TlsForwarder(context, (host, int(port)))
    try:
        yield f
    finally:
        f.close()


@pytest.fixture
def tls_transport() -> Iterator[Any]:
    made: list[KafkaTransport] = []

    def make(**config: Any) -> KafkaTransport:
        made.append(KafkaTransport({"security_protocol": "SSL", "reconnect_backoff_max_ms": 5000, **config}))
        return made[-1]

    yield make
    for t in made:
        t.close()


def wait(t: KafkaTransport, p: Pending, timeout: float = 10.0) -> float:
    started = time.monotonic()
    while not p.done:
        assert time.monotonic() - started < timeout
        t.poll(100)
    return time.monotonic() - started


def triggers(t: KafkaTransport) -> list[str]:
    conn = t.connection(-1)
    assert conn is not None
    return [r.trigger for r in conn.machine.log]


# -- tests -----------------------------------------------------------------------------------------

def test_trusted_ca_works(pki, forwarder, tls_transport):
    t = tls_transport(bootstrap_servers=f"localhost:{forwarder.port}", ssl_cafile=str(pki["ca"]))
    versions = t.send(ApiVersionsRequest())
    wait(t, versions)
    assert versions.error is None and versions.response.error_code == 0
    assert triggers(t) == ["connect", "connected", "tls_established", "versions_known"]
    conn = t.connection(-1)
    assert conn is not None and isinstance(conn.sock, ssl.SSLSocket) and conn.sock.version() in ("TLSv1.2", "TLSv1.3")
    # ~1.5 MB: many TLS records, written as the socket accepts them.
    names = [f"tls-{i:06d}-" + "y" * 60 for i in range(20_000)]
    big = t.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                                 allow_auto_topic_creation=False))
    wait(t, big, timeout=30)
    assert big.error is None and len(big.response.topics) == 20_000


def test_a_given_ssl_context_is_used_as_is(pki, forwarder, tls_transport):
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    t = tls_transport(bootstrap_servers=f"localhost:{forwarder.port}", ssl_context=context)
    p = t.send(ApiVersionsRequest())
    wait(t, p)
    assert p.error is None and t.settings.ssl_context is context


def test_untrusted_ca_fails_fast_with_an_ssl_error(pki, forwarder, tls_transport):
    t = tls_transport(bootstrap_servers=f"localhost:{forwarder.port}", ssl_cafile=str(pki["other_ca"]))
    p = t.send(ApiVersionsRequest(), timeout_ms=30_000)
    elapsed = wait(t, p)
    assert elapsed < 2.0, "a refused certificate must not wait for the request deadline"
    assert isinstance(p.error, SslHandshakeError) and isinstance(p.error, AuthenticationError)
    assert isinstance(p.error.__cause__, ssl.SSLCertVerificationError)
    assert "certificate verify failed" in str(p.error)
    assert triggers(t)[-1] == "authentication_failed" and t.connection_state(-1) == "backoff"
    conn = t.connection(-1)
    assert conn is not None and conn.machine.next_deadline - t.clock.now_ms() > 4000  # max backoff at once
    again = t.send(ApiVersionsRequest())
    assert again.done and isinstance(again.error, SslHandshakeError)


def test_hostname_is_checked(pki, forwarder, tls_transport):
    strict = tls_transport(bootstrap_servers=f"127.0.0.1:{forwarder.port}", ssl_cafile=str(pki["ca"]))
    refused = strict.send(ApiVersionsRequest())
    assert wait(strict, refused) < 2.0
    assert isinstance(refused.error, SslHandshakeError)
    assert "127.0.0.1" in str(refused.error)  # "IP address mismatch, certificate is not valid for '127.0.0.1'"

    lax = tls_transport(bootstrap_servers=f"127.0.0.1:{forwarder.port}", ssl_cafile=str(pki["ca"]),
                        ssl_check_hostname=False)
    accepted = lax.send(ApiVersionsRequest())
    wait(lax, accepted)
    assert accepted.error is None  # the chain is still verified, only the name is not
