"""ShareConsumer against Apache Kafka 4.2 (share groups, KIP-932), and its refusal on Tansu (which has none).

Each Kafka test uses a fresh group whose ``share.auto.offset.reset`` is set to earliest before anyone joins
(a share group starts at the log's end by default), and a short record lock where the test waits one out.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid

import pytest

from fsm_consumer.errors import AcknowledgementFailedError, IllegalStateError
from fsm_consumer.machines import add_observer, remove_observer
from fsm_consumer.share import AcknowledgeType, ShareConsumer, ShareRecord
from fsm_consumer.share._admin import set_group_config


def _group(broker, **settings) -> str:
    group = f"share-{uuid.uuid4().hex[:10]}"
    set_group_config(broker.bootstrap_servers, group, {"share.auto.offset.reset": "earliest", **settings})
    return group


def _consumer(broker, group: str, topic: str, **config) -> ShareConsumer:
    return ShareConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=group, **config)


def _drain(consumer: ShareConsumer, want: int, timeout_s: float = 30.0, sizes: list | None = None) -> list[ShareRecord]:
    got: list[ShareRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=500)
        got.extend(batch)
        if sizes is not None and batch:
            sizes.append(len(batch))
    return got


@pytest.mark.brokers("kafka")
def test_implicit_mode_drains_every_record_once(broker, make_topic, produce):
    topic = make_topic(partitions=2)
    produce(topic, 40, value=lambda i: f"v{i}")
    group = _group(broker)
    with _consumer(broker, group, topic, max_poll_records=7) as consumer:
        sizes: list[int] = []
        records = _drain(consumer, 40, sizes=sizes)
        assert max(sizes) <= 7  # max_poll_records bounds each poll
        assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(40))
        assert len({(r.partition, r.offset) for r in records}) == 40
        assert all(r.delivery_count == 1 for r in records)
        now = time.monotonic()
        assert all(r.lock_deadline > now - 60 for r in records)
        consumer.commit_sync(timeout_ms=10_000)
    # accepted: a second member of the group finds nothing left
    with _consumer(broker, group, topic) as again:
        assert _drain(again, 1, timeout_s=4) == []


@pytest.mark.brokers("kafka")
def test_an_empty_fetch_made_ahead_pauses_fetching_ahead_until_one_made_after_records_came_brings_more(
    broker, make_topic, produce
):
    """specs/share_fetch_pacing.yaml on the broker: the fetch the first hand-out sends ahead comes back empty
    (nothing more was produced), so none goes ahead; records produced then come to a poll that waited, one more
    fetch goes ahead, brings records, and fetching ahead resumes. Every record is handed out once."""
    topic = make_topic()
    seen: list = []
    add_observer(seen.append)
    try:
        produce(topic, 5)
        with _consumer(broker, _group(broker), topic, max_poll_records=5) as consumer:
            first = _drain(consumer, 5)
            deadline = time.monotonic() + 10
            while ("fetching_ahead", "ahead_empty", "paused") not in _pacing(seen):
                assert time.monotonic() < deadline, _pacing(seen)
                time.sleep(0.01)
            for _ in range(3):  # three batches of ten: a waited fetch of one poll's worth takes the first
                produce(topic, 10)
            rest: list[ShareRecord] = []
            deadline = time.monotonic() + 30
            while len(rest) < 30 and time.monotonic() < deadline:
                batch = consumer.poll(timeout_ms=500)
                rest.extend(batch)
                if batch:
                    time.sleep(0.05)  # work: a fetch made ahead is answered meanwhile, not overtaken by a poll
    finally:
        remove_observer(seen.append)
    path = _pacing(seen)
    assert sorted(r.offset for r in first + rest) == list(range(35))
    assert path.index(("paused", "waited_filled", "retrying")) < path.index(
        ("retrying", "ahead_filled", "fetching_ahead")
    ), path


@pytest.mark.brokers("kafka")
def test_a_fetch_made_ahead_waits_at_the_broker_while_the_application_works(broker, make_topic):
    """specs/share_fetch_pacing.yaml's ahead_wait on the broker: an application that works 300 ms on each poll's
    records has its fetch made ahead wait at the broker (half its time between polls), so a record produced while
    it works comes back in that fetch: fetching ahead goes on (retrying -> fetching_ahead) where a fetch answered
    at once would have come back empty (retrying -> on_demand). The first fetch made ahead, before any time
    between polls is known, waits for nothing."""
    from confluent_kafka import Producer

    topic = make_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})

    def send(i: int) -> None:
        producer.produce(topic, value=f"r{i}".encode())
        assert producer.flush(10) == 0

    send(0)
    seen: list = []
    ahead_waits: list[int] = []
    add_observer(seen.append)
    try:
        with _consumer(broker, _group(broker), topic, fetch_max_wait_ms=500) as consumer:
            fetch = consumer._parts.fetch
            planned = fetch.poll

            def poll_and_note(now: float) -> list:
                intents = planned(now)
                ahead_waits.extend(i.max_wait_ms for i in intents if hasattr(i, "max_records") and not fetch.fetch_more)
                return intents

            fetch.poll = poll_and_note
            got = _drain(consumer, 1)
            for i in (1, 2):  # the application's work on each poll's records: 300 ms, a record produced meanwhile
                time.sleep(0.05)
                send(i)
                time.sleep(0.25)
                got.extend(_drain(consumer, 1))
            fetch.poll = planned
    finally:
        remove_observer(seen.append)
    path = _pacing(seen)
    assert [r.value for r in got] == [b"r0", b"r1", b"r2"], got
    assert ("retrying", "ahead_filled", "fetching_ahead") in path, path
    assert ("retrying", "ahead_empty", "on_demand") not in path, path
    # the first made ahead: no time known yet; the second: half of about 300 ms
    assert ahead_waits[0] == 0 and 140 <= ahead_waits[1] <= 250, ahead_waits


@pytest.mark.brokers("kafka")
def test_the_share_acknowledge_codecs_are_made_before_the_first_share_acknowledge(
    broker, make_topic, produce, monkeypatch
):
    """kafka-python compiles a request's encoder and its response's decoders at their first use (about 6 ms for
    ShareAcknowledge): the consumer tells its transport it will send ShareAcknowledge, and the transport makes
    them at each connection's handshake, at the version that connection picks, before the first ShareFetch; so the
    first ShareAcknowledge (a commit's, or close()'s) goes out without that cost in the middle of the records."""
    from fsm_consumer.protocol import ShareAcknowledgeRequest, ShareFetchRequest
    from fsm_consumer.transport import _kafka

    events: list[tuple[str, type, int | None]] = []
    prepare, send = _kafka.prepare_codec, _kafka.KafkaTransport.send

    def noted_prepare(request_cls: type, version: int) -> None:
        events.append(("prepare", request_cls, version))
        prepare(request_cls, version)

    def noted_send(self, request, node=None, **kw):
        events.append(("send", type(request), node))
        return send(self, request, node, **kw)

    monkeypatch.setattr(_kafka, "prepare_codec", noted_prepare)
    monkeypatch.setattr(_kafka.KafkaTransport, "send", noted_send)
    topic = make_topic()
    produce(topic, 3)
    with _consumer(broker, _group(broker), topic, share_acknowledgement_mode="explicit") as consumer:
        records = _drain(consumer, 3)
        for r in records:
            consumer.acknowledge(r)
        assert all(e is None for e in consumer.commit_sync(timeout_ms=10_000).values())
        # then close(): its sessions' closing ShareAcknowledge (the commit's acknowledgements may ride a ShareFetch)
    version = ShareAcknowledgeRequest.max_version  # 2: Apache Kafka 4.2 speaks it, as this client does
    prepared = [e for e in events if e[0] == "prepare"]
    assert prepared and {e[1:] for e in prepared} == {(ShareAcknowledgeRequest, version)}, events
    sends = [i for i, e in enumerate(events) if e[0] == "send"]
    first_fetch = next(i for i in sends if events[i][1] is ShareFetchRequest)
    first_ack = next((i for i in sends if events[i][1] is ShareAcknowledgeRequest), None)
    assert first_ack is not None, events
    assert events.index(prepared[0]) < first_fetch < first_ack, events  # at the bootstrap's handshake
    flexible = ShareAcknowledgeRequest.flexible_version_q(version)
    assert (version, flexible, flexible) in ShareAcknowledgeRequest._struct._compiled_encoders


def _pacing(seen: list) -> list[tuple[str, str, str]]:
    return [(r.source, r.trigger, r.dest) for r in list(seen) if r.machine == "share_fetch_pacing"]


@pytest.mark.brokers("kafka")
def test_explicit_release_redelivers_with_a_higher_count_and_reject_never(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 6, value=lambda i: f"v{i}")
    group = _group(broker)
    with _consumer(broker, group, topic, share_acknowledgement_mode="explicit") as consumer:
        first = _drain(consumer, 6)
        assert [r.offset for r in first] == list(range(6))
        for r in first:
            kind = {0: AcknowledgeType.RELEASE, 1: AcknowledgeType.REJECT}.get(r.offset, AcknowledgeType.ACCEPT)
            consumer.acknowledge(r, kind)
        results = consumer.commit_sync(timeout_ms=10_000)
        assert results and all(error is None for error in results.values()), results
        again = _drain(consumer, 1, timeout_s=10)
        assert [(r.offset, r.delivery_count) for r in again] == [(0, 2)]
        consumer.acknowledge(again[0], AcknowledgeType.ACCEPT)
        consumer.commit_sync(timeout_ms=10_000)
        assert _drain(consumer, 1, timeout_s=3) == []  # offset 1 was rejected: never again


@pytest.mark.brokers("kafka")
def test_explicit_mode_refuses_a_poll_before_every_record_is_acknowledged(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 3)
    with _consumer(broker, _group(broker), topic, share_acknowledgement_mode="explicit") as consumer:
        got = _drain(consumer, 3)
        consumer.acknowledge(got[0])
        with pytest.raises(IllegalStateError, match="acknowledge every record"):
            consumer.poll(timeout_ms=100)
        for r in got[1:]:
            consumer.acknowledge(r)
        assert consumer.poll(timeout_ms=100) == []


@pytest.mark.brokers("kafka")
def test_a_lock_that_runs_out_redelivers_and_the_late_accept_fails(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 2)
    group = _group(broker, **{"share.record.lock.duration.ms": "1000"})
    outcomes = []
    with _consumer(broker, group, topic, share_acknowledgement_mode="explicit") as slow:
        slow.set_acknowledgement_commit_callback(lambda offsets, error: outcomes.append((offsets, error)))
        got = _drain(slow, 2)
        assert all(r.lock_remaining_s() <= 1.0 for r in got)
        time.sleep(1.5)  # past the lock: the records went back to the group
        for r in got:
            slow.acknowledge(r)
        results = slow.commit_sync(timeout_ms=10_000)
        assert results, "the late acknowledgements are reported"
        assert all(isinstance(e, AcknowledgementFailedError) for e in results.values()), results
        assert outcomes and all(error is not None for _, error in outcomes)
        again = _drain(slow, 2, timeout_s=10)
        assert sorted((r.offset, r.delivery_count) for r in again) == [(0, 2), (1, 2)]
        for r in again:
            slow.acknowledge(r)
        assert all(e is None for e in slow.commit_sync(timeout_ms=10_000).values())


@pytest.mark.brokers("kafka")
def test_close_releases_what_was_not_acknowledged_at_once(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 5)
    group = _group(broker)  # locks of 5 s: a redelivery within 3 s is the close's release, not the lock
    first = _consumer(broker, group, topic, share_acknowledgement_mode="explicit")
    try:
        got = _drain(first, 5)
        assert len(got) == 5
    finally:
        first.close(timeout_ms=10_000)
    started = time.monotonic()
    with _consumer(broker, group, topic) as second:
        again = _drain(second, 5, timeout_s=10)
    assert sorted(r.offset for r in again) == [0, 1, 2, 3, 4]
    assert all(r.delivery_count == 2 for r in again)
    assert time.monotonic() - started < 4.5


@pytest.mark.brokers("kafka")
@pytest.mark.parametrize("acquire", ["batch_optimized", "record_limit"])
def test_members_share_one_partition_and_each_record_is_accepted_once(broker, make_topic, produce, acquire):
    """Three members, each polling on its own thread, on ONE partition: every record accepted exactly once (an
    acceptance the broker confirmed), and a record handed to a second member only after the first one's lock
    ran out (one holder at a time)."""
    topic = make_topic(partitions=1)
    produce(topic, 300)
    group = _group(broker)
    accepted: list[tuple[int, int]] = []  # (member, offset) of each acceptance the broker confirmed
    delivered: list[tuple[int, int, float, float]] = []  # (offset, member, handed out at, lock deadline)
    guard = threading.Lock()
    stop = threading.Event()

    def run(i: int) -> None:
        def confirmed(offsets, error) -> None:
            if error is None:
                with guard:
                    accepted.extend((i, o) for os in offsets.values() for o in os)

        with _consumer(broker, group, topic, max_poll_records=10, share_acquire_mode=acquire) as member:
            member.set_acknowledgement_commit_callback(confirmed)
            while not stop.is_set():
                for r in member.poll(timeout_ms=200):
                    with guard:
                        delivered.append((r.offset, i, time.monotonic(), r.lock_deadline))
            member.commit_sync(timeout_ms=10_000)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            with guard:
                if len({o for _, o in accepted}) == 300:
                    break
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    offsets = sorted(o for _, o in accepted)
    assert offsets == list(range(300)), f"{len(set(offsets))} distinct of 300 accepted, {len(offsets)} acceptances"
    by_offset: dict[int, list[tuple[float, float, int]]] = {}
    for offset, member, at, lock in delivered:
        by_offset.setdefault(offset, []).append((at, lock, member))
    for offset, times in by_offset.items():
        times.sort()
        for (_, lock, first), (at, _, second) in itertools.pairwise(times):
            assert at >= lock, f"offset {offset} handed to member {second} before member {first}'s lock ran out"


@pytest.mark.brokers("kafka")
def test_deserializer_failure_is_raised_and_the_record_can_be_rejected(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 3, value=lambda i: b"bad" if i == 1 else f"{i}".encode())

    def as_int(data: bytes) -> int:
        return int(data)

    with _consumer(broker, _group(broker), topic, value_deserializer=as_int) as consumer:
        got: list[ShareRecord] = []
        with pytest.raises(ValueError) as raised:
            for _ in range(40):
                got.extend(consumer.poll(timeout_ms=500))
        assert any("acknowledge_offset" in note for note in getattr(raised.value, "__notes__", ()))
        consumer.acknowledge_offset(topic, 0, 1, AcknowledgeType.REJECT)
        got.extend(_drain(consumer, 3 - len(got), timeout_s=5))
        assert sorted(r.value for r in got) == [0, 2]


@pytest.mark.brokers("tansu")
def test_tansu_has_no_share_groups_and_poll_says_so_within_two_seconds(broker, make_topic):
    topic = make_topic()
    started = time.monotonic()
    with ShareConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id="share-on-tansu") as consumer:
        with pytest.raises(Exception, match="does not support share groups") as raised:
            for _ in range(20):
                consumer.poll(timeout_ms=200)
    assert time.monotonic() - started < 2.5
    assert "Apache Kafka 4.2" in str(raised.value)


@pytest.mark.brokers("kafka")
def test_a_kafka_cluster_with_share_groups_switched_off_is_named_within_two_seconds(broker):
    """share.version=0 (kafka-storage format --feature): the broker refuses share groups; poll() says so. A
    second Kafka of its own (the session's has them on); ``broker`` only brings the skip when Kafka cannot run."""
    from fsm_consumer.broker import KafkaBroker

    with KafkaBroker(features={"share.version": 0}) as kafka:
        kafka.create_topic("no-shares", partitions=1)
        started = time.monotonic()
        with ShareConsumer("no-shares", bootstrap_servers=kafka.bootstrap_servers, group_id="g") as consumer:
            with pytest.raises(Exception, match="does not support share groups") as raised:
                for _ in range(20):
                    consumer.poll(timeout_ms=200)
        assert time.monotonic() - started < 2.5
    assert "Apache Kafka 4.2" in str(raised.value)


@pytest.mark.brokers("kafka")
def test_renew_keeps_a_slow_record_past_its_first_lock(broker, make_topic, produce):
    """RENEW (Kafka 4.2, KIP-1222): the record comes back from a later poll() under a fresh lock, with the same
    delivery count (it was never released), and accepting it then succeeds although the first lock is long gone."""
    topic = make_topic()
    produce(topic, 1)
    group = _group(broker, **{"share.record.lock.duration.ms": "2000"})
    with _consumer(broker, group, topic, share_acknowledgement_mode="explicit") as consumer:
        (record,) = _drain(consumer, 1)
        first_deadline = record.lock_deadline
        time.sleep(1.0)
        consumer.acknowledge(record, AcknowledgeType.RENEW)
        consumer.commit_sync(timeout_ms=10_000)
        (again,) = _drain(consumer, 1, timeout_s=5)
        assert (again.offset, again.delivery_count) == (0, 1)
        assert again.lock_deadline > first_deadline + 0.5
        time.sleep(max(0.0, first_deadline - time.monotonic()) + 0.3)  # past the first lock, within the renewed one
        assert again.lock_remaining_s() > 0
        consumer.acknowledge(again, AcknowledgeType.ACCEPT)
        assert all(e is None for e in consumer.commit_sync(timeout_ms=10_000).values())
        assert _drain(consumer, 1, timeout_s=3) == []


@pytest.mark.brokers("kafka")
def test_a_record_released_up_to_the_delivery_limit_is_archived(broker, make_topic, produce):
    """The broker's group.share.delivery.count.limit (5; Kafka 4.2 has no per-group setting for it): released at
    its fifth delivery, a record is archived and never delivered again."""
    topic = make_topic()
    produce(topic, 2)
    counts: list[tuple[int, int]] = []
    with _consumer(broker, _group(broker), topic, share_acknowledgement_mode="explicit") as consumer:
        for _ in range(5):
            for r in _drain(consumer, 1 if counts else 2, timeout_s=10):
                counts.append((r.offset, r.delivery_count))
                consumer.acknowledge(r, AcknowledgeType.RELEASE if r.offset == 0 else AcknowledgeType.ACCEPT)
            consumer.commit_sync(timeout_ms=10_000)
        assert sorted(counts) == [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 1)]
        assert _drain(consumer, 1, timeout_s=3) == []  # released at the limit: archived, never again


@pytest.mark.brokers("kafka")
def test_control_records_of_transactions_never_surface(broker, make_topic):
    from confluent_kafka import Producer

    topic = make_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(10)
    for values in ([b"a", b"b"], [b"c"]):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, value=v)
        producer.commit_transaction(10)
    with _consumer(broker, _group(broker), topic) as consumer:
        got = _drain(consumer, 3, timeout_s=15)
        assert [r.value for r in got] == [b"a", b"b", b"c"]
        assert [r.offset for r in got] == [0, 1, 3]  # 2 and 4 are the commit markers
        assert _drain(consumer, 1, timeout_s=2) == []


_HOLDER = """
import sys, time
from fsm_consumer import ShareConsumer
c = ShareConsumer(sys.argv[1], bootstrap_servers=sys.argv[2], group_id=sys.argv[3],
                  share_acknowledgement_mode="explicit")
got = []
while len(got) < int(sys.argv[4]):
    got.extend(c.poll(timeout_ms=500))
print("holding", len(got), flush=True)
time.sleep(120)
"""


@pytest.mark.brokers("kafka")
def test_a_member_killed_with_sigkill_releases_its_records_by_its_socket(broker, make_topic, produce, tmp_path):
    """kill -9 while holding acquired records: the broker releases them when the connection drops (its share
    session goes with it), well before their 20 s lock would run out."""
    import signal
    import subprocess
    import sys

    topic = make_topic()
    produce(topic, 5)
    group = _group(broker, **{"share.record.lock.duration.ms": "20000"})
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, topic, broker.bootstrap_servers, group, "5"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["holding", "5"]
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        with _consumer(broker, group, topic) as other:
            again = _drain(other, 5, timeout_s=15)
        assert sorted((r.offset, r.delivery_count) for r in again) == [(o, 2) for o in range(5)]
        assert time.monotonic() - killed < 10, "released by the socket, not by the 20 s lock"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
