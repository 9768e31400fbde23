"""What KafkaTransport tells about failing nodes: rate-limited WARNINGs, an INFO on recovery,
``node_states()`` and ``auth_failure``, against loopback servers and a fake clock."""

from __future__ import annotations

import logging
import time

import pytest
from fake_broker import SILENT, free_port, metadata, triggers, wait_done
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from fsm_consumer.machines import FakeClock
from fsm_consumer.transport import AuthenticationError, FaultyTransport, KafkaTransport, RequestTimedOut

LOGGER = "fsm_consumer.transport"


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def until(t: KafkaTransport, condition, what: str, timeout: float = 5.0) -> None:
    """Poll (real time: sockets) until ``condition()``; the fake clock stays where it is."""
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"{what}: not within {timeout}s ({t!r})"
        t.poll(10)


def fail_once_more(t: KafkaTransport, clock: FakeClock, node: int = -1) -> None:
    """Let the backoff elapse on the fake clock and wait for the reconnect to fail again."""
    before = t.node_states()[node]["failures"]
    clock.advance(11)  # reconnect_backoff_max_ms is 10
    until(t, lambda: t.node_states()[node]["failures"] == before + 1, "the next failure")
    assert t.connection_state(node) == "backoff"


def test_a_failing_node_warns_once_per_30s_and_says_when_it_is_back(fake_broker, transports, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    port = free_port()  # nothing listens there yet
    clock = FakeClock(5_000.0)
    t = transports(
        {"bootstrap_servers": f"127.0.0.1:{port}", "reconnect_backoff_ms": 10, "reconnect_backoff_max_ms": 10},
        clock=clock,
    )
    assert t.node_states() == {
        -1: {"address": f"127.0.0.1:{port}", "state": "disconnected", "failures": 0, "last_error": None}
    }
    p = t.send(metadata("a"), timeout_ms=10 * 60_000)  # waits for the node, on the fake clock
    until(t, lambda: t.connection_state(-1) == "backoff", "the first failure")
    [warning] = records(caplog, logging.WARNING)
    assert warning == (
        f"connection to node -1 (127.0.0.1:{port}) failed: connect to 127.0.0.1:{port} failed: Connection refused"
    )
    state = t.node_states()[-1]
    assert state["state"] == "backoff" and state["failures"] == 1
    assert state["last_error"] == f"connect to 127.0.0.1:{port} failed: Connection refused"

    for _ in range(12):  # within 30 s of clock time: counted, not warned about
        fail_once_more(t, clock)
    assert len(records(caplog, logging.WARNING)) == 1
    assert t.node_states()[-1]["failures"] == 13
    assert sum("Connection refused" in m for m in records(caplog, logging.DEBUG)) >= 12  # the detail is kept

    clock.advance(30_000 - 12 * 11)  # 30 s after the warning, minus the 11 ms the next step adds
    fail_once_more(t, clock)
    assert records(caplog, logging.WARNING)[1] == (
        f"connection to node -1 (127.0.0.1:{port}) failed: connect to 127.0.0.1:{port} failed: "
        f"Connection refused (failed 12 more times since the last warning)"
    )

    fake_broker(port=port)  # the broker comes up
    clock.advance(11)
    wait_done(t, p)
    assert p.error is None and p.response.topics[0].name == "a"
    assert records(caplog, logging.INFO) == [f"node -1 (127.0.0.1:{port}) is reachable again after 14 failures"]
    assert t.node_states() == {
        -1: {"address": f"127.0.0.1:{port}", "state": "ready", "failures": 0, "last_error": None}
    }
    assert len(records(caplog, logging.WARNING)) == 2


def test_closes_that_are_not_failures_do_not_warn(fake_broker, transports, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    broker = fake_broker()  # Fetch is never answered
    t = transports({"bootstrap_servers": broker.address, "reconnect_backoff_ms": 1, "reconnect_backoff_max_ms": 1})
    wait_done(t, t.send(metadata("a")))
    t.disconnect(-1)  # the client's own choice
    assert t.connection_state(-1) == "backoff"
    wait_done(t, t.send(metadata("b")))
    broker.drop_clients()  # the broker closes the idle connection (connections.max.idle.ms)
    until(t, lambda: t.connection_state(-1) != "ready", "the idle close")
    assert records(caplog, logging.WARNING) == [] and t.node_states()[-1]["failures"] == 0
    # With a request on it, the same close is a failure.
    wait_done(t, t.send(metadata("c")))
    fetch = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, topics=[])
    stuck = t.send(fetch)
    until(t, lambda: any(k == ApiKey.Fetch for k, _, _ in broker.requests), "the Fetch to arrive")
    broker.drop_clients()
    wait_done(t, stuck)
    [warning] = records(caplog, logging.WARNING)
    assert warning.startswith(f"connection to node -1 ({broker.address}) failed: {broker.address} closed the")
    assert t.node_states()[-1]["failures"] == 1


def test_a_timeout_says_which_step_timed_out(fake_broker, transports, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    broker = fake_broker(lambda k, v, r: SILENT if k == ApiKey.ApiVersions else None)
    clock = FakeClock()
    t = transports({"bootstrap_servers": broker.address, "request_timeout_ms": 300}, clock=clock)
    p = t.send(metadata("a"), timeout_ms=1000)
    until(t, lambda: t.connection_state(-1) == "api_versions" and broker.requests, "ApiVersions sent")
    clock.advance(300)
    t.poll(0)
    assert triggers(t, -1)[-1] == "handshake_timed_out" and not p.done  # retriable: the request waits
    assert records(caplog, logging.WARNING) == [
        f"connection to node -1 ({broker.address}) failed: {broker.address} did not finish the ApiVersions "
        f"handshake within 300 ms"
    ]
    assert t.auth_failure is None
    clock.advance(700)
    t.poll(0)
    assert isinstance(p.error, RequestTimedOut)


# -- auth_failure ----------------------------------------------------------------------------------


def sasl_broker(fake_broker, verdicts: dict[str, bool], key: str, *, node_id: int = 0):
    """A SASL PLAIN broker that accepts the password while ``verdicts[key]`` is True."""

    def handler(api_key, version, request):
        if api_key == ApiKey.SaslHandshake:
            return SaslHandshakeResponse[version](error_code=0, mechanisms=["PLAIN"])
        if api_key == ApiKey.SaslAuthenticate:
            ok = verdicts[key]
            return SaslAuthenticateResponse[version](
                error_code=0 if ok else 58,
                auth_bytes=b"",
                session_lifetime_ms=0,
                error_message=None if ok else "Authentication failed: Invalid username or password",
            )
        return None

    return fake_broker(handler, node_id=node_id)


SASL = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "PLAIN",
    "sasl_plain_username": "alice",
    "sasl_plain_password": "pw-SECRET",
    "reconnect_backoff_ms": 20,
    "reconnect_backoff_max_ms": 50,
}


def test_auth_failure_is_set_per_node_and_cleared_when_that_node_is_ready(fake_broker, transports, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    verdicts = {"one": True, "two": True}
    one = sasl_broker(fake_broker, verdicts, "one", node_id=1)
    two = sasl_broker(fake_broker, verdicts, "two", node_id=2)
    t = transports({"bootstrap_servers": one.address, **SASL})
    faulty = FaultyTransport(t)
    wait_done(t, t.send(metadata()))
    t.update_brokers({1: ("127.0.0.1", one.port), 2: ("127.0.0.1", two.port)})
    assert t.auth_failure is None and faulty.auth_failure is None

    verdicts.update(one=False, two=False)  # the password changed on the brokers
    first = t.send(metadata("x"), node=1)
    wait_done(t, first)
    assert isinstance(first.error, AuthenticationError)
    assert str(first.error) == (
        "[node 1] SASL PLAIN authentication failed (SaslAuthenticationFailedError): "
        "Authentication failed: Invalid username or password: "
        "check sasl_plain_username / sasl_plain_password"
    )
    assert isinstance(t.auth_failure, AuthenticationError) and t.auth_failure.node_id == 1
    second = t.send(metadata("y"), node=2)
    wait_done(t, second)
    assert t.auth_failure.node_id == 2, "the newest failure of any node"
    assert faulty.auth_failure is t.auth_failure
    states = faulty.node_states()
    assert set(states) == {1, 2} and all(s["state"] == "backoff" and s["failures"] == 1 for s in states.values())
    assert "check sasl_plain_username" in states[1]["last_error"]
    assert "pw-SECRET" not in str(states) + caplog.text

    # Still failing on reconnect: still set, the count grows.
    until(t, lambda: t.connection_state(2) == "disconnected", "the backoff to end")
    again = t.send(metadata("z"), node=2)
    wait_done(t, again)
    assert isinstance(again.error, AuthenticationError) and t.node_states()[2]["failures"] == 2

    verdicts["two"] = True  # fixed for node 2 only
    until(t, lambda: t.connection_state(2) == "disconnected", "the backoff to end")
    ok = t.send(metadata("w"), node=2)
    wait_done(t, ok)
    assert ok.error is None
    assert t.auth_failure is not None and t.auth_failure.node_id == 1, "node 1 has not been ready since"
    assert f"node 2 (127.0.0.1:{two.port}) is reachable again after 2 failures" in records(caplog, logging.INFO)

    verdicts["one"] = True
    until(t, lambda: t.connection_state(1) == "disconnected", "the backoff to end")
    wait_done(t, t.send(metadata("v"), node=1))
    assert t.auth_failure is None and faulty.auth_failure is None
    assert {n: (s["state"], s["failures"], s["last_error"]) for n, s in faulty.node_states().items()} == {
        1: ("ready", 0, None),
        2: ("ready", 0, None),
    }


def test_a_node_that_leaves_the_cluster_takes_its_auth_failure_along(fake_broker, transports):
    verdicts = {"one": True}
    one = sasl_broker(fake_broker, verdicts, "one", node_id=1)
    t = transports({"bootstrap_servers": one.address, **SASL})
    wait_done(t, t.send(metadata()))
    t.update_brokers({1: ("127.0.0.1", one.port)})
    verdicts["one"] = False
    p = t.send(metadata("x"), node=1)
    wait_done(t, p)
    assert t.auth_failure is not None
    t.update_brokers({})
    assert t.auth_failure is None and 1 not in t.node_states()


@pytest.mark.parametrize(
    "listed,expected,not_expected",
    [
        (
            ["SCRAM-SHA-512", "PLAIN"],
            "the broker answered SaslHandshake for PLAIN with IllegalSaslStateError although "
            "it lists PLAIN: check that SASL is enabled on this listener "
            "(security_protocol='PLAINTEXT' if it is not)",
            "does not enable",
        ),
        (
            ["SCRAM-SHA-512"],
            "the broker does not enable SASL mechanism PLAIN (IllegalSaslStateError; it lists: "
            "SCRAM-SHA-512): set sasl_mechanism to one it lists",
            "although",
        ),
        (
            [],
            "the broker answered SaslHandshake for PLAIN with IllegalSaslStateError: check that SASL is enabled on "
            "this listener (security_protocol='PLAINTEXT' if it is not)",
            "does not enable",
        ),  # Kafka's PLAINTEXT listener
    ],
)
def test_the_sasl_handshake_error_claims_only_what_the_broker_said(
    fake_broker, transports, caplog, listed, expected, not_expected
):
    caplog.set_level(logging.WARNING, logger=LOGGER)

    def handler(api_key, version, request):
        if api_key == ApiKey.SaslHandshake:
            return SaslHandshakeResponse[version](error_code=34, mechanisms=listed)  # IllegalSaslState
        return None

    broker = fake_broker(handler)
    t = transports({"bootstrap_servers": broker.address, **SASL})
    p = t.send(metadata("a"))
    wait_done(t, p)
    assert isinstance(p.error, AuthenticationError) and str(p.error) == f"[node -1] {expected}"
    assert records(caplog, logging.WARNING) == [f"connection to node -1 ({broker.address}) failed: {expected}"]
    assert not_expected not in caplog.text
    assert t.auth_failure is not None and str(t.auth_failure) == str(p.error)
