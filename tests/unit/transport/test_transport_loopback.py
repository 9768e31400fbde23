"""KafkaTransport's I/O mechanics against a scripted loopback server (fake_broker.py).

Protocol behaviour against a real broker is covered by tests/integration/transport.
"""

from __future__ import annotations

import struct
import threading
import time

import pytest
from fake_broker import SILENT, default_versions, free_port, metadata, triggers, wait_done
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from fsm_consumer.machines import FakeClock
from fsm_consumer.transport import (
    AuthenticationError,
    ConnectionLost,
    CorrelationIdMismatch,
    FrameTooLarge,
    KafkaSettings,
    KafkaTransport,
    NodeNotReady,
    Pending,
    RequestTimedOut,
    UnsupportedVersion,
    parse_servers,
)

# -- versions and round trips -----------------------------------------------------------------------


def test_request_goes_out_at_the_highest_version_both_sides_speak(fake_broker, transports):
    versions = default_versions() | {int(ApiKey.Metadata): (0, 9)}
    broker = fake_broker(versions=versions)
    t = transports({"bootstrap_servers": broker.address})
    p = t.send(metadata("a"), tag="mine")
    wait_done(t, p)
    assert p.error is None and p.tag == "mine" and p.sent_to == -1
    assert p.request.API_VERSION == 9
    assert [t.name for t in p.response.topics] == ["a"]
    api_versions = [(k, v) for k, v, _ in broker.requests if k == ApiKey.ApiVersions]
    assert api_versions == [(ApiKey.ApiVersions, 4)]
    (_, _, hello) = next(r for r in broker.requests if r[0] == ApiKey.ApiVersions)
    assert hello.client_software_name == "fsm-consumer" and hello.client_software_version


def test_version_bounds_and_fixed_versions(fake_broker, transports):
    broker = fake_broker(versions=default_versions() | {int(ApiKey.Metadata): (0, 9)})
    t = transports({"bootstrap_servers": broker.address})
    too_new = t.send(metadata("a"), min_version=10)
    capped = t.send(metadata("b"), max_version=4)
    fixed = t.send(MetadataRequest[5](topics=None, allow_auto_topic_creation=False))
    wait_done(t, too_new, capped, fixed)
    assert isinstance(too_new.error, UnsupportedVersion) and too_new.sent_to is None
    assert capped.error is None and capped.request.API_VERSION == 4
    assert fixed.error is None and fixed.request.API_VERSION == 5
    assert [v for k, v, _ in broker.requests if k == ApiKey.Metadata] == [4, 5]
    assert t.ready(-1)  # an unsupported version is the request's problem, not the connection's


def test_api_versions_is_retried_at_the_version_the_broker_names(fake_broker, transports):
    def handler(api_key, version, request):
        if api_key == ApiKey.ApiVersions and version > 2:
            entry = ApiVersionsResponse.ApiVersion
            return ApiVersionsResponse[0](error_code=35, api_keys=[entry(api_key=18, min_version=0, max_version=2)])
        return None

    broker = fake_broker(handler)
    t = transports({"bootstrap_servers": broker.address})
    p = t.send(metadata("x"))
    wait_done(t, p)
    assert p.error is None
    assert [v for k, v, _ in broker.requests if k == ApiKey.ApiVersions] == [4, 2]
    assert broker.accepted == 1  # same connection, no reconnect


def test_pipelined_requests_complete_in_order(fake_broker, transports):
    broker = fake_broker()
    t = transports({"bootstrap_servers": broker.address})
    pendings = [t.send(metadata(f"topic-{i}"), tag=i) for i in range(50)]
    order: list[int] = []
    end = time.monotonic() + 5
    while len(order) < 50 and time.monotonic() < end:
        order += [p.tag for p in t.poll(100)]
    assert order == list(range(50))
    assert all(p.response.topics[0].name == f"topic-{p.tag}" for p in pendings)


def test_large_request_is_written_in_parts(fake_broker, transports):
    broker = fake_broker(read_delay=0.0005)
    t = transports({"bootstrap_servers": broker.address, "send_buffer_bytes": 8192})
    warm = t.send(metadata("warm-up"))
    wait_done(t, warm)
    names = [f"{i:07d}-" + "x" * 90 for i in range(20_000)]  # ~2 MB request
    p = t.send(metadata(*names))
    t.poll(0)
    conn = t.connection(-1)
    assert conn is not None and conn.has_output, "a 2 MB request should not fit the socket at once"
    wait_done(t, p, timeout=20)
    assert p.error is None, repr(p.error)
    assert len(p.response.topics) == 20_000
    assert broker.requests[-1][2].topics[-1].name == names[-1]


def test_large_response_is_reassembled(fake_broker, transports):
    records = bytes(range(256)) * 20_000  # 5 MB, arrives in many reads

    def handler(api_key, version, request):
        if api_key == ApiKey.Fetch:
            part = FetchResponse.FetchableTopicResponse.PartitionData(
                partition_index=0, error_code=0, high_watermark=1, records=records
            )
            return FetchResponse[version](
                throttle_time_ms=0,
                error_code=0,
                session_id=0,
                responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[part])],
            )
        return None

    broker = fake_broker(handler, versions=default_versions() | {int(ApiKey.Fetch): (4, 12)})
    t = transports({"bootstrap_servers": broker.address})
    p = t.send(fetch_request())
    wait_done(t, p, timeout=20)
    assert p.error is None, repr(p.error)
    assert bytes(p.response.responses[0].partitions[0].records) == records


def fetch_request() -> FetchRequest:
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1 << 24,
        isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic="t", partitions=[part])],
    )


# -- broken streams -----------------------------------------------------------------------------------


def test_bad_frame_closes_only_that_connection(fake_broker, transports):
    good = fake_broker(node_id=0)
    bad = fake_broker(lambda k, v, r: struct.pack(">i", 2**31 - 1) if k == ApiKey.Metadata else None, node_id=1)
    t = transports({"bootstrap_servers": good.address, "receive_buffer_max": 1 << 20})
    t.update_brokers({0: ("127.0.0.1", good.port), 1: ("127.0.0.1", bad.port)})
    doomed = [t.send(metadata("a"), node=1), t.send(metadata("b"), node=1)]
    fine = t.send(metadata("c"), node=0)
    wait_done(t, fine, *doomed)
    assert fine.error is None
    assert all(isinstance(p.error, FrameTooLarge) for p in doomed)
    assert all(p.error.node_id == 1 for p in doomed)
    assert "io_error" in triggers(t, 1)
    assert t.ready(0) and not t.ready(1)
    again = t.send(metadata("d"), node=0)
    wait_done(t, again)
    assert again.error is None


def test_wrong_correlation_id_fails_the_request(fake_broker, transports):
    def handler(api_key, version, request):
        if api_key == ApiKey.Metadata:
            response = MetadataResponse[version](
                throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=[]
            )
            response.with_header(correlation_id=999_999)
            return bytes(response.encode(header=True, framed=True))
        return None

    broker = fake_broker(handler)
    t = transports({"bootstrap_servers": broker.address})
    p = t.send(metadata("a"))
    wait_done(t, p)
    assert isinstance(p.error, CorrelationIdMismatch) and p.error.received == 999_999


def test_broker_closing_mid_response_is_connection_lost(fake_broker, transports):
    def handler(api_key, version, request):
        if api_key == ApiKey.Metadata:
            return struct.pack(">i", 100) + b"\x00" * 10  # then the connection closes below
        return None

    broker = fake_broker(handler)
    t = transports({"bootstrap_servers": broker.address})
    p = t.send(metadata("a"))
    end = time.monotonic() + 2
    while not broker.requests or broker.requests[-1][0] != ApiKey.Metadata:
        t.poll(20)
        assert time.monotonic() < end
    t.poll(50)
    broker.drop_clients()
    wait_done(t, p)
    assert isinstance(p.error, ConnectionLost)
    assert "middle of a response" in str(p.error)


# -- deadlines ----------------------------------------------------------------------------------------


def test_request_timeout_fails_it_and_recycles_the_connection(fake_broker, transports):
    broker = fake_broker()  # Fetch is never answered
    t = transports({"bootstrap_servers": broker.address, "reconnect_backoff_ms": 10})
    # Ready first: a request that times out still queued behind a slow handshake (CI under load
    # took over 200 ms once) fails alone and rightly leaves the connection be.
    wait_done(t, t.send(metadata("a")))
    p = t.send(fetch_request(), timeout_ms=200)
    started = time.monotonic()
    wait_done(t, p)
    assert p.sent_to == -1 and isinstance(p.error, RequestTimedOut)
    assert 0.18 < time.monotonic() - started < 1.5
    assert "io_error" in triggers(t, -1)
    after = t.send(metadata("a"))
    wait_done(t, after)
    assert after.error is None and broker.accepted == 2


def test_poll_wakes_for_a_deadline_instead_of_sleeping_its_timeout(fake_broker, transports):
    broker = fake_broker()
    t = transports({"bootstrap_servers": broker.address})
    p = t.send(fetch_request(), timeout_ms=150)
    started = time.monotonic()
    done: list[Pending] = []
    while not done and time.monotonic() - started < 5:
        done = t.poll(10_000)
    assert done == [p] and isinstance(p.error, RequestTimedOut)
    assert time.monotonic() - started < 1.0


def test_queued_request_waits_for_the_node_until_its_deadline(transports):
    t = transports(
        {"bootstrap_servers": f"127.0.0.1:{free_port()}", "reconnect_backoff_ms": 20, "reconnect_backoff_max_ms": 50}
    )
    started = time.monotonic()  # before send(): the deadline counts from it, and a loaded machine may be slow in it
    p = t.send(metadata("a"), timeout_ms=400)
    wait_done(t, p)
    elapsed = time.monotonic() - started
    assert isinstance(p.error, RequestTimedOut) and "waiting for a connection" in str(p.error)
    assert elapsed > 0.35, "Java-like: a request to a node in backoff waits, it does not fail fast"
    assert triggers(t, -1).count("backoff_elapsed") >= 2  # kept trying meanwhile


def test_queued_request_is_sent_once_the_broker_comes_up(fake_broker, transports):
    port = free_port()
    t = transports(
        {"bootstrap_servers": f"127.0.0.1:{port}", "reconnect_backoff_ms": 20, "reconnect_backoff_max_ms": 100}
    )
    p = t.send(metadata("late"), timeout_ms=5000)
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        t.poll(20)
    assert not p.done and "io_error" in triggers(t, -1)
    fake_broker(port=port)
    wait_done(t, p)
    assert p.error is None and p.response.topics[0].name == "late"


def test_connect_timeout_with_a_fake_clock(fake_broker, transports):
    broker = fake_broker()
    clock = FakeClock(1000.0)
    t = transports({"bootstrap_servers": broker.address, "socket_connection_setup_timeout_ms": 500}, clock=clock)
    p = t.send(metadata("a"), timeout_ms=10_000)
    assert t.connection_state(-1) == "connecting"
    assert t.next_wakeup_ms() == 1500.0
    clock.advance(501)
    t.poll(0)  # the deadline is seen before the connect completes
    assert triggers(t, -1)[-1] == "connect_timed_out"
    assert t.connection_state(-1) == "backoff" and not p.done


def test_handshake_timeout_with_a_fake_clock(fake_broker, transports):
    broker = fake_broker(lambda k, v, r: SILENT if k == ApiKey.ApiVersions else None)
    clock = FakeClock()
    t = transports({"bootstrap_servers": broker.address, "request_timeout_ms": 300}, clock=clock)
    p = t.send(metadata("a"))
    end = time.monotonic() + 2
    while t.connection_state(-1) != "api_versions" or not broker.requests:
        t.poll(10)
        assert time.monotonic() < end
    clock.advance(300)
    t.poll(0)
    assert "handshake_timed_out" in triggers(t, -1)
    assert isinstance(p.error, RequestTimedOut)


# -- SASL verdicts -------------------------------------------------------------------------------------


def test_sasl_plain_exchange(fake_broker, transports):
    def handler(api_key, version, request):
        if api_key == ApiKey.SaslHandshake:
            return SaslHandshakeResponse[version](error_code=0, mechanisms=["PLAIN"])
        if api_key == ApiKey.SaslAuthenticate:
            return SaslAuthenticateResponse[version](
                error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=0
            )
        return None

    broker = fake_broker(handler)
    t = transports(
        {
            "bootstrap_servers": broker.address,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "alice",
            "sasl_plain_password": "s3cret",
        }
    )
    p = t.send(metadata("a"))
    wait_done(t, p)
    assert p.error is None
    keys = [k for k, _, _ in broker.requests]
    assert keys == [ApiKey.ApiVersions, ApiKey.SaslHandshake, ApiKey.SaslAuthenticate, ApiKey.Metadata]
    assert bytes(broker.requests[2][2].auth_bytes) == b"\x00alice\x00s3cret"
    assert triggers(t, -1) == ["connect", "connected", "versions_known", "authenticated"]


def test_rejected_mechanism_fails_waiting_requests_at_once_and_backs_off_the_max(fake_broker, transports):
    def handler(api_key, version, request):
        if api_key == ApiKey.SaslHandshake:
            return SaslHandshakeResponse[version](error_code=33, mechanisms=["SCRAM-SHA-512"])
        return None

    broker = fake_broker(handler)
    clock = FakeClock()
    t = transports(
        {
            "bootstrap_servers": broker.address,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "bob",
            "sasl_plain_password": "hunter2",
            "reconnect_backoff_max_ms": 7000,
        },
        clock=clock,
    )
    p = t.send(metadata("a"))
    end = time.monotonic() + 3
    while not p.done:
        t.poll(10)
        assert time.monotonic() < end
    assert isinstance(p.error, AuthenticationError) and "SCRAM-SHA-512" in str(p.error)
    assert "hunter2" not in str(p.error) + repr(t) + repr(t.settings)
    assert triggers(t, -1)[-1] == "authentication_failed"
    conn = t.connection(-1)
    assert conn is not None and conn.machine.next_deadline == clock.now_ms() + 7000
    again = t.send(metadata("b"))  # during the backoff: the same verdict, at once
    assert again.done and isinstance(again.error, AuthenticationError)
    unrouted = t.send(metadata("c"))
    t.poll(0)
    assert isinstance(unrouted.error, AuthenticationError)


# -- routing, threads, lifecycle --------------------------------------------------------------------


def test_unknown_node_fails_with_node_not_ready(transports):
    t = transports({"bootstrap_servers": "127.0.0.1:1"})
    p = t.send(metadata("a"), node=42)
    assert p.done and isinstance(p.error, NodeNotReady)
    assert t.poll(0) == [p]


def test_unrouted_requests_use_whichever_bootstrap_server_answers(fake_broker, transports):
    broker = fake_broker()
    t = transports({"bootstrap_servers": f"127.0.0.1:{free_port()},{broker.address}", "reconnect_backoff_ms": 10})
    pendings = [t.send(metadata(f"t{i}")) for i in range(3)]
    wait_done(t, *pendings)
    assert all(p.error is None and p.sent_to == -2 for p in pendings)


def test_update_brokers_retires_bootstrap_and_follows_moves(fake_broker, transports):
    first, second = fake_broker(node_id=7), fake_broker(node_id=7)
    t = transports({"bootstrap_servers": first.address})
    boot = t.send(metadata())
    wait_done(t, boot)
    assert t.least_loaded_node() == -1
    t.update_brokers({7: ("127.0.0.1", first.port)})
    assert t.connection(-1) is None, "an idle bootstrap connection closes once brokers are known"
    assert t.least_loaded_node() == 7
    p = t.send(metadata("a"))
    wait_done(t, p)
    assert p.sent_to == 7 and t.ready(7)
    t.update_brokers({7: ("127.0.0.1", second.port)})  # the broker moved
    moved = t.send(metadata("b"), node=7)
    wait_done(t, moved)
    assert moved.error is None and second.accepted == 1
    stuck = t.send(fetch_request(), node=7)  # unanswered, then the node leaves the cluster
    t.poll(50)
    t.update_brokers({})
    assert isinstance(stuck.error, ConnectionLost) and "no longer" in str(stuck.error)


def test_only_the_io_thread_may_send_or_poll(fake_broker, transports):
    broker = fake_broker()
    t = transports({"bootstrap_servers": broker.address})
    t.poll(0)
    errors: list[BaseException] = []

    def other() -> None:
        for call in (lambda: t.poll(0), lambda: t.send(metadata("x"))):
            try:
                call()
            except RuntimeError as exc:
                errors.append(exc)
        t.wakeup()  # allowed from anywhere

    worker = threading.Thread(target=other)
    worker.start()
    worker.join(5)
    assert len(errors) == 2 and all("I/O thread" in str(e) for e in errors)
    assert t.io_thread == threading.get_ident()
    assert t.poll(0) == []


def test_wakeup_interrupts_a_blocked_poll(transports):
    t = transports({"bootstrap_servers": "127.0.0.1:1"})
    timer = threading.Timer(0.1, t.wakeup)
    started = time.monotonic()
    timer.start()
    try:
        assert t.poll(10_000) == []
    finally:
        timer.cancel()
    assert 0.05 < time.monotonic() - started < 1.0


def test_close_fails_everything_outstanding(fake_broker, transports):
    broker = fake_broker()
    t = transports({"bootstrap_servers": broker.address})
    warm = t.send(metadata("a"))
    wait_done(t, warm)
    in_flight = t.send(fetch_request())
    t.poll(20)
    t.update_brokers({0: ("127.0.0.1", free_port())})
    queued = t.send(metadata("b"), node=0)
    t.close()
    assert isinstance(in_flight.error, ConnectionLost) and isinstance(queued.error, ConnectionLost)
    assert set(t.poll(0)) == {in_flight, queued}
    late = t.send(metadata("c"))
    assert isinstance(late.error, ConnectionLost)
    t.close()  # idempotent


# -- configuration ---------------------------------------------------------------------------------


def test_settings_read_kafka_python_and_dotted_keys_and_hide_secrets():
    s = KafkaSettings.from_config(
        {
            "bootstrap.servers": "[::1]:9093,broker",
            "request_timeout_ms": 1234,
            "security_protocol": "sasl_plaintext",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "u",
            "sasl_plain_password": "pw-SECRET",
        }
    )
    assert s.bootstrap_servers == (("::1", 9093), ("broker", 9092))
    assert s.request_timeout_ms == 1234 and s.security_protocol == "SASL_PLAINTEXT"
    assert "pw-SECRET" not in repr(s)
    assert parse_servers(["a:1", " b:2 "]) == (("a", 1), ("b", 2))
    with pytest.raises(ValueError, match="sasl_mechanism"):
        KafkaSettings.from_config({"security_protocol": "SASL_SSL"})
    with pytest.raises(ValueError, match="port"):
        parse_servers("host:99999")


def test_a_consumer_config_object_is_accepted():
    from fsm_consumer._config import ConsumerConfig

    cfg = ConsumerConfig.from_kwargs(bootstrap_servers="127.0.0.1:9999", reconnect_backoff_max_ms=2000)
    t = KafkaTransport(cfg)
    try:
        assert t.settings.bootstrap_servers == (("127.0.0.1", 9999),)
        assert t.settings.reconnect_backoff_max_ms == 2000 and t.settings.client_id.startswith("fsm-consumer")
    finally:
        t.close()


def test_what_a_client_will_send_is_made_ready_at_each_handshake_at_the_version_that_connection_picks(
    fake_broker, transports
):
    """kafka-python compiles a request's encoder (and this codec its response's decoders) at their first use, 2-8 ms:
    the requests a client declares with will_send() are compiled when a connection's versions become known, at the
    version it would send; one the broker does not speak, or whose codecs cannot be made, is left to its sending."""
    from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

    from fsm_consumer.protocol import ShareAcknowledgeRequest
    from fsm_consumer.transport._codec import _decoders

    spoken = default_versions() | {int(ApiKey.OffsetCommit): (0, 7)}
    spoken.pop(int(ApiKey.ShareAcknowledge), None)
    broker = fake_broker(versions=spoken)
    t = transports({"bootstrap_servers": broker.address})
    commit_encoders = OffsetCommitRequest._struct._compiled_encoders
    ack_encoders = ShareAcknowledgeRequest._struct._compiled_encoders
    commit_encoders.pop((7, False, False), None)
    _decoders.cache_clear()
    acks_before = set(ack_encoders)
    # not a request: making its codecs fails, and the handshake goes on (only a head start; its sending would say)
    t.will_send([type("NotARequest", (), {}), OffsetCommitRequest, ShareAcknowledgeRequest])
    assert (7, False, False) not in commit_encoders  # nothing before a connection says its versions
    wait_done(t, t.send(metadata("a")))  # the bootstrap connection's handshake
    assert (7, False, False) in commit_encoders  # v7: the highest both sides speak
    assert set(ack_encoders) == acks_before  # not spoken there: nothing made, no error
    hits = _decoders.cache_info().hits
    _decoders(OffsetCommitResponse[7])
    assert _decoders.cache_info().hits == hits + 1  # its answer's decoders were made at the handshake too
