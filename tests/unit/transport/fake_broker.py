"""A loopback server speaking Kafka frames for the transport's unit tests, and their helpers.

The server speaks just enough Kafka (kafka-python's classes) to drive each path: partial
writes, reassembly, bad frames, silence, refusals, SASL verdicts.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest, MetadataResponse

from fsm_consumer.transport import KafkaTransport, Pending, request_class
from fsm_consumer.transport._versions import _request_classes

SILENT = object()  # the server does not answer
CLOSE = object()  # the server closes the connection instead of answering

Reply = Any  # an ApiMessage response, raw bytes, SILENT or CLOSE
Handler = Callable[[int, int, ApiMessage], Reply]


def default_versions() -> dict[int, tuple[int, int]]:
    return {key: (0, cls.max_version) for key, cls in _request_classes().items()}


class FakeBroker:
    """A loopback server speaking Kafka frames, one thread per client connection.

    ApiVersions and Metadata get sensible default answers; ``handler(api_key, version,
    request)`` decides the rest (and may override those two by returning non-None).
    """

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        versions: dict[int, tuple[int, int]] | None = None,
        node_id: int = 0,
        port: int = 0,
        read_delay: float = 0.0,
    ) -> None:
        self.handler = handler
        self.versions = versions if versions is not None else default_versions()
        self.node_id = node_id
        self.read_delay = read_delay  # seconds between small reads: makes the client write in parts
        self.requests: list[tuple[int, int, ApiMessage]] = []
        self.accepted = 0
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(16)
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._clients: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True, name=f"fake-broker-{self.port}")]
        self._threads[0].start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop.set()
        for t in list(self._threads):
            t.join(5)
        self._listener.close()
        for c in self._clients:
            c.close()

    def drop_clients(self) -> None:
        for c in self._clients:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # -- server side ---------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            client.settimeout(0.05)
            self._clients.append(client)
            t = threading.Thread(target=self._serve, args=(client,), daemon=True)
            self._threads.append(t)
            t.start()

    def _recv_exact(self, client: socket.socket, size: int) -> bytes | None:
        data = bytearray()
        while len(data) < size:
            if self._stop.is_set():
                return None
            try:
                chunk = client.recv(min(size - len(data), 4096 if self.read_delay else 1 << 20))
            except TimeoutError:
                continue
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
            if self.read_delay:
                time.sleep(self.read_delay)
        return bytes(data)

    def _serve(self, client: socket.socket) -> None:
        while not self._stop.is_set():
            prefix = self._recv_exact(client, 4)
            if prefix is None:
                return
            payload = self._recv_exact(client, struct.unpack(">i", prefix)[0])
            if payload is None:
                return
            api_key, version, correlation_id = struct.unpack_from(">hhi", payload)
            request = request_class(api_key).decode(payload, version=version, header=True)
            self.requests.append((api_key, version, request))
            reply = self.handler(api_key, version, request) if self.handler else None
            if reply is None:
                reply = self._default(api_key, version, request)
            if reply is SILENT:
                continue
            if reply is CLOSE:
                client.close()
                return
            if isinstance(reply, ApiMessage):
                reply.with_header(correlation_id=correlation_id)
                reply = bytes(reply.encode(header=True, framed=True))
            try:
                client.sendall(reply)
            except OSError:
                return

    def _default(self, api_key: int, version: int, request: ApiMessage) -> Reply:
        if api_key == ApiKey.ApiVersions:
            entry = ApiVersionsResponse.ApiVersion
            return ApiVersionsResponse[version](
                error_code=0,
                throttle_time_ms=0,
                api_keys=[entry(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in self.versions.items()],
            )
        if api_key == ApiKey.Metadata:
            broker = MetadataResponse.MetadataResponseBroker
            topics = [
                MetadataResponse.MetadataResponseTopic(error_code=3, name=t.name, partitions=[])
                for t in request.topics or ()
            ]
            return MetadataResponse[version](
                throttle_time_ms=0,
                brokers=[broker(node_id=self.node_id, host="127.0.0.1", port=self.port)],
                cluster_id="fake",
                controller_id=self.node_id,
                topics=topics,
            )
        return SILENT


def wait_done(transport: KafkaTransport, *pendings: Pending, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not all(p.done for p in pendings):
        assert time.monotonic() < end, f"not done in {timeout}s: {pendings} {transport!r}"
        transport.poll(50)


def metadata(*topics: str) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics], allow_auto_topic_creation=False
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def triggers(transport: KafkaTransport, node: int) -> list[str]:
    conn = transport.connection(node)
    assert conn is not None
    return [r.trigger for r in conn.machine.log]


class ScriptedPeer:
    """A loopback listener that runs ``script(peer, client)`` for each client in a thread of its own:
    for peers that do not speak Kafka at all (or not yet), such as a listener that is not TLS.
    The socket is closed when the script returns."""

    def __init__(self, script: Callable[[ScriptedPeer, socket.socket], None]) -> None:
        self.script = script
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.received = bytearray()  # what the scripts read, all clients together
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True, name=f"scripted-peer-{self.port}")]
        self._threads[0].start()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def recv(self, client: socket.socket, size: int) -> bytes:
        """Up to ``size`` bytes, waiting for them until close(); b"" once the client is gone."""
        while not self._stop.is_set():
            try:
                data = client.recv(size)
            except TimeoutError:
                continue
            except OSError:
                return b""
            self.received += data
            return data
        return b""

    def close(self) -> None:
        self._stop.set()
        for t in list(self._threads):
            t.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            client.settimeout(0.05)
            t = threading.Thread(target=self._run, args=(client,), daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, client: socket.socket) -> None:
        try:
            self.script(self, client)
        finally:
            client.close()
