"""io_error where the connection has no socket (disconnected, backoff, closed) is a declared no-op of
specs/connection.yaml: a disconnect() or a late failure report there changes nothing, and leaves
nothing behind that would colour the next real failure (its cause, whether it warns and counts)."""

from __future__ import annotations

import logging

from fake_broker import metadata, triggers, wait_done

from fsm_consumer.machines import FakeClock

LOGGER = "fsm_consumer.transport"


def warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_disconnect_without_a_socket_is_ignored_and_hides_no_later_failure(fake_broker, transports, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    broker = fake_broker()
    clock = FakeClock(1000.0)
    t = transports(
        {
            "bootstrap_servers": broker.address,
            "reconnect_backoff_ms": 10,
            "reconnect_backoff_max_ms": 10,
            "socket_connection_setup_timeout_ms": 500,
        },
        clock=clock,
    )
    wait_done(t, t.send(metadata("a")))
    t.disconnect(-1)  # the client's choice: backoff, no warning, not counted
    assert t.connection_state(-1) == "backoff"
    seen = triggers(t, -1)
    t.disconnect(-1)  # backoff: the socket is gone already
    assert t.connection_state(-1) == "backoff" and triggers(t, -1) == seen
    clock.advance(11)
    t.poll(0)
    assert t.connection_state(-1) == "disconnected"
    seen = triggers(t, -1)
    t.disconnect(-1)  # disconnected: nothing to drop
    assert t.connection_state(-1) == "disconnected" and triggers(t, -1) == seen
    assert warnings(caplog) == [] and t.node_states()[-1]["failures"] == 0

    # The next attempt times out: it warns, counts, and names its own cause, not the ignored disconnect.
    p = t.send(metadata("b"), timeout_ms=10_000)
    assert t.connection_state(-1) == "connecting"
    clock.advance(501)
    t.poll(0)
    assert triggers(t, -1)[-1] == "connect_timed_out" and not p.done
    assert warnings(caplog) == [
        f"connection to node -1 ({broker.address}) failed: connect to {broker.address} timed out after 500 ms"
    ]
    assert t.node_states()[-1]["failures"] == 1


def test_disconnect_and_late_failures_after_close_are_ignored(fake_broker, transports):
    broker = fake_broker()
    t = transports({"bootstrap_servers": broker.address})
    p = t.send(metadata("a"))
    wait_done(t, p)
    conn = t.connection(-1)
    t.close()
    assert conn.state == "closed"
    seen = triggers(t, -1)
    conn.disconnect()
    conn.request_timed_out(p)  # a deadline seen after the close: the request is done, nothing to recycle
    assert conn.state == "closed" and triggers(t, -1) == seen and p.error is None
