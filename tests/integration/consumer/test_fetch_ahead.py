"""Fetching ahead (``fetch_ahead=True``, specs/fetch.yaml) against a real broker: every record once and in
order whatever happens to the fetch ahead (a seek, an error answer), and on Apache Kafka the machine's
ahead states are really visited (Tansu 0.6 answers every batch it has at once, so its first fetch mostly
reaches the high watermark and nothing is fetched ahead)."""

from __future__ import annotations

import time

import pytest

from fsm_consumer.consumer import Consumer
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.machines import add_observer, remove_observer
from fsm_consumer.transport import FaultyTransport, KafkaTransport
from fsm_consumer.transport._faulty import set_error_codes

pa = pytest.importorskip("pyarrow")

pytestmark = pytest.mark.integration

NOT_LEADER_OR_FOLLOWER = 6


def _fill(send, topic: str, partitions: int, per_partition: int) -> None:
    """1 KB records in batches of 20: a 25 KB partition fetch size then takes one batch per fetch."""
    send(
        topic,
        [
            {"partition": i % partitions, "value": b"%06d" % (i // partitions) + b"." * 1000}
            for i in range(partitions * per_partition)
        ],
        config={"batch.num.messages": 20, "linger.ms": 20},
    )


@pytest.fixture
def fetch_moves():
    """The fetch machines' transitions while the test runs, as (source, trigger, dest)."""
    seen: list[tuple[str, str, str]] = []

    def note(rec) -> None:
        if rec.machine == "fetch":
            seen.append((rec.source, rec.trigger, rec.dest))

    add_observer(note)
    yield seen
    remove_observer(note)


@pytest.mark.parametrize("fetch_ahead", [False, True])
def test_every_record_once_in_order_with_a_seek_back(make_topic, send, make_consumer, broker, fetch_moves, fetch_ahead):
    """poll() and poll_batch() mixed, a seek back in the middle: every offset handed out once and in order,
    from the position; data fetched ahead of the old position is dropped. (Offsets, not the values: without
    idempotence librdkafka may retry a first batch to a new topic behind the second.)"""
    topic = make_topic(partitions=3)
    _fill(send, topic, 3, 600)
    consumer = make_consumer(fetch_ahead=fetch_ahead, max_partition_fetch_bytes=25_000)
    tps = [TopicPartition(topic, p) for p in range(3)]
    consumer.assign(tps)
    seen: dict[int, list[int]] = {p: [] for p in range(3)}
    sought = False
    deadline = time.monotonic() + 30
    turn = 0
    while sum(map(len, seen.values())) < 1800 and time.monotonic() < deadline:
        turn += 1
        if turn % 2:
            b = consumer.poll_batch(timeout_ms=100, max_records=53)
            for p, o in zip(b.column("partition").to_pylist(), b.column("offset").to_pylist(), strict=True):
                seen[p].append(o)
        else:
            for tp, records in consumer.poll(timeout_ms=100, max_records=41).items():
                seen[tp.partition] += [r.offset for r in records]
        if not sought and len(seen[0]) >= 500:
            consumer.seek(tps[0], 200)
            seen[0] = seen[0][:200]
            sought = True
    assert sought
    for p in range(3):
        assert seen[p] == list(range(600)), p
    assert [consumer.position(tp) for tp in tps] == [600, 600, 600]
    assert consumer.poll_batch(timeout_ms=200).num_rows == 0
    ahead = {m for m in fetch_moves if m[1] == "sent" and m[0] == "buffered"}
    if not fetch_ahead:
        assert not ahead  # Java's rule: never fetched while its fetch is buffered
    elif broker.kind == "kafka":
        assert ahead  # fetched from the end of a buffered fetch


class _SecondFetchFails(FaultyTransport):
    """The second Fetch answer comes back with NOT_LEADER_OR_FOLLOWER for every partition (a leader moving)."""

    fetches = 0

    def poll(self, timeout_ms):
        done = super().poll(timeout_ms)
        for pending in done:
            if pending.error is None and type(pending.response).__name__.startswith("Fetch"):
                self.fetches += 1
                if self.fetches == 2:
                    set_error_codes(pending.response, NOT_LEADER_OR_FOLLOWER)
        return done


def test_a_fetch_ahead_answered_with_an_error_leaves_the_buffered_fetch(make_topic, send, broker, fetch_moves):
    """Nothing is polled until the first fetch is buffered, so the second Fetch is the one ahead of it (on
    Kafka); its error answer leaves the buffered fetch, whose records are handed out, and the partition is
    fetched again from the end of it once the error's backoff has passed."""
    topic = make_topic(partitions=1)
    _fill(send, topic, 1, 300)
    config = dict(
        bootstrap_servers=broker.bootstrap_servers,
        auto_offset_reset="earliest",
        fetch_ahead=True,
        max_partition_fetch_bytes=25_000,
    )
    transport = _SecondFetchFails(KafkaTransport(config))
    tp = TopicPartition(topic, 0)
    with Consumer(transport=transport, **config) as consumer:
        consumer.assign([tp])
        deadline = time.monotonic() + 10
        while transport.fetches < 3 and time.monotonic() < deadline:  # the background thread fetches alone
            time.sleep(0.01)
        assert transport.fetches >= 3
        got: list[int] = []
        deadline = time.monotonic() + 20
        while len(got) < 300 and time.monotonic() < deadline:
            got += [r.offset for r in consumer.poll(timeout_ms=100).get(tp, [])]
        assert got == list(range(300))
        assert consumer.position(tp) == 300
    if broker.kind == "kafka":
        assert ("ahead_in_flight", "unanswered", "buffered") in fetch_moves
