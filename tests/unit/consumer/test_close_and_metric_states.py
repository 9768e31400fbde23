"""Only the background thread closes the transport, also when close() runs out of time; metrics()
shows the connections' and the held errors' states. No broker: the bootstrap server is a closed port."""

from __future__ import annotations

import logging
import socket
import threading
import time

import kafka.errors as ke

from fsm_consumer import Consumer, TopicPartition
from fsm_consumer._config import ConsumerConfig
from fsm_consumer._metrics import Metrics
from fsm_consumer.state import HeldErrors
from fsm_consumer.transport import FaultyTransport, KafkaTransport


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


class _Recording(FaultyTransport):
    """Records the thread of every close(); ``stall()`` makes the next poll() sleep (a stuck loop)."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.closed_on: list[threading.Thread] = []
        self.stall_s = 0.0
        self.stalling = threading.Event()

    def poll(self, timeout_ms):
        if self.stall_s:
            stall, self.stall_s = self.stall_s, 0.0
            self.stalling.set()
            time.sleep(stall)
        return super().poll(timeout_ms)

    def close(self) -> None:
        self.closed_on.append(threading.current_thread())
        super().close()


def _consumer(**extra):
    settings = dict(
        bootstrap_servers=_closed_port(),
        api_version=(3, 9),
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=50,
        **extra,
    )
    transport = _Recording(KafkaTransport(ConsumerConfig.from_kwargs(**settings)))
    return Consumer(transport=transport, **settings), transport


def _wait(pred, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_close_leaves_the_transport_to_the_background_thread(caplog):
    c, transport = _consumer()
    c.assign([TopicPartition("t", 0)])
    with caplog.at_level(logging.WARNING, logger="fsm_consumer.consumer"):
        c.close(timeout_ms=2000)
    assert not c._thread.alive
    assert len(transport.closed_on) == 1
    assert transport.closed_on[0] is not threading.current_thread()
    assert transport.closed_on[0].name.startswith("fsm-consumer-network-")
    assert transport.inner.closed
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()]


def test_a_stuck_loop_is_not_closed_from_the_application_thread(caplog):
    c, transport = _consumer()
    transport.stall_s = 1.0
    transport.wakeup()
    assert transport.stalling.wait(5), "the loop never polled the transport"
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="fsm_consumer.consumer"):
        c.close(timeout_ms=200)
    assert time.monotonic() - started < 0.9  # close() kept its budget: it did not wait for the loop
    assert c._thread.alive
    assert transport.closed_on == []  # not from here, not while the loop still owns the sockets
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "did not stop" in r.getMessage()]
    assert len(warnings) == 1 and "closes its connections when it finishes" in warnings[0].getMessage()
    _wait(lambda: not c._thread.alive, 10, "the background thread to finish")
    assert [t.name for t in transport.closed_on] == [f"fsm-consumer-network-{c.config.client_id}"]
    assert transport.inner.closed


def test_metrics_show_a_failing_connection_and_held_errors():
    c, transport = _consumer()
    try:
        c.assign([TopicPartition("t", 0)])  # needs metadata: the bootstrap server is tried
        _wait(lambda: c.metrics_flat()["connections-failing"] >= 1, 10, "a failed connection attempt")
        m = c.metrics_flat()
        ((node, state),) = m["connection-states"].items()
        assert node == "-1" and state["address"] == c.config.bootstrap_servers[0]
        assert state["state"] != "ready" and state["failures"] >= 1 and state["last-error"]
        assert m["connections-ready"] == 0
        assert m["errors-held"] == {} and m["errors-held-count"] == 0
        c._held.hold(("partition", TopicPartition("t", 0)), ke.TopicAuthorizationFailedError("no READ on 't'"))
        m = c.metrics_flat()
        assert m["errors-held"] == {"partition/t-0": "[Error 29] TopicAuthorizationFailedError: no READ on 't'"}
        assert m["errors-held-count"] == 1
    finally:
        c.close(timeout_ms=2000)


def test_held_errors_describe_names_keys_and_types():
    held = HeldErrors()
    held.hold(("auth",), ValueError("bad password"))
    held.hold(("group", "discovery"), RuntimeError("x"))
    held.hold(("topic", "events"), KeyError("k"))
    held.hold(("partition", TopicPartition("events", 3)), ValueError("y"))
    held.hold(("partition", TopicPartition("events", 4)), ke.OffsetOutOfRangeError("seek()"))
    held.hold(("group",), RuntimeError())
    assert held.describe() == {
        "auth": "ValueError: bad password",
        "group/discovery": "RuntimeError: x",
        "topic/events": "KeyError: 'k'",
        "partition/events-3": "ValueError: y",
        "partition/events-4": "[Error 1] OffsetOutOfRangeError: seek()",
        "group": "RuntimeError",
    }
    held.release(("auth",))
    assert list(held.describe())[:3] == ["group/discovery", "topic/events", "partition/events-3"]


def test_metrics_snapshot_counts_connections_and_errors():
    nodes = {
        1: {"address": "b1:9092", "state": "ready", "failures": 0, "last_error": None},
        2: {"address": "b2:9092", "state": "backoff", "failures": 3, "last_error": "refused"},
        3: {"address": "b3:9092", "state": "disconnected", "failures": 0, "last_error": None},
    }
    out = Metrics().snapshot(
        lag={},
        buffer_bytes=0,
        buffer_peak=0,
        app_events=0,
        bg_events=0,
        nodes=nodes,
        held={"topic/t": "TopicAuthorizationFailedError: no"},
    )
    assert out["connection-states"]["2"] == {
        "address": "b2:9092",
        "state": "backoff",
        "failures": 3,
        "last-error": "refused",
    }
    assert (out["connections-ready"], out["connections-failing"]) == (1, 1)
    assert out["errors-held"] == {"topic/t": "TopicAuthorizationFailedError: no"} and out["errors-held-count"] == 1
    empty = Metrics().snapshot(lag={}, buffer_bytes=0, buffer_peak=0, app_events=0, bg_events=0)
    assert empty["connection-states"] == {} and empty["errors-held-count"] == 0


def test_a_group_consumer_tells_its_transport_the_commit_and_heartbeat_it_will_send():
    """A group's first OffsetCommit (and, under the classic protocol, Heartbeat) comes seconds into the records:
    the transport is told of them as the consumer is built, so their codecs are made at each connection's
    handshake rather than in the middle of consumption; a consumer without a group commits nothing."""
    from kafka.protocol.consumer import HeartbeatRequest, OffsetCommitRequest

    for extra, told in [
        ({}, ()),
        ({"group_id": "g"}, (OffsetCommitRequest, HeartbeatRequest)),
        ({"group_id": "g", "group_protocol": "consumer"}, (OffsetCommitRequest,)),
    ]:
        c, transport = _consumer(**extra)
        try:
            assert transport.inner._will_send == told, extra
        finally:
            c.close(timeout_ms=2000)
