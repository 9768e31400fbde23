"""SASL (PLAIN, SCRAM-SHA-256/512) against Tansu and against a SASL proxy in front of it.

What Tansu 0.6 does (found by experiment, see the report of issue 3):
* ``tansu broker --authentication`` enforces SASL: ApiVersions is answered, anything else
  before authenticating closes the connection.
* Users cannot be made to work: ``tansu user create`` needs a broker *without*
  --authentication (with it, the command itself is refused as unauthenticated), and the
  in-memory and S3 storage engines do not keep the credential (nothing is written to S3), so
  every SCRAM exchange ends in ``e=unknown-user``. PLAIN is not offered (NoSharedMechanism,
  connection closed).
So against Tansu only the refusal is tested; successful exchanges run through ``SaslProxy``:
it answers SaslHandshake/SaslAuthenticate itself (a SCRAM server per RFC 5802, test users)
and then relays the connection to the real broker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import select
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from loopback_server import LoopbackServer

from fsm_consumer.broker import locate_tansu
from fsm_consumer.broker._process import GuardedProcess
from fsm_consumer.broker._wire import fetch_api_versions
from fsm_consumer.transport import AuthenticationError, ConnectionLost, KafkaTransport, Pending

pytestmark = pytest.mark.integration

USERS = {"alice": "alice-secret-pw", "bob": "bob-secret-pw"}
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33


# -- a SCRAM server (RFC 5802), the broker's side -----------------------------------------------------


class ScramServer:
    def __init__(self, mechanism: str, users: dict[str, str], iterations: int = 4096) -> None:
        self.hash = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self.users = users
        self.iterations = iterations
        self.salt = os.urandom(16)

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash).digest()

    def first(self, client_first: bytes) -> bytes:
        assert client_first.startswith(b"n,,"), client_first
        self.client_first_bare = client_first[3:]
        attrs = dict(part.split(b"=", 1) for part in self.client_first_bare.split(b","))
        self.user = attrs[b"n"].decode().replace("=2C", ",").replace("=3D", "=")
        self.nonce = attrs[b"r"] + base64.b64encode(os.urandom(18))
        self.server_first = b"r=%s,s=%s,i=%d" % (self.nonce, base64.b64encode(self.salt), self.iterations)
        return self.server_first

    def final(self, client_final: bytes) -> bytes | None:
        """The server-final message, or None if the proof is wrong."""
        without_proof, _, proof = client_final.rpartition(b",p=")
        attrs = dict(part.split(b"=", 1) for part in without_proof.split(b","))
        password = self.users.get(self.user)
        if attrs.get(b"r") != self.nonce or attrs.get(b"c") != b"biws" or password is None:
            return None
        salted = hashlib.pbkdf2_hmac(self.hash, password.encode(), self.salt, self.iterations)
        stored_key = hashlib.new(self.hash, self._hmac(salted, b"Client Key")).digest()
        auth_message = self.client_first_bare + b"," + self.server_first + b"," + without_proof
        signature = self._hmac(stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=False))
        if hashlib.new(self.hash, client_key).digest() != stored_key:
            return None
        return b"v=" + base64.b64encode(self._hmac(self._hmac(salted, b"Server Key"), auth_message))


# -- the proxy ------------------------------------------------------------------------------------------


def _recv_exact(sock: socket.socket, size: int, stop: threading.Event) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        if stop.is_set():
            return None
        try:
            chunk = sock.recv(size - len(data))
        except TimeoutError:
            continue
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return bytes(data)


class SaslProxy(LoopbackServer):
    """Authenticates clients itself, then relays their connection to ``upstream`` byte for byte."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        users: dict[str, str] | None = None,
    ) -> None:
        self.upstream = upstream
        self.mechanisms = mechanisms
        self.users = dict(USERS if users is None else users)  # a test may change them meanwhile
        self.verdicts: list[tuple[str, str, bool]] = []  # (mechanism, user, accepted)
        super().__init__("sasl-proxy")

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(0.05)
        upstream = socket.create_connection(self.upstream, timeout=5)
        upstream.settimeout(0.05)
        try:
            if self._authenticate(client, upstream):
                self._relay(client, upstream)
        finally:
            client.close()
            upstream.close()

    def _reply(self, client: socket.socket, response: Any, correlation_id: int) -> None:
        response.with_header(correlation_id=correlation_id)
        client.sendall(bytes(response.encode(header=True, framed=True)))

    def _authenticate(self, client: socket.socket, upstream: socket.socket) -> bool:
        mechanism, scram = None, None
        while True:
            prefix = _recv_exact(client, 4, self._stop)
            payload = prefix and _recv_exact(client, struct.unpack(">i", prefix)[0], self._stop)
            if not payload:
                return False
            api_key, version, cid = struct.unpack_from(">hhi", payload)
            if api_key == ApiKey.ApiVersions:  # the broker's own answer
                upstream.sendall(prefix + payload)
                size = _recv_exact(upstream, 4, self._stop)
                body = size and _recv_exact(upstream, struct.unpack(">i", size)[0], self._stop)
                if not body:
                    return False
                client.sendall(size + body)
            elif api_key == ApiKey.SaslHandshake:
                request = SaslHandshakeRequest.decode(payload, version=version, header=True)
                ok = request.mechanism in self.mechanisms
                mechanism = request.mechanism if ok else None
                self._reply(
                    client,
                    SaslHandshakeResponse[version](
                        error_code=0 if ok else UNSUPPORTED_SASL_MECHANISM, mechanisms=list(self.mechanisms)
                    ),
                    cid,
                )
            elif api_key == ApiKey.SaslAuthenticate and mechanism is not None:
                token = bytes(SaslAuthenticateRequest.decode(payload, version=version, header=True).auth_bytes)
                answer: bytes | None
                done = False
                if mechanism == "PLAIN":
                    _, user, password = token.decode().split("\0")
                    answer, done = (b"" if self.users.get(user) == password else None), True
                    self.verdicts.append((mechanism, user, answer is not None))
                elif scram is None:
                    scram = ScramServer(mechanism, self.users)
                    answer = scram.first(token)
                else:
                    answer, done = scram.final(token), True
                    self.verdicts.append((mechanism, scram.user, answer is not None))
                if answer is None:
                    self._reply(
                        client,
                        SaslAuthenticateResponse[version](
                            error_code=SASL_AUTHENTICATION_FAILED,
                            auth_bytes=b"",
                            session_lifetime_ms=0,
                            error_message=f"Authentication failed during authentication due to invalid credentials "
                            f"with SASL mechanism {mechanism}",
                        ),
                        cid,
                    )
                    return False
                self._reply(
                    client,
                    SaslAuthenticateResponse[version](
                        error_code=0, error_message=None, auth_bytes=answer, session_lifetime_ms=0
                    ),
                    cid,
                )
                if done:
                    return True
            else:
                return False  # like a broker: anything else before authenticating closes the connection

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        while not self._stop.is_set():
            for sock in select.select([client, upstream], [], [], 0.05)[0]:
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                (upstream if sock is client else client).sendall(data)


@pytest.fixture(scope="module")
def proxy(broker) -> Iterator[SaslProxy]:
    host, port = broker.bootstrap_servers.split(":")
    p = SaslProxy((host, int(port)))
    try:
        yield p
    finally:
        p.close()


# -- a Tansu broker with --authentication --------------------------------------------------------------


@pytest.fixture(scope="module")
def tansu_auth() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="tansu-auth-") as tmp:
        process = GuardedProcess(
            [
                locate_tansu(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
                "--authentication",
            ],
            log_path=Path(tmp) / "tansu.log",
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    fetch_api_versions("127.0.0.1", port, timeout=0.25)
                    break
                except Exception:
                    assert process.alive() and time.monotonic() < deadline, "tansu --authentication did not start"
                    time.sleep(0.02)
            yield f"127.0.0.1:{port}"
        finally:
            process.stop()


# -- helpers ---------------------------------------------------------------------------------------------


@pytest.fixture
def sasl_transport() -> Iterator[Any]:
    made: list[KafkaTransport] = []

    def make(
        servers: str, mechanism: str | None, user: str = "alice", password: str = USERS["alice"], **extra: Any
    ) -> KafkaTransport:
        config = {"bootstrap_servers": servers, "reconnect_backoff_max_ms": 3000, **extra}
        if mechanism is not None:
            config |= {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": mechanism,
                "sasl_plain_username": user,
                "sasl_plain_password": password,
            }
        made.append(KafkaTransport(config))
        return made[-1]

    yield make
    for t in made:
        t.close()


def metadata() -> MetadataRequest:
    return MetadataRequest(topics=None, allow_auto_topic_creation=False)


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


# -- against Tansu -----------------------------------------------------------------------------------


def test_tansu_with_authentication_refuses_unauthenticated_requests(tansu_auth, sasl_transport):
    t = sasl_transport(tansu_auth, None)
    p = t.send(metadata())
    wait(t, p)
    assert isinstance(p.error, ConnectionLost)  # Tansu closes the connection (NotAuthenticated)
    assert triggers(t)[:4] == ["connect", "connected", "versions_known", "io_error"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_tansu_rejects_unknown_scram_credentials_fast(tansu_auth, sasl_transport, mechanism, caplog):
    caplog.set_level(logging.DEBUG)
    t = sasl_transport(tansu_auth, mechanism, password="not-the-password")
    p = t.send(metadata(), timeout_ms=30_000)
    assert wait(t, p) < 2.0
    assert isinstance(p.error, AuthenticationError) and "unknown-user" in str(p.error)
    assert triggers(t)[-1] == "authentication_failed"
    assert "not-the-password" not in str(p.error) + repr(t) + repr(t.settings) + caplog.text


# -- through the SASL proxy -----------------------------------------------------------------------


@pytest.mark.parametrize("mechanism,user", [("PLAIN", "alice"), ("SCRAM-SHA-256", "alice"), ("SCRAM-SHA-512", "bob")])
def test_right_credentials_authenticate_and_reach_the_broker(proxy, sasl_transport, mechanism, user, make_topic):
    topic = make_topic()
    t = sasl_transport(f"127.0.0.1:{proxy.port}", mechanism, user=user, password=USERS[user])
    p = t.send(
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    )
    wait(t, p)
    assert p.error is None and p.response.topics[0].name == topic and p.response.topics[0].error_code == 0
    assert triggers(t) == ["connect", "connected", "versions_known", "authenticated"]
    assert (mechanism, user, True) in proxy.verdicts


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_is_an_authentication_error_within_two_seconds(proxy, sasl_transport, mechanism, caplog):
    caplog.set_level(logging.DEBUG)
    t = sasl_transport(f"127.0.0.1:{proxy.port}", mechanism, password="wrong-password")
    p = t.send(metadata(), timeout_ms=30_000)
    assert wait(t, p) < 2.0
    assert isinstance(p.error, AuthenticationError)
    assert "invalid credentials" in str(p.error) and "wrong-password" not in str(p.error) + caplog.text
    conn = t.connection(-1)
    assert conn is not None and t.connection_state(-1) == "backoff"
    assert conn.machine.next_deadline - t.clock.now_ms() > 2900  # the maximum backoff at once: no storm
    again = t.send(metadata())
    assert again.done and isinstance(again.error, AuthenticationError)
    accepts_before = len(proxy.verdicts)
    t.poll(300)
    assert len(proxy.verdicts) == accepts_before, "no reconnect during the backoff"


def test_mechanism_the_broker_does_not_enable(broker, sasl_transport):
    host, port = broker.bootstrap_servers.split(":")
    only_512 = SaslProxy((host, int(port)), mechanisms=("SCRAM-SHA-512",))
    try:
        t = sasl_transport(f"127.0.0.1:{only_512.port}", "SCRAM-SHA-256")
        p = t.send(metadata())
        assert wait(t, p) < 2.0
        assert isinstance(p.error, AuthenticationError)
        assert "SCRAM-SHA-256" in str(p.error) and "SCRAM-SHA-512" in str(p.error)
        assert only_512.verdicts == []
    finally:
        only_512.close()


# -- what the layers above learn ----------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_credentials_are_an_auth_failure_until_the_node_authenticates(broker, mechanism, caplog):
    caplog.set_level(logging.INFO, logger="fsm_consumer.transport")
    host, port = broker.bootstrap_servers.split(":")
    proxy = SaslProxy((host, int(port)))
    t = KafkaTransport(
        {
            "bootstrap_servers": f"127.0.0.1:{proxy.port}",
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-typo-pw",
            "reconnect_backoff_max_ms": 200,
        }
    )
    try:
        p = t.send(metadata(), timeout_ms=30_000)
        assert wait(t, p) < 2.0
        assert isinstance(p.error, AuthenticationError)
        assert str(p.error).endswith(": check sasl_plain_username / sasl_plain_password")
        assert t.auth_failure is not None and str(t.auth_failure) == str(p.error)
        assert t.node_states()[-1]["failures"] == 1
        assert f"connection to node -1 (127.0.0.1:{proxy.port}) failed: " in caplog.text

        proxy.users["alice"] = "alice-typo-pw"  # the broker's side is changed to match
        end = time.monotonic() + 5
        while t.connection_state(-1) == "backoff":  # the maximum backoff: 200 ms
            assert time.monotonic() < end
            t.poll(20)
        assert t.auth_failure is not None, "set until the node has authenticated"
        ok = t.send(metadata())
        wait(t, ok)
        assert ok.error is None and ok.response.brokers  # the real broker's answer
        assert t.auth_failure is None
        assert t.node_states()[-1] == {
            "address": f"127.0.0.1:{proxy.port}",
            "state": "ready",
            "failures": 0,
            "last_error": None,
        }
        assert f"node -1 (127.0.0.1:{proxy.port}) is reachable again after 1 failure" in caplog.text
        assert "alice-typo-pw" not in caplog.text
    finally:
        t.close()
        proxy.close()


def test_sasl_against_a_listener_without_sasl_does_not_blame_the_mechanism(broker, sasl_transport, caplog):
    # Tansu without --authentication answers SaslHandshake with UnsupportedSaslMechanism yet lists
    # the very mechanism asked for; Kafka's PLAINTEXT listener answers IllegalSaslState and lists none.
    # Either way the message says what happened, not "not enabled".
    caplog.set_level(logging.WARNING, logger="fsm_consumer.transport")
    t = sasl_transport(broker.bootstrap_servers, "SCRAM-SHA-256")
    p = t.send(metadata(), timeout_ms=30_000)
    assert wait(t, p) < 2.0
    assert isinstance(p.error, AuthenticationError)
    answer = {
        "tansu": "UnsupportedSaslMechanismError although it lists SCRAM-SHA-256",
        "kafka": "IllegalSaslStateError",
    }[broker.kind]
    assert str(p.error) == (
        f"[node -1] the broker answered SaslHandshake for SCRAM-SHA-256 with {answer}: "
        "check that SASL is enabled on this listener (security_protocol='PLAINTEXT' if it is not)"
    )
    assert "does not enable" not in caplog.text
    assert t.auth_failure is not None


# -- what the user sees: Consumer.poll() raises it --------------------------------------------------


@pytest.mark.parametrize("api_version", [None, (2, 8)], ids=["probed-by-the-constructor", "given"])
def test_poll_raises_a_wrong_password_within_two_seconds_saying_how_to_fix_it(proxy, api_version):
    from fsm_consumer import Consumer
    from fsm_consumer.errors import AuthenticationFailedError

    consumer = None
    started = time.monotonic()
    try:
        with pytest.raises(AuthenticationFailedError) as caught:
            consumer = Consumer(
                bootstrap_servers=f"127.0.0.1:{proxy.port}",
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256",
                sasl_plain_username="alice",
                sasl_plain_password="wrong-password",
                group_id="sasl-errors",
                api_version=api_version,
            )
            consumer.subscribe(["sasl-errors"])
            while time.monotonic() - started < 10:
                consumer.poll(timeout_ms=100)
        assert time.monotonic() - started < 2.0, "raised within 2 s"
        message = str(caught.value)
        assert "sasl_plain_username / sasl_plain_password" in message and "wrong-password" not in message
        assert (consumer is None) == (api_version is None)
    finally:
        if consumer is not None:
            consumer.close(timeout_ms=2000)
