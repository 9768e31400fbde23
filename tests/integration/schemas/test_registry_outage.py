"""The registry down while a consumer reads a topic of Avro records: ``poll()`` and ``poll_batch()`` raise a
typed error naming what they asked for (the schema id, or the subject's latest version) within seconds (never
a hang), warn once, keep the position at the first record they could not decode, and once the registry
answers again every record comes, each once, in order."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

pytest.importorskip("confluent_kafka.schema_registry", reason="the schemas extra: pip install fsm_consumer[schemas]")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from fsm_consumer import Consumer, TopicPartition  # noqa: E402
from fsm_consumer.schemas import AvroDeserializer, Registry, RegistryUnavailableError  # noqa: E402
from fsm_consumer.testing import _schema_peer as peer  # noqa: E402

pytestmark = pytest.mark.integration

N = 40


class _Relay:
    """A loopback TCP relay in front of the registry that can be switched off: while down, each connection is
    closed as soon as it is accepted (the registry's host up, its service not)."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.up = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="registry-relay")
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            if not self.up.is_set():
                client.close()
                continue
            server = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.mark.parametrize("way", ["poll", "poll_batch"])
def test_a_registry_outage_fails_the_read_within_seconds_and_loses_nothing(broker, make_topic, registry, way, caplog):
    topic = make_topic(1)
    client = SchemaRegistryClient({"url": registry.url, "timeout": 30})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    payloads = peer.payloads("avro", client, topic, N)
    for payload in payloads:
        producer.produce(topic, value=payload, partition=0)
    assert producer.flush(30) == 0
    theirs = peer.peer_deserializer("avro", client, latest=True)
    ctx = SerializationContext(topic, MessageField.VALUE)

    relay = _Relay(registry.port)
    url = registry.url.replace(f":{registry.port}/", f":{relay.port}/")
    deserializer = AvroDeserializer(Registry(url, timeout_s=2.0), latest=True)
    consumer = Consumer(
        bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest", value_deserializer=deserializer
    )
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, "fsm_consumer.schemas"):
            with pytest.raises(RegistryUnavailableError) as caught:
                while time.monotonic() - started < 30:
                    got = consumer.poll(timeout_ms=500) if way == "poll" else consumer.poll_batch(timeout_ms=500)
                    assert not (got if way == "poll" else got.num_rows), "a record came without its schema"
        assert time.monotonic() - started < 15, "the outage took too long to reach the caller"
        # what it asked for: the record's schema id (poll()), or the reader schema, the subject's latest version
        # (poll_batch() resolves every record to it)
        asked = f"schema id {caught.value.schema_id}" if way == "poll" else f"latest version of subject '{topic}-value'"
        assert asked in str(caught.value) and "within 2 s" in str(caught.value), caught.value
        assert any("offset 0 of" in note for note in getattr(caught.value, "__notes__", ())), caught.value.__notes__
        warned = [r for r in caplog.records if r.name == "fsm_consumer.schemas" and r.levelno == logging.WARNING]
        assert len(warned) == 1, [r.getMessage() for r in warned]
        assert consumer.position(tp) == 0

        relay.up.set()
        values: list = []
        offsets: list[int] = []
        deadline = time.monotonic() + 30
        while len(offsets) < N and time.monotonic() < deadline:
            if way == "poll":
                for records in consumer.poll(timeout_ms=500).values():
                    offsets += [r.offset for r in records]
                    values += [r.value for r in records]
            else:
                batch = consumer.poll_batch(timeout_ms=500)
                offsets += batch.column("offset").to_pylist()
                values += batch.column("value").to_pylist()
    finally:
        consumer.close()
        relay.close()
    assert offsets == list(range(N))
    if way == "poll":
        assert values == [theirs(p, ctx) for p in payloads]
    else:
        typ = deserializer.arrow_type(topic)
        assert values == [peer.arrow_row("avro", theirs(p, ctx), typ) for p in payloads]
