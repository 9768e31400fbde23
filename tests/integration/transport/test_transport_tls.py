"""TLS to the real broker through a TLS-terminating forwarder written here.

Tansu 0.6's broker has --cert/--key flags, but they cannot be given together and with --cert
alone the listener stays plaintext (a ClientHello is read as a Kafka frame). So the test puts
a loopback forwarder in front: TLS from the client, plaintext to the broker.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from loopback_server import LoopbackServer
from pki import make_pki

from fsm_consumer.transport import AuthenticationError, KafkaTransport, Pending, SslHandshakeError

pytestmark = pytest.mark.integration


# -- certificates ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA, a server certificate it signed for "localhost" only, and an unrelated CA."""
    return make_pki(tmp_path_factory.mktemp("pki"), "localhost", [x509.DNSName("localhost")])


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
    # tls_heard only when the ServerHello was not already read inside the first handshake step
    assert [x for x in triggers(t) if x != "tls_heard"] == ["connect", "connected", "tls_established", "versions_known"]
    conn = t.connection(-1)
    assert conn is not None and isinstance(conn.sock, ssl.SSLSocket) and conn.sock.version() in ("TLSv1.2", "TLSv1.3")
    # ~1.5 MB: many TLS records, written as the socket accepts them.
    names = [f"tls-{i:06d}-" + "y" * 60 for i in range(20_000)]
    big = t.send(
        MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=False
        )
    )
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

    lax = tls_transport(
        bootstrap_servers=f"127.0.0.1:{forwarder.port}", ssl_cafile=str(pki["ca"]), ssl_check_hostname=False
    )
    accepted = lax.send(ApiVersionsRequest())
    wait(lax, accepted)
    assert accepted.error is None  # the chain is still verified, only the name is not


# -- failures that reconnecting cannot fix: AuthenticationErrors that say what to change ------------


def test_ssl_against_the_plaintext_listener_says_it_does_not_speak_tls(broker, tls_transport, caplog):
    # Tansu's plaintext listener takes the ClientHello for the start of a ~370 MB frame and waits
    # for the rest: no word back. With the default request_timeout_ms (30 s) the silence timeout
    # (tls_silence_timeout_ms, 1.5 s) says so. Apache Kafka refuses the frame and closes the connection:
    # the same advice, at once.
    caplog.set_level(logging.WARNING, logger="fsm_consumer.transport")
    t = tls_transport(bootstrap_servers=broker.bootstrap_servers)
    p = t.send(ApiVersionsRequest(), timeout_ms=30_000)
    assert wait(t, p) < 2.0
    assert isinstance(p.error, SslHandshakeError) and isinstance(p.error, AuthenticationError)
    message = str(p.error)
    assert f"TLS handshake with {broker.bootstrap_servers} failed" in message
    assert "the listener probably does not speak TLS: use security_protocol='PLAINTEXT'" in message
    assert t.auth_failure is not None and str(t.auth_failure) == message
    if broker.kind == "tansu":
        assert triggers(t) == ["connect", "connected", "tls_silent"]
    else:
        assert "the broker closed the connection" in message
        # whether the TLS layer saw the close as bytes heard first is a race of the close with our read
        assert triggers(t) in (
            ["connect", "connected", "authentication_failed"],
            ["connect", "connected", "tls_heard", "authentication_failed"],
        )
    assert [r.getMessage() for r in caplog.records] == [
        f"connection to node -1 ({broker.bootstrap_servers}) failed: {message.removeprefix('[node -1] ')}"
    ]


def test_an_untrusted_certificate_says_to_set_ssl_cafile(pki, forwarder, tls_transport):
    t = tls_transport(bootstrap_servers=f"localhost:{forwarder.port}", ssl_cafile=str(pki["other_ca"]))
    p = t.send(ApiVersionsRequest(), timeout_ms=30_000)
    assert wait(t, p) < 2.0
    assert isinstance(p.error, SslHandshakeError)
    assert str(p.error).startswith(
        f"[node -1] TLS handshake with localhost:{forwarder.port} failed: certificate verify failed ("
    )
    assert str(p.error).endswith(
        ": set ssl_cafile to the CA that signed the broker's certificate (or pass an ssl_context that trusts it)"
    )
    assert t.auth_failure is not None and t.auth_failure.node_id == -1
    state = t.node_states()[-1]
    assert state["state"] == "backoff" and state["failures"] == 1 and "set ssl_cafile" in state["last_error"]


def test_a_wrong_host_name_says_how_to_connect(pki, forwarder, tls_transport):
    t = tls_transport(bootstrap_servers=f"127.0.0.1:{forwarder.port}", ssl_cafile=str(pki["ca"]))
    p = t.send(ApiVersionsRequest())
    wait(t, p)
    assert isinstance(p.error, SslHandshakeError)
    assert "certificate is not valid for '127.0.0.1'" in str(p.error)
    assert str(p.error).endswith(
        "connect by a name the broker's certificate lists (its advertised listener), or set ssl_check_hostname=False"
    )


def test_a_broker_that_wants_a_client_certificate_says_so(pki, broker, tls_transport):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["cert"], pki["key"])
    context.load_verify_locations(cafile=pki["ca"])
    context.verify_mode = ssl.CERT_REQUIRED  # mutual TLS; the client below has no certificate
    host, port = broker.bootstrap_servers.split(":")
    mutual = TlsForwarder(context, (host, int(port)))
    try:
        t = tls_transport(bootstrap_servers=f"localhost:{mutual.port}", ssl_cafile=str(pki["ca"]))
        p = t.send(ApiVersionsRequest(), timeout_ms=30_000)
        assert wait(t, p) < 2.0
        assert isinstance(p.error, SslHandshakeError), repr(p.error)
        assert "the broker refused the client certificate" in str(p.error)
        assert str(p.error).endswith("set ssl_certfile and ssl_keyfile to a certificate the broker trusts")
        end = time.monotonic() + 2  # the forwarder's thread notes the refusal after sending it
        while not mutual.handshake_errors and time.monotonic() < end:
            time.sleep(0.01)
        assert mutual.handshake_errors and mutual.handshakes_ok == 0
        assert t.auth_failure is not None
    finally:
        mutual.close()


# -- what the user sees: Consumer.poll() raises it --------------------------------------------------


@pytest.mark.parametrize("api_version", [None, (2, 8)], ids=["probed-by-the-constructor", "given"])
@pytest.mark.parametrize("case", ["untrusted certificate", "plaintext listener"])
def test_poll_raises_a_tls_failure_within_two_seconds_saying_how_to_fix_it(pki, forwarder, broker, case, api_version):
    from fsm_consumer import Consumer
    from fsm_consumer.errors import AuthenticationFailedError

    if case == "untrusted certificate":
        config = dict(bootstrap_servers=f"localhost:{forwarder.port}", ssl_cafile=str(pki["other_ca"]))
        fix = "set ssl_cafile to the CA that signed the broker's certificate"
    else:
        config = dict(bootstrap_servers=broker.bootstrap_servers)
        fix = "use security_protocol='PLAINTEXT'"
    consumer = None
    started = time.monotonic()
    try:
        # with api_version=None the constructor asks the broker (as kafka-python does) and raises;
        # with it given, the first poll() does. Default timeouts otherwise.
        with pytest.raises(AuthenticationFailedError) as caught:
            consumer = Consumer(security_protocol="SSL", group_id="tls-errors", api_version=api_version, **config)
            consumer.subscribe(["tls-errors"])
            while time.monotonic() - started < 10:
                consumer.poll(timeout_ms=100)
        assert time.monotonic() - started < 2.0, "raised within 2 s"
        assert "TLS handshake with" in str(caught.value) and fix in str(caught.value)
        assert (consumer is None) == (api_version is None)
        if consumer is not None:
            with pytest.raises(AuthenticationFailedError):  # held: every call raises it until fixed
                consumer.poll(timeout_ms=0)
    finally:
        if consumer is not None:
            consumer.close(timeout_ms=2000)
