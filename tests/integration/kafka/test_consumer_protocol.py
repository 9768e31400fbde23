"""The consumer group protocol (KIP-848, group_protocol="consumer") on Apache Kafka: fsm_consumer members
beside Kafka's own Java consumer and librdkafka, all speaking ConsumerGroupHeartbeat; the broker assigns."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "group"))  # importlib mode: the group harness
sys.path.insert(0, str(Path(__file__).parent))

from group_harness import Member, assert_disjoint, describe, stop_all, wait_until  # noqa: E402
from kafka_peers import JavaPeer, RdkafkaPeer, compile_peer, produce_spread  # noqa: E402

from fsm_consumer import Consumer, TopicPartition  # noqa: E402

pytestmark = pytest.mark.brokers("kafka")

PARTITIONS = 8
KIP848 = dict(group_protocol="consumer", auto_commit_interval_ms=200)


def covers(members, partitions: int) -> bool:
    owned = [m.owned() for m in members]
    return all(owned) and sorted(p for o in owned for p in o) == list(range(partitions))


def committed(kafka, group: str, topic: str, partitions: int) -> dict[int, int | None]:
    reader = Consumer(bootstrap_servers=kafka.bootstrap_servers, group_id=group, enable_auto_commit=False)
    try:
        return {p: reader.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        reader.close()


def test_two_members_share_the_partitions_and_hand_them_over_on_leaving(kafka):
    topic = f"kip848-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    produced = produce_spread(kafka, topic, 20_000, PARTITIONS)
    first = Member(kafka.bootstrap_servers, group, topic, "fsm0", **KIP848)
    second = None
    try:
        wait_until(
            lambda: covers([first], PARTITIONS),
            30,
            "the first member to own every partition",
            lambda: describe([first]),
        )
        second = Member(kafka.bootstrap_servers, group, topic, "fsm1", **KIP848)
        members = [first, second]
        wait_until(
            lambda: covers(members, PARTITIONS) and all(m.state == "stable" for m in members),
            30,
            "the two members to split the partitions",
            lambda: describe(members),
        )
        assert len(first.owned()) == len(second.owned()) == PARTITIONS // 2  # the broker's uniform assignor
        assert first.generation > 1 and second.generation > 0  # epochs, as the broker bumps them
        first.stop()
        # stable, not only owning: the assigned callback runs before the reconciliation ends, and the
        # rebalance is counted when it ends (figures read earlier missed it, once in a CI run)
        wait_until(
            lambda: covers([second], PARTITIONS) and second.state == "stable",
            30,
            "the second member to own everything",
            lambda: describe(members),
        )
        wait_until(
            lambda: {x for m in members for x in m.consumed} >= produced,
            60,
            "every record to be consumed",
            lambda: describe(members),
        )
        figures = second.consumer.metrics_flat()
    finally:
        stop_all([first, second])
    assert_disjoint([first, second])
    assert not first.errors and not second.errors, (first.errors, second.errors)
    assert figures["group-protocol"] == "consumer" and figures["member-epoch"] >= 1
    assert figures["assignment-epoch"] >= 1 and figures["rebalance-total"] >= 2  # joined, then took over


def test_fsm_java_and_librdkafka_members_join_and_leave_while_records_flow(kafka, tmp_path):
    """The acceptance of issue 27: 2 fsm_consumer members + 1 Java consumer + 1 librdkafka consumer, all on the
    consumer protocol; a member leaves and another joins while 100,000 records flow over 8 partitions."""
    topic = f"kip848-mixed-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    group = f"kip848-mixed-{uuid.uuid4().hex[:8]}"
    classes = compile_peer(kafka, tmp_path)
    produced = produce_spread(kafka, topic, 40_000, PARTITIONS)
    fsm: list = []
    members: list = []
    try:
        fsm += [Member(kafka.bootstrap_servers, group, topic, f"fsm{i}", **KIP848) for i in range(2)]
        members += fsm
        members.append(RdkafkaPeer(kafka, group, topic, "consumer"))
        members.append(JavaPeer(kafka, classes, group, topic, "consumer"))

        def explain() -> str:
            return f"{describe(fsm)}; peers own {[sorted(m.owned()) for m in members if m not in fsm]}"

        wait_until(lambda: covers(members, PARTITIONS), 90, "four members covering the topic, disjoint", explain)
        produced |= produce_spread(kafka, topic, 20_000, PARTITIONS)
        fsm[0].stop()  # leaves while records flow
        produced |= produce_spread(kafka, topic, 20_000, PARTITIONS)
        late = Member(kafka.bootstrap_servers, group, topic, "fsm2", **KIP848)
        fsm.append(late)
        members.append(late)
        live = [m for m in members if m is not fsm[0]]
        wait_until(lambda: covers(live, PARTITIONS), 90, "the group to settle again after the leave and join", explain)
        produced |= produce_spread(kafka, topic, 20_000, PARTITIONS)  # the newcomer's share too

        def consumed() -> set:
            return {x for m in members for x in list(m.consumed)}

        wait_until(
            lambda: consumed() >= produced,
            120,
            "every record to be consumed",
            lambda: f"{len(consumed() & produced)} of {len(produced)}; {explain()}",
        )
        final = [m.owned() for m in live]
        time.sleep(1)  # a last auto-commit of what was consumed
    finally:
        stop_all(members)
    assert len(produced) == 100_000
    assert sorted(p for o in final for p in o) == list(range(PARTITIONS)), "disjoint and complete"
    assert all(m.consumed for m in members), [(m.name, len(m.consumed)) for m in members]
    assert_disjoint(members)
    # every committed offset is at or below what its partition's consumers processed (+1: the next to read)
    highest: dict[int, int] = {}
    for p, o in {x for m in members for x in m.consumed}:
        highest[p] = max(highest.get(p, -1), o)
    for p, offset in committed(kafka, group, topic, PARTITIONS).items():
        assert offset is not None and offset <= highest[p] + 1, (p, offset, highest[p])
    assert not any(m.errors for m in fsm), [m.errors for m in fsm]


def test_a_rolling_upgrade_to_the_consumer_protocol_and_back_loses_nothing_and_commits_nothing_backwards(
    kafka, tmp_path
):
    """Point 4 of issue 27: a running classic group (two fsm_consumer members and a Java consumer, range) is
    restarted member by member onto the consumer protocol (Kafka converts the group online when the first
    member of the new protocol joins), then back; records flow all along."""
    topic = f"kip848-upgrade-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    group = f"kip848-upgrade-{uuid.uuid4().hex[:8]}"
    classes = compile_peer(kafka, tmp_path)
    classic = dict(partition_assignment_strategy=["range"], session_timeout_ms=10000, heartbeat_interval_ms=1000)
    produced = produce_spread(kafka, topic, 10_000, PARTITIONS)
    everyone: list = []
    commits: list[dict[int, int | None]] = []

    def start(slot: int, protocol: str):
        if slot == 2:
            peer = JavaPeer(kafka, classes, group, topic, "range" if protocol == "classic" else "consumer")
        elif protocol == "classic":
            peer = Member(kafka.bootstrap_servers, group, topic, f"fsm{slot}-{len(everyone)}", **classic)
        else:
            peer = Member(kafka.bootstrap_servers, group, topic, f"fsm{slot}-{len(everyone)}", **KIP848)
        everyone.append(peer)
        return peer

    try:
        live = [start(slot, "classic") for slot in range(3)]

        def explain() -> str:
            return (
                f"{describe([m for m in live if isinstance(m, Member)])}; all own {[sorted(m.owned()) for m in live]}"
            )

        wait_until(lambda: covers(live, PARTITIONS), 90, "the classic group to settle", explain)
        for protocol in ("consumer", "classic"):
            for slot in range(3):
                live[slot].stop()  # a clean restart: revokes, commits, leaves
                live[slot] = start(slot, protocol)
                produced |= produce_spread(kafka, topic, 5_000, PARTITIONS)
                wait_until(
                    lambda: covers(live, PARTITIONS), 90, f"the group to settle, slot {slot} on {protocol}", explain
                )
                commits.append(committed(kafka, group, topic, PARTITIONS))

        def consumed() -> set:
            return {x for m in everyone for x in list(m.consumed)}

        wait_until(
            lambda: consumed() >= produced,
            120,
            "every record to be consumed",
            lambda: f"{len(consumed() & produced)} of {len(produced)}; {explain()}",
        )
    finally:
        stop_all(everyone)
    assert len(produced) == 40_000
    assert_disjoint(everyone)
    for p in range(PARTITIONS):  # the group's commits, read after every step, never went backwards
        seen = [c[p] for c in commits if c[p] is not None]
        assert seen == sorted(seen), (p, seen)
    assert not any(m.errors for m in everyone if isinstance(m, Member)), [
        m.errors for m in everyone if isinstance(m, Member)
    ]


def test_a_member_frozen_past_the_rebalance_timeout_loses_its_partitions_and_the_others_go_on(kafka):
    """Fencing, as issue 27 asks: the application thread of one member stops polling while the group hands
    half its partitions to a newcomer; past the rebalance timeout (max_poll_interval_ms) it is out of the
    group, the newcomer reads everything without waiting for it, and when it polls again
    on_partitions_lost runs (no commit for those partitions) and it joins again."""
    topic = f"kip848-freeze-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=PARTITIONS)
    group = f"kip848-freeze-{uuid.uuid4().hex[:8]}"
    produced = produce_spread(kafka, topic, 8_000, PARTITIONS)
    frozen = Member(kafka.bootstrap_servers, group, topic, "frozen", max_poll_interval_ms=3000, **KIP848)
    other = None
    try:
        wait_until(
            lambda: covers([frozen], PARTITIONS), 30, "the first member to own everything", lambda: describe([frozen])
        )
        wait_until(lambda: len(frozen.consumed) >= 8_000, 30, "the first records", lambda: describe([frozen]))
        frozen.paused_polling.set()  # its application thread stops; its background thread heartbeats on
        time.sleep(0.5)  # the poll under way (50 ms at most) returns first
        paused_at = time.monotonic()
        other = Member(kafka.bootstrap_servers, group, topic, "other", **KIP848)
        produced |= produce_spread(kafka, topic, 8_000, PARTITIONS)
        wait_until(
            lambda: covers([other], PARTITIONS) and {x for x in other.consumed} >= produced - set(frozen.consumed),
            30,
            "the newcomer to own and read everything while the other is frozen",
            lambda: describe([frozen, other]),
        )
        out_at = frozen.consumer._group.membership.epoch
        frozen.paused_polling.clear()
        wait_until(
            lambda: frozen.owned() and covers([frozen, other], PARTITIONS),
            30,
            "the frozen member to lose its partitions, join again and get its share",
            lambda: describe([frozen, other]),
        )
        lost = [h for h in frozen.consumer._group.membership.history if h[0] == "lost"]
        triggers = frozen.triggers()
    finally:
        stop_all([frozen, other])
    assert lost and {tp.partition for tp in lost[0][1]} == set(range(PARTITIONS)), lost
    # out by its own poll timer (it runs while a callback is awaited, as Java's), or by the broker's fencing
    assert "poll_resumed" in triggers and ("poll_timer_expired" in triggers or "fenced_error" in triggers), triggers
    assert out_at >= 0
    # one reader at a time, from what each member handed out: after the pause the frozen member hands out a
    # partition only once it is its own again, after the newcomer's last record of it
    for p in range(PARTITIONS):
        later = [t for t in frozen.delivery_times[p] if t > paused_at]
        if later:
            assert min(later) > max(other.delivery_times[p], default=0.0), p
    highest: dict[int, int] = {}
    for p, o in set(frozen.consumed) | set(other.consumed):
        highest[p] = max(highest.get(p, -1), o)
    for p, offset in committed(kafka, group, topic, PARTITIONS).items():
        assert offset is None or offset <= highest[p] + 1, (p, offset, highest[p])


def test_a_pattern_subscription_is_resolved_on_the_client(kafka):
    """subscribe(pattern=...) is matched here, with Python's semantics and flags, as Java matches a
    java.util.regex.Pattern, and goes out as SubscribedTopicNames (never as the broker's RE2J regex): every
    matching topic is assigned, a topic created later included; an IGNORECASE pattern matches by its flags;
    ``.*`` leaves out the internal topics (exclude_internal_topics). The review saw the text sent as the
    broker's regex: 288 records of __consumer_offsets handed out for ``.*`` and the flags dropped."""
    import re

    stem = f"kip848re{uuid.uuid4().hex[:6]}"
    kafka.create_topic(f"{stem}-a", partitions=2)
    kafka.create_topic(f"{stem}-b", partitions=2)
    kafka.create_topic(f"other-{stem}", partitions=2)  # not matched: the pattern is anchored at both ends
    kafka.create_topic(f"{stem.upper()}-UP", partitions=1)  # matched only by the flag
    heartbeats: list = []

    def member(pattern, group: str):
        from fsm_consumer._config import ConsumerConfig
        from fsm_consumer.transport import KafkaTransport

        settings = dict(
            bootstrap_servers=kafka.bootstrap_servers,
            group_id=group,
            group_protocol="consumer",
            metadata_max_age_ms=1000,
        )
        transport = KafkaTransport(ConsumerConfig.from_kwargs(**settings))
        real_send = transport.send

        def send(request, *args, **kw):
            if type(request).__name__ == "ConsumerGroupHeartbeatRequest":
                heartbeats.append(request)
            return real_send(request, *args, **kw)

        transport.send = send
        c = Consumer(transport=transport, **settings)
        c.subscribe(pattern=pattern)
        return c

    def owned(c) -> set[tuple[str, int]]:
        c.poll(timeout_ms=50)
        return {(tp.topic, tp.partition) for tp in c.assignment()}

    c = member(re.compile(f"{stem}-[a-z]+", re.IGNORECASE), f"g-{stem}")
    try:
        every = {(f"{stem}-{t}", p) for t in "ab" for p in (0, 1)} | {(f"{stem.upper()}-UP", 0)}
        wait_until(lambda: owned(c) == every, 30, "both topics and the upper-case one")
        kafka.create_topic(f"{stem}-c", partitions=1)
        wait_until(lambda: (f"{stem}-c", 0) in owned(c), 30, "the topic created later")
        assert not any(t.startswith("other-") for t, _ in owned(c))
        assert heartbeats and all(h.subscribed_topic_regex is None for h in heartbeats)
        assert any(f"{stem.upper()}-UP" in (h.subscribed_topic_names or []) for h in heartbeats)
    finally:
        c.close()
    everything = member(".*", f"g-all-{stem}")
    try:
        wait_until(lambda: (f"{stem}-a", 0) in owned(everything), 30, "every topic")
        got = [r for _ in range(20) for recs in everything.poll(timeout_ms=50).values() for r in recs]
        assert not any(t.startswith("__") for t, _ in owned(everything)), sorted(owned(everything))
        assert not any(r.topic.startswith("__") for r in got)
    finally:
        everything.close()


def test_a_parallel_consumer_on_the_consumer_protocol_hands_each_record_to_one_member(kafka):
    """ParallelConsumer over consumer-protocol members: a second member joins midway; every record is handled,
    none by both (its revocation drains and commits before the broker hands a partition over)."""
    from fsm_consumer.parallel import ParallelConsumer

    topic = f"kip848-par-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, partitions=4)
    everything = produce_spread(kafka, topic, 20_000, 4)
    group = f"kip848-par-{uuid.uuid4().hex[:8]}"
    handled: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
    lock = threading.Lock()
    runners: dict[str, ParallelConsumer] = {}

    def handler_for(name):
        def handler(record):
            time.sleep(0.0005)
            with lock:
                handled[name].append((record.partition, record.offset))
                if len(set(handled["a"]) | set(handled["b"])) >= len(everything):
                    for r in runners.values():
                        r.stop()

        return handler

    def member(name):
        c = Consumer(
            bootstrap_servers=kafka.bootstrap_servers,
            group_id=group,
            group_protocol="consumer",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        c.subscribe([topic])
        runners[name] = ParallelConsumer(c, handler_for(name), parallelism=4)
        errors: list = []
        thread = threading.Thread(target=lambda: _run(runners[name], errors), daemon=True)
        thread.start()
        return c, thread, errors

    consumers: list[Consumer] = []
    ca, ta, ea = member("a")
    consumers.append(ca)
    try:
        wait_until(lambda: len(handled["a"]) > 3000, 60, "member a to handle 3000 records")
        cb, tb, eb = member("b")
        consumers.append(cb)
        ta.join(120)
        tb.join(120)
    finally:
        for r in runners.values():
            r.stop()
        for c in consumers:  # also when the wait above failed: no consumer left running
            c.close()
    assert not ea and not eb, (ea, eb)
    a, b = set(handled["a"]), set(handled["b"])
    assert b, "member b never handled a record"
    assert a | b == everything
    assert not a & b, f"{len(a & b)} records handled by both members"
    assert len(handled["a"]) == len(a) and len(handled["b"]) == len(b)


def _run(runner, errors: list) -> None:
    try:
        runner.run()
    except BaseException as exc:  # handed to the test
        errors.append(exc)
