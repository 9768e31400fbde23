"""SASL/OAUTHBEARER through KafkaTransport against a scripted loopback server (no broker offers
OAUTHBEARER here): the token goes out once per connection, a server error document is acknowledged
and reported with its status, never with the token."""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse
from loopback_server import LoopbackServer

from fsm_consumer.transport import AuthenticationError, KafkaTransport, request_class
from fsm_consumer.transport._versions import _request_classes

TOKEN = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.SeCrEt-SiGnAtUrE"
ERROR_DOC = b'{"status":"invalid_token","scope":"kafka","openid-configuration":"https://idp/.well-known"}'


class Provider:
    """kafka-python's AbstractTokenProvider shape; counts token() calls."""

    def __init__(self, token: Any = TOKEN, extensions: Any = None) -> None:
        self._token = token
        self._extensions = extensions
        self.calls = 0

    def token(self) -> Any:
        self.calls += 1
        return self._token

    def extensions(self) -> Any:
        return self._extensions if self._extensions is not None else {}


def secret_free(*texts: str) -> bool:
    return all(TOKEN not in text and "SeCrEt" not in text for text in texts)


# -- a scripted exchange through KafkaTransport --------------------------------------------------------


class OAuthServer(LoopbackServer):
    """ApiVersions, SaslHandshake, SaslAuthenticate (the token accepted or answered with an error
    document), Metadata. Records the SaslAuthenticate payloads it received."""

    def __init__(self, accept_token: bool) -> None:
        self.accept_token = accept_token
        self.auth_bytes: list[bytes] = []
        super().__init__("oauth-server")
        self.address = f"127.0.0.1:{self.port}"

    def _serve(self, client: socket.socket) -> None:
        with client:
            client.settimeout(5)
            try:
                while self._answer(client):
                    pass
            except OSError:
                pass

    def _answer(self, client: socket.socket) -> bool:
        head = client.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return False
        payload = client.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
        key, version, cid = struct.unpack_from(">hhi", payload)
        request = request_class(key).decode(payload, version=version, header=True)
        if key == ApiKey.ApiVersions:
            entry = ApiVersionsResponse.ApiVersion
            reply = ApiVersionsResponse[version](
                error_code=0,
                throttle_time_ms=0,
                api_keys=[
                    entry(api_key=k, min_version=0, max_version=c.max_version) for k, c in _request_classes().items()
                ],
            )
        elif key == ApiKey.SaslHandshake:
            reply = SaslHandshakeResponse[version](error_code=0, mechanisms=["OAUTHBEARER"])
        elif key == ApiKey.SaslAuthenticate:
            token = bytes(request.auth_bytes)
            self.auth_bytes.append(token)
            if token == b"\x01":  # the client acknowledged our error document: Kafka fails it now
                reply = SaslAuthenticateResponse[version](
                    error_code=58, auth_bytes=b"", session_lifetime_ms=0, error_message="Authentication failed"
                )
            else:
                answer = b"" if self.accept_token else ERROR_DOC
                reply = SaslAuthenticateResponse[version](
                    error_code=0, error_message=None, auth_bytes=answer, session_lifetime_ms=0
                )
        elif key == ApiKey.Metadata:
            reply = MetadataResponse[version](
                throttle_time_ms=0, brokers=[], cluster_id="fake", controller_id=0, topics=[]
            )
        else:
            return False
        reply.with_header(correlation_id=cid)
        client.sendall(bytes(reply.encode(header=True, framed=True)))
        return True


@pytest.fixture
def oauth_transport() -> Iterator[Any]:
    made: list[Any] = []

    def make(accept_token: bool, provider: Any) -> tuple[OAuthServer, KafkaTransport]:
        server = OAuthServer(accept_token)
        made.append(server)
        t = KafkaTransport(
            {
                "bootstrap_servers": server.address,
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "OAUTHBEARER",
                "sasl_oauth_token_provider": provider,
                "reconnect_backoff_max_ms": 5000,
            }
        )
        made.append(t)
        return server, t

    yield make
    for thing in reversed(made):
        thing.close()


def run(t: KafkaTransport) -> Any:
    p = t.send(MetadataRequest(topics=None, allow_auto_topic_creation=False), timeout_ms=10_000)
    end = time.monotonic() + 10
    while not p.done:
        assert time.monotonic() < end
        t.poll(50)
    return p


def test_transport_authenticates_with_the_token(oauth_transport):
    provider = Provider(extensions={"logicalCluster": "lkc-1"})
    server, t = oauth_transport(True, provider)
    p = run(t)
    assert p.error is None and p.response.cluster_id == "fake"
    assert server.auth_bytes == [b"n,,\x01auth=Bearer " + TOKEN.encode() + b"\x01logicalCluster=lkc-1\x01\x01"]
    conn = t.connection(-1)
    assert conn is not None and [r.trigger for r in conn.machine.log][-1] == "authenticated"
    assert provider.calls == 1


def test_transport_reports_the_servers_status_and_never_the_token(oauth_transport, caplog):
    caplog.set_level(logging.DEBUG)
    server, t = oauth_transport(False, Provider())
    p = run(t)
    assert isinstance(p.error, AuthenticationError)
    assert server.auth_bytes[1:] == [b"\x01"]  # the client acknowledged the error document
    message = str(p.error)
    assert "OAUTHBEARER" in message and "'invalid_token'" in message and "Authentication failed" in message
    assert t.connection_state(-1) == "backoff"
    assert secret_free(message, repr(p.error), repr(t), repr(t.settings), repr(t.connection(-1)), caplog.text)
