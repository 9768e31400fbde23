"""Errors and recovery: retriable Fetch errors refresh metadata and retry, an out-of-range
position is reset by policy, a broker restart is survived; never a record skipped or repeated."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from kafka.errors import OffsetOutOfRangeError

from fsm_consumer.broker import EmbeddedBroker, start_broker
from fsm_consumer.consumer import Consumer
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.transport import FaultyTransport, KafkaTransport

pytestmark = pytest.mark.integration

NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE = 6, 3, 1


class _CountingTransport(FaultyTransport):
    """FaultyTransport that also counts the requests sent, by API name.

    ``partition_scope=True``: FaultyTransport.fail() sets every error_code of a response, the
    top-level one too, which in a Fetch answer is a session-level error; a broker reports
    NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION or OFFSET_OUT_OF_RANGE per partition, so the
    top-level code is put back to 0 and only the partitions carry the error."""

    def __init__(self, inner, *, partition_scope: bool = True) -> None:
        super().__init__(inner)
        self.sent: Counter[str] = Counter()
        self.partition_scope = partition_scope

    def send(self, request, node=None, **kwargs):
        self.sent[type(request).__name__.removesuffix("Request")] += 1
        return super().send(request, node, **kwargs)

    def poll(self, timeout_ms):
        done = super().poll(timeout_ms)
        if self.partition_scope:
            for pending in done:
                response = pending.response
                if type(response).__name__.startswith("Fetch") and getattr(response, "error_code", 0):
                    response.error_code = 0
        return done


def _drain(consumer, count, timeout=10.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=100, max_records=count - len(out)).values():
            out.extend(records)
    return out


@pytest.mark.parametrize("scope", ["partition", "response"])
@pytest.mark.parametrize(
    "code", [NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION], ids=["not-leader", "unknown-partition"]
)
def test_retriable_fetch_errors_refresh_metadata_and_retry(code, scope, broker, make_topic, send, collect):
    topic = make_topic(partitions=2)
    count = 60
    send(topic, [{"partition": i % 2, "value": b"r%d" % i} for i in range(count)], each=False)
    config = dict(
        bootstrap_servers=broker.bootstrap_servers,
        auto_offset_reset="earliest",
        retry_backoff_ms=20,
        max_poll_records=7,
    )
    transport = _CountingTransport(KafkaTransport(config), partition_scope=scope == "partition")
    with Consumer(transport=transport, **config) as consumer:
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        consumer.assign(tps)
        assert consumer.position(tps[0]) == 0 and consumer.position(tps[1]) == 0
        metadata_before = transport.sent["Metadata"]
        transport.fail("Fetch", code, times=3)
        got = collect(consumer, count, settle_ms=300)
        assert transport.injected["fail"] == 3
        assert transport.sent["Metadata"] >= metadata_before + 1, "no metadata refresh after the errors"
        assert transport.sent["Fetch"] >= 4  # three failed, then retried
        for p in (0, 1):
            offsets = [r.offset for r in got if r.partition == p]
            assert offsets == list(range(count // 2))  # each once, in order
        assert {consumer.position(tp) for tp in tps} == {count // 2}


def test_a_fetch_past_the_end(broker, make_topic, send, make_consumer, collect):
    """Apache Kafka answers OFFSET_OUT_OF_RANGE and the consumer resets by its policy (earliest here).
    Tansu 0.6 quirk: error 0 and no records; the consumer then simply waits there (as confluent-kafka
    does), and the reset tests below inject the error Kafka sends. If the Tansu run fails, Tansu now
    answers OFFSET_OUT_OF_RANGE itself."""
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    send(topic, [{"value": b"x"}], each=True)
    consumer = make_consumer(fetch_max_wait_ms=50)
    consumer.assign([tp])
    consumer.seek(tp, 1000)
    if broker.kind == "tansu":
        assert collect(consumer, 1, timeout=0.5) == []
        assert consumer.position(tp) == 1000
    else:
        assert [(r.offset, r.value) for r in collect(consumer, 1, timeout=5, settle_ms=100)] == [(0, b"x")]
        assert consumer.position(tp) == 1


@pytest.mark.parametrize("policy", ["earliest", "latest", "none"])
def test_offset_out_of_range_is_reset_by_policy(policy, broker, make_topic, send, collect):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    send(topic, [{"value": b"o%d" % i} for i in range(10)], each=True)  # exact end offset: 10
    config = dict(
        bootstrap_servers=broker.bootstrap_servers, auto_offset_reset=policy, retry_backoff_ms=20, fetch_max_wait_ms=50
    )
    transport = _CountingTransport(KafkaTransport(config))
    with Consumer(transport=transport, **config) as consumer:
        consumer.assign([tp])
        if broker.kind == "kafka":
            consumer.seek(tp, 1000)  # past the end: Apache Kafka answers OFFSET_OUT_OF_RANGE itself
        else:
            # Tansu does not (see the test above): the fault says it for the Fetch from 1000. The policy's
            # first position is fetched from at once; that Fetch must come back before the fault is
            # armed, or the fault lands on it (stale after the seek, and rightly ignored)
            if policy != "none":
                assert consumer.position(tp) == (0 if policy == "earliest" else 10)
            consumer.seek(tp, 1000)
            time.sleep(0.3)  # > fetch_max_wait_ms: a Fetch from the old position has been answered by now
            transport.fail("Fetch", OFFSET_OUT_OF_RANGE, times=1)
        if policy == "none":
            with pytest.raises(OffsetOutOfRangeError):
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    consumer.poll(timeout_ms=100)
            assert consumer.position(tp) == 1000  # left where it was: the application decides
            consumer.seek(tp, 8)
            assert [r.value for r in collect(consumer, 2, settle_ms=100)] == [b"o8", b"o9"]
            return
        if policy == "earliest":
            got = collect(consumer, 10, settle_ms=200)
            assert [r.offset for r in got] == list(range(10))
        else:
            deadline = time.monotonic() + 5
            while consumer.position(tp) == 1000 and time.monotonic() < deadline:
                assert consumer.poll(timeout_ms=50) == {}
            assert consumer.position(tp) == 10
            send(topic, [{"value": b"new"}], each=True)
            assert [(r.offset, r.value) for r in collect(consumer, 1, settle_ms=100)] == [(10, b"new")]
        assert transport.injected["fail"] == (1 if broker.kind == "tansu" else 0)


def test_broker_restart_mid_consumption(send):
    """A broker with S3 storage keeps its data over a restart; the consumer reconnects and
    resumes from its position."""
    # Tansu lingers on SIGTERM while clients are connected: a short grace keeps restart() quick
    # (S3 storage is written before a produce is acknowledged, so nothing is lost by the kill)
    with EmbeddedBroker(storage="s3", stop_grace=0.3) as own:
        own.create_topic("restart", partitions=2)
        before = 40
        send(
            "restart",
            [{"partition": i % 2, "value": b"b%d" % i} for i in range(before)],
            bootstrap_servers=own.bootstrap_servers,
        )
        config = dict(
            bootstrap_servers=own.bootstrap_servers,
            auto_offset_reset="earliest",
            reconnect_backoff_ms=20,
            reconnect_backoff_max_ms=200,
            retry_backoff_ms=20,
            request_timeout_ms=3000,
            fetch_max_wait_ms=100,
        )
        with Consumer(**config) as consumer:
            tps = [TopicPartition("restart", 0), TopicPartition("restart", 1)]
            consumer.assign(tps)
            got = _drain(consumer, 10)  # stop a quarter of the way
            assert len(got) == 10
            positions = {tp: consumer.position(tp) for tp in tps}
            assert sum(positions.values()) == len(got) < before

            own.restart()
            after = 30
            send(
                "restart",
                [{"partition": i % 2, "value": b"a%d" % i} for i in range(after)],
                bootstrap_servers=own.bootstrap_servers,
            )
            got.extend(_drain(consumer, before + after - len(got), timeout=20))
            extra = _drain(consumer, 1, timeout=0.3)
            assert extra == []
            for p in (0, 1):
                offsets = [r.offset for r in got if r.partition == p]
                assert offsets == list(range((before + after) // 2))  # no skip, no duplicate
            values = sorted(r.value for r in got)
            assert values == sorted([b"b%d" % i for i in range(before)] + [b"a%d" % i for i in range(after)])


def test_broker_crash_and_restart_mid_consumption(broker, send):
    """The broker killed with SIGKILL and started again on the same port and data, three times, each under
    a consumer mid-way: every record once, in order. On Apache Kafka each restart moves the partition's
    leader epoch on; a Fetch naming the epoch of the last record consumed was fenced for ever (nothing was
    fetched again after the first restart) until the Fetch named the metadata's."""
    own = start_broker(broker.kind, **({"storage": "s3", "stop_grace": 0.3} if broker.kind == "tansu" else {}))
    try:
        own.create_topic("crash", partitions=2)
        config = dict(
            bootstrap_servers=own.bootstrap_servers,
            auto_offset_reset="earliest",
            reconnect_backoff_ms=20,
            reconnect_backoff_max_ms=200,
            request_timeout_ms=3000,
            fetch_max_wait_ms=100,
        )
        sent = 0
        with Consumer(**config) as consumer:
            consumer.assign([TopicPartition("crash", 0), TopicPartition("crash", 1)])
            got = []
            for round_ in range(3):
                send(
                    "crash",
                    [{"partition": i % 2, "value": b"r%d-%d" % (round_, i)} for i in range(20)],
                    bootstrap_servers=own.bootstrap_servers,
                )
                sent += 20
                got.extend(_drain(consumer, sent - len(got), timeout=30))
                assert len(got) == sent, f"round {round_}: {len(got)} of {sent} records after the restart"
                own.kill()
                own.start()
            send("crash", [{"partition": 0, "value": b"last"}], bootstrap_servers=own.bootstrap_servers)
            got.extend(_drain(consumer, 1, timeout=30))
        for p in (0, 1):
            offsets = [r.offset for r in got if r.partition == p]
            assert offsets == list(range(len(offsets))) and offsets, (p, offsets)  # no skip, no duplicate
        assert got[-1].value == b"last" and len(got) == sent + 1
    finally:
        own.stop()
