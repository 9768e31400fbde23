"""TLS failures are AuthenticationErrors that say what failed and what fixes it: the message
mapping (no sockets), then peers on loopback that are not TLS listeners, or stall."""

from __future__ import annotations

import logging
import ssl
import time

import pytest
from fake_broker import metadata, triggers, wait_done

from fsm_consumer.machines import FakeClock
from fsm_consumer.transport import AuthenticationError, KafkaTransport, SslHandshakeError
from fsm_consumer.transport._tls import handshake_failure, silent_listener

PEER = "broker-1.example:9093"


def ssl_error(reason: str, text: str) -> ssl.SSLError:
    exc = ssl.SSLError(1, f"[SSL: {reason}] {text} (_ssl.c:1006)")
    exc.reason = reason
    return exc


def verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message}")
    exc.reason, exc.verify_code, exc.verify_message = "CERTIFICATE_VERIFY_FAILED", code, message
    return exc


@pytest.mark.parametrize(
    "exc,plaintext,expected",
    [
        (
            verify_error(19, "self-signed certificate in certificate chain"),
            "PLAINTEXT",
            "certificate verify failed (self-signed certificate in certificate chain): set ssl_cafile to the CA that "
            "signed the broker's certificate (or pass an ssl_context that trusts it)",
        ),
        (
            verify_error(62, "Hostname mismatch, certificate is not valid for 'broker-1.example'."),
            "PLAINTEXT",
            "certificate verify failed (Hostname mismatch, certificate is not valid for 'broker-1.example'): connect "
            "by a name the broker's certificate lists (its advertised listener), or set ssl_check_hostname=False",
        ),
        (
            verify_error(10, "certificate has expired"),
            "PLAINTEXT",
            "certificate verify failed (certificate has expired): renew the broker's certificate (or fix this host's "
            "clock)",
        ),
        (
            ssl_error("WRONG_VERSION_NUMBER", "wrong version number"),
            "SASL_PLAINTEXT",
            "the answer is not TLS (wrong version number): the listener does not speak TLS: use "
            "security_protocol='SASL_PLAINTEXT' or the broker's SSL port",
        ),
        (
            ConnectionResetError(104, "Connection reset by peer"),
            "PLAINTEXT",
            "the broker closed the connection: the listener probably does not speak TLS: use "
            "security_protocol='PLAINTEXT' or the broker's SSL port; if it wants a client certificate, set "
            "ssl_certfile and ssl_keyfile",
        ),
        (
            ssl_error("TLSV13_ALERT_CERTIFICATE_REQUIRED", "tlsv13 alert certificate required"),
            "PLAINTEXT",
            "the broker refused the client certificate (tlsv13 alert certificate required): set ssl_certfile and "
            "ssl_keyfile to a certificate the broker trusts",
        ),
        (
            ssl_error("SSLV3_ALERT_HANDSHAKE_FAILURE", "sslv3 alert handshake failure"),
            "PLAINTEXT",
            "no TLS version or cipher in common (sslv3 alert handshake failure): check the broker's "
            "ssl.enabled.protocols and cipher suites (or pass an ssl_context that allows them), and whether it wants a "
            "client certificate (ssl_certfile, ssl_keyfile)",
        ),
    ],
)
def test_each_handshake_failure_says_what_failed_and_how_to_fix_it(exc, plaintext, expected):
    error = handshake_failure(exc, peer=PEER, plaintext=plaintext, node_id=3)
    assert isinstance(error, SslHandshakeError) and isinstance(error, AuthenticationError)
    assert str(error) == f"[node 3] TLS handshake with {PEER} failed: {expected}"


def test_an_unknown_reason_is_quoted():
    error = handshake_failure(ssl_error("SOMETHING_NEW", "something new"), peer=PEER)
    assert str(error) == (
        f"TLS handshake with {PEER} failed: [SSL: SOMETHING_NEW] something new (_ssl.c:1006): "
        f"check the broker's TLS listener and the ssl_* settings"
    )


def test_silence_names_the_wait():
    error = silent_listener(peer=PEER, waited_ms=30_000, plaintext="PLAINTEXT")
    assert str(error) == (
        f"TLS handshake with {PEER} failed: no answer to the ClientHello within 30000 ms: the "
        f"listener probably does not speak TLS: use security_protocol='PLAINTEXT' or the "
        f"broker's SSL port"
    )


# -- against loopback peers -----------------------------------------------------------------------


def tls_config(peer, protocol: str = "SSL", **extra) -> dict:
    config = {"bootstrap_servers": peer.address, "security_protocol": protocol, "reconnect_backoff_max_ms": 4000}
    if protocol == "SASL_SSL":
        config |= {"sasl_mechanism": "PLAIN", "sasl_plain_username": "u", "sasl_plain_password": "p"}
    return config | extra


def answers_in_plaintext(peer, client) -> None:
    if peer.recv(client, 4096):  # the ClientHello
        client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        peer.recv(client, 4096)  # until the client hangs up


def hangs_up(peer, client) -> None:
    peer.recv(client, 4)  # a plaintext Kafka listener reads a size, finds ~370 MB, and closes


@pytest.mark.parametrize("protocol,suggested", [("SSL", "PLAINTEXT"), ("SASL_SSL", "SASL_PLAINTEXT")])
def test_a_plaintext_answer_is_an_authentication_error_at_once(scripted_peer, transports, caplog, protocol, suggested):
    caplog.set_level(logging.WARNING, logger="fsm_consumer.transport")
    peer = scripted_peer(answers_in_plaintext)
    t: KafkaTransport = transports(tls_config(peer, protocol))
    p = t.send(metadata("a"), timeout_ms=30_000)
    started = time.monotonic()
    wait_done(t, p)
    assert time.monotonic() - started < 2.0, "not a retriable failure: no waiting for the deadline"
    assert isinstance(p.error, SslHandshakeError) and isinstance(p.error.__cause__, ssl.SSLError)
    message = str(p.error)
    assert message.startswith(f"[node -1] TLS handshake with {peer.address} failed: the answer is not TLS (")
    assert message.endswith(
        f"the listener does not speak TLS: use security_protocol={suggested!r} or the broker's SSL port"
    )
    assert triggers(t, -1)[-1] == "authentication_failed" and t.connection_state(-1) == "backoff"
    conn = t.connection(-1)
    assert conn is not None and conn.machine.next_deadline - t.clock.now_ms() > 3900  # the maximum backoff
    assert t.auth_failure is not None and str(t.auth_failure) == message
    assert [r.getMessage() for r in caplog.records] == [
        f"connection to node -1 ({peer.address}) failed: " + message.removeprefix("[node -1] ")
    ]


def test_a_hang_up_during_the_handshake_is_an_authentication_error(scripted_peer, transports):
    peer = scripted_peer(hangs_up)
    t = transports(tls_config(peer))
    p = t.send(metadata("a"), timeout_ms=30_000)
    wait_done(t, p, timeout=2.0)
    assert isinstance(p.error, SslHandshakeError)
    assert str(p.error) == (
        f"[node -1] TLS handshake with {peer.address} failed: the broker closed the "
        f"connection: the listener probably does not speak TLS: use security_protocol="
        f"'PLAINTEXT' or the broker's SSL port; if it wants a client certificate, set "
        f"ssl_certfile and ssl_keyfile"
    )
    assert triggers(t, -1)[-1] == "authentication_failed"
    assert t.auth_failure is not None


@pytest.mark.parametrize("silence,request_timeout,waited", [(None, 30_000, 1500), (800, 30_000, 800), (None, 500, 500)])
def test_silence_to_the_client_hello_is_an_authentication_error(
    fake_broker, transports, caplog, silence, request_timeout, waited
):
    # A Kafka listener without TLS (Tansu does this) reads the ClientHello's first bytes as the
    # size of a huge frame and waits for the rest: no word back. A TLS listener answers within one
    # round trip, so tls_silence_timeout_ms (1.5 s, at most request_timeout_ms) decides.
    caplog.set_level(logging.WARNING, logger="fsm_consumer.transport")
    broker = fake_broker()
    clock = FakeClock()
    config = {
        "bootstrap_servers": broker.address,
        "security_protocol": "SSL",
        "request_timeout_ms": request_timeout,
        "reconnect_backoff_max_ms": 4000,
    }
    if silence is not None:
        config["tls_silence_timeout_ms"] = silence
    t = transports(config, clock=clock)
    p = t.send(metadata("a"), timeout_ms=30_000)
    end = time.monotonic() + 2
    while t.connection_state(-1) != "tls_hello":
        assert time.monotonic() < end
        t.poll(10)
    t.poll(50)  # the ClientHello goes out; nothing comes back
    clock.advance(waited - 1)
    t.poll(0)
    assert t.connection_state(-1) == "tls_hello" and not p.done
    clock.advance(1)
    t.poll(0)
    assert triggers(t, -1)[-1] == "tls_silent" and t.connection_state(-1) == "backoff"
    assert isinstance(p.error, SslHandshakeError), "waiting requests fail at once"
    assert str(p.error) == (
        f"[node -1] TLS handshake with {broker.address} failed: no answer to the ClientHello "
        f"within {waited} ms: the listener probably does not speak TLS: use "
        f"security_protocol='PLAINTEXT' or the broker's SSL port"
    )
    conn = t.connection(-1)
    assert conn is not None and conn.machine.next_deadline == clock.now_ms() + 4000  # the maximum backoff
    again = t.send(metadata("b"))
    assert again.done and isinstance(again.error, SslHandshakeError)
    assert t.auth_failure is not None and t.node_states()[-1]["failures"] == 1
    assert len(caplog.records) == 1 and "does not speak TLS" in caplog.records[0].getMessage()


def test_a_tls_peer_that_stalls_mid_handshake_is_retriable(scripted_peer, transports, caplog):
    # It answered with the start of a TLS record: it speaks TLS, something is slow. Reconnecting may help.
    sent = []

    def stalls(peer, client) -> None:
        if peer.recv(client, 4096):
            # Not at once: bytes that arrive while do_handshake() is still sending the ClientHello
            # are read by it unseen (see Connection.on_io); a remote peer is never that fast.
            time.sleep(0.1)
            client.sendall(b"\x16\x03\x03\x00\x40" + b"\x02" * 10)  # a ServerHello record, cut short
            sent.append(True)
            while peer.recv(client, 4096):
                pass

    caplog.set_level(logging.WARNING, logger="fsm_consumer.transport")
    peer = scripted_peer(stalls)
    clock = FakeClock()
    t = transports(tls_config(peer, request_timeout_ms=500), clock=clock)
    p = t.send(metadata("a"), timeout_ms=30_000)
    end = time.monotonic() + 5
    conn = t.connection(-1)
    while not (sent and conn is not None and conn._tls_heard):  # loopback delivery may lag under load
        assert time.monotonic() < end, f"the client never read the peer's bytes: {conn!r}"
        t.poll(10)
        conn = t.connection(-1)
    assert t.connection_state(-1) == "tls_handshake"
    clock.advance(500)
    t.poll(0)
    assert triggers(t, -1)[-1] == "handshake_timed_out" and t.connection_state(-1) == "backoff"
    assert not p.done, f"a retriable failure: the request waits for the reconnect, not {p.error}"
    assert t.auth_failure is None
    assert [r.getMessage() for r in caplog.records] == [
        f"connection to node -1 ({peer.address}) failed: {peer.address} did not finish the TLS handshake within 500 ms"
    ]
