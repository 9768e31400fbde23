"""ParallelConsumer against the embedded broker: key order, crash, rebalance, metadata overflow."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from fsm_consumer import Consumer, TopicPartition
from fsm_consumer.errors import ConfigError
from fsm_consumer.parallel import HandlerFailedError, ParallelConsumer, PartitionProgress

CHILD = Path(__file__).with_name("_parallel_child.py")
FAST_GROUP = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}  # Tansu holds a first join ~3 s


def group_consumer(broker, **kw) -> Consumer:
    return Consumer(
        bootstrap_servers=broker.bootstrap_servers,
        group_id=kw.pop("group_id", f"g-{uuid.uuid4().hex[:8]}"),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **FAST_GROUP,
        **kw,
    )


def run_in_thread(pc: ParallelConsumer) -> tuple[threading.Thread, list]:
    errors: list = []

    def target():
        try:
            pc.run()
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, errors


def wait_until(predicate, timeout_s: float, what: str, explain=None) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s} s waiting for {what}" + (f": {explain()}" if explain else "")
            )
        time.sleep(0.02)


def committed_done(consumer: Consumer, tp: TopicPartition) -> set[int]:
    """Offsets whose completion the group has committed: below the offset, or in its metadata."""
    found = consumer.committed(tp, metadata=True)
    if found is None:
        return set()
    progress = PartitionProgress.restore(found.offset, found.metadata)
    below = set(range(found.offset))
    beyond = {o for o in range(found.offset, found.offset + 100_000) if not progress.receive(o)}
    return below | beyond


def test_records_of_a_key_are_handled_one_at_a_time_in_offset_order(broker, make_topic, produce):
    topic = make_topic(partitions=4)
    total = 50_000
    produce(topic, total, key=lambda i: b"key-%d" % (i % 200), value=b"x")
    consumer = group_consumer(broker)
    consumer.subscribe([topic])
    order: dict[tuple[int, bytes], list[int]] = {}
    running: set[bytes] = set()
    overlaps: list = []
    lock = threading.Lock()
    rng = random.Random(1)

    def handler(record):
        with lock:
            if record.key in running:
                overlaps.append((record.partition, record.offset))
            running.add(record.key)
        time.sleep(rng.random() * 0.002)
        with lock:
            running.discard(record.key)
            order.setdefault((record.partition, record.key), []).append(record.offset)
            if sum(map(len, order.values())) == total:
                pc.stop()

    with ParallelConsumer(consumer, handler, parallelism=16) as pc:
        thread, errors = run_in_thread(pc)
        thread.join(120)
    assert not thread.is_alive() and not errors
    metrics = pc.metrics()
    assert not overlaps, f"a key ran twice at once: {overlaps[:5]}"
    assert sum(map(len, order.values())) == total
    assert len({k for _, k in order}) == 200
    for (partition, key), offsets in order.items():
        assert offsets == sorted(offsets), (partition, key)
        assert len(set(offsets)) == len(offsets)
    assert metrics["completed"] == total and metrics["failed"] == 0
    ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(4)])
    assert {tp: consumer.committed(tp) for tp in ends} == ends  # run() ended with everything committed
    consumer.close()


def test_a_history_records_each_handled_record_and_the_checker_sees_key_order(broker, make_topic, produce, tmp_path):
    """history_path on the consumer: a ParallelConsumer adds a line per handler call; rule K holds."""
    import json

    from fsm_consumer.history import check, load

    topic = make_topic(partitions=2)
    total = 600
    produce(topic, total, key=lambda i: b"key-%d" % (i % 7), value=b"x")
    path = tmp_path / "member.jsonl"
    consumer = group_consumer(broker, history_path=str(path))
    consumer.subscribe([topic])
    done = []

    def handler(record):
        time.sleep(0.0005)
        done.append(record.offset)
        if len(done) == total:
            pc.stop()

    with ParallelConsumer(consumer, handler, parallelism=8) as pc:
        thread, errors = run_in_thread(pc)
        thread.join(60)
    assert not thread.is_alive() and not errors
    ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(2)])
    consumer.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    handled = [e for e in lines if e["event"] == "handled"]
    assert len(handled) == total and all(e["outcome"] == "ok" for e in handled)
    assert len({e["key"] for e in handled}) == 7 and all(e["t_start"] <= e["t"] for e in handled)
    assert {tuple(e["tp"]) for e in lines if e["event"] == "parallel_restart"} == {(topic, 0), (topic, 1)}
    assert any(e["event"] == "transition" and e["machine"].startswith("parallel/") for e in lines)
    result = check(load([path]), produced={topic: {tp.partition: end for tp, end in ends.items()}})
    assert result.ok, result.format()


def test_a_killed_process_leaves_no_committed_record_to_handle_again(broker, make_topic, produce, tmp_path):
    topic = make_topic(partitions=4)
    total = 20_000
    everything = set(produce(topic, total, key=lambda i: b"k%d" % (i % 50), value=b"x"))
    group = f"crash-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first, second = tmp_path / "first.log", tmp_path / "second.log"

    def start(log: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(CHILD), broker.bootstrap_servers, group, topic, str(log), str(total)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def lines(log: Path) -> list[tuple[int, int]]:
        if not log.exists():
            return []
        return [tuple(map(int, line.split())) for line in log.read_text().splitlines() if line.count(" ") == 1]

    proc = start(first)
    try:
        wait_until(lambda: len(lines(first)) > 4000 or proc.poll() is not None, 60, "the first run to handle 4000")
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    reader = group_consumer(broker, group_id=group)
    tps = [TopicPartition(topic, p) for p in range(4)]
    committed = {(tp.partition, o) for tp in tps for o in committed_done(reader, tp)}
    reader.close()
    handled_first = lines(first)
    assert handled_first and committed, "the first run committed nothing before it was killed"
    assert committed <= set(handled_first), "a completion was committed that the log does not hold"
    assert len(committed) < total, "the first run finished before it was killed"

    proc = start(second)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err[-3000:]
    handled_second = lines(second)
    assert set(handled_first) | set(handled_second) == everything  # at least once
    again = committed & set(handled_second)
    assert not again, f"{len(again)} records handled again although their completion was committed"
    assert len(set(handled_second)) == len(handled_second)


def test_a_second_member_joining_takes_partitions_without_double_handling(broker, make_topic, produce):
    topic = make_topic(partitions=4)
    total = 20_000
    everything = set(produce(topic, total, key=lambda i: b"k%d" % (i % 100), value=b"x"))
    group = f"rebalance-{uuid.uuid4().hex[:8]}"
    handled: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
    lock = threading.Lock()
    strategy = {"partition_assignment_strategy": ["cooperative-sticky"]}

    def handler_for(name):
        def handler(record):
            time.sleep(random.random() * 0.004)  # a's run alone lasts ~10 s: b's join (~3 s on Tansu) lands midway
            with lock:
                handled[name].append((record.partition, record.offset))
                if len(set(handled["a"]) | set(handled["b"])) >= total:
                    pa.stop()
                    pb.stop()

        return handler

    ca = group_consumer(broker, group_id=group, **strategy)
    ca.subscribe([topic])
    cb = group_consumer(broker, group_id=group, **strategy)
    pa = ParallelConsumer(ca, handler_for("a"), parallelism=4)
    pb = ParallelConsumer(cb, handler_for("b"), parallelism=4)
    ta, ea = run_in_thread(pa)
    try:
        wait_until(lambda: len(handled["a"]) > 3000, 60, "member a to handle 3000 records")
        cb.subscribe([topic])
        tb, eb = run_in_thread(pb)
        wait_until(lambda: len(handled["b"]) > 0 or not ta.is_alive(), 60, "member b to get partitions")
        ta.join(120)
        tb.join(120)
    finally:
        pa.stop()
        pb.stop()
        ta.join(30)
    assert not ea and not eb
    a, b = set(handled["a"]), set(handled["b"])
    assert b, "member b never handled a record"
    assert a | b == everything
    both = a & b
    assert not both, f"{len(both)} records handled by both members, e.g. {sorted(both)[:5]}"
    assert len(handled["a"]) == len(a) and len(handled["b"]) == len(b)
    ca.close()
    cb.close()


def test_a_stuck_record_blocks_only_its_partition_when_the_metadata_would_overflow(broker, make_topic, produce):
    topic = make_topic(partitions=2)
    per_partition = 6000
    rng = random.Random(3)
    keys = [b"k%d" % rng.randrange(5) for _ in range(per_partition)]  # irregular: zlib cannot fold the gaps
    keys[3] = b"stuck"
    keys[3 + 1 :] = [b"stuck" if k in (b"k0", b"k1") else k for k in keys[3 + 1 :]]  # 2/5 wait behind it
    for p in range(2):
        produce(topic, per_partition, partition=p, key=lambda i: keys[i], value=b"x")
    consumer = group_consumer(broker)
    consumer.subscribe([topic])
    release = threading.Event()
    handled = {0: set(), 1: set()}
    lock = threading.Lock()

    def handler(record):
        if (record.partition, record.offset) == (0, 3):
            release.wait(60)  # holds the gap open; its key's later records wait behind it
        with lock:
            handled[record.partition].add(record.offset)
            if sum(map(len, handled.values())) == 2 * per_partition:
                pc.stop()

    limit = 1024
    pc = ParallelConsumer(consumer, handler, parallelism=8, max_in_flight=3000, metadata_limit=limit)
    thread, errors = run_in_thread(pc)
    try:
        snapshots: list = []

        def blocked_now() -> bool:
            snapshots.append(pc.metrics()["partitions"].get(f"{topic}-0", {}))
            return snapshots[-1].get("state") == "blocked"

        wait_until(blocked_now, 60, "partition 0 to be blocked")
        blocked = snapshots[-1]
        # records handed out before the block may still complete and grow it; the commit keeps what fits
        assert blocked["metadata-bytes"] > limit - 256
        assert blocked["committable"] == 3
        wait_until(
            lambda: len(handled[1]) == per_partition,
            60,
            "partition 1 to be handled meanwhile",
            lambda: (len(handled[1]), pc.metrics()),
        )

        def stalled() -> bool:  # only the stuck key's records are left, and the partition stays blocked
            before = len(handled[0])
            time.sleep(0.5)
            return len(handled[0]) == before and pc.metrics()["partitions-blocked"] == 1

        wait_until(stalled, 60, "partition 0 to stall, blocked", lambda: pc.metrics())
        assert len(handled[0]) < per_partition
        time.sleep(1.5)  # a commit interval: what was committed fits the limit, truncated or not
        part = pc.metrics()["partitions"][f"{topic}-0"]
        assert part["committed"] == 3 and 0 < part["metadata-committed-bytes"] <= limit
        release.set()
        thread.join(60)
    finally:
        release.set()
        pc.stop()
        thread.join(30)
    assert not errors
    assert len(handled[0]) == per_partition
    assert pc.metrics()["partitions-blocked"] == 0
    assert consumer.paused() == set()  # what run() paused is resumed: the consumer is the user's
    assert consumer.committed(TopicPartition(topic, 0)) == per_partition
    consumer.close()


def test_a_failing_handler_is_retried_then_dead_lettered_or_raised(broker, make_topic, produce):
    topic = make_topic(partitions=1)
    produce(topic, 20, key=b"k", value=lambda i: b"v%d" % i)
    attempts: dict[int, int] = {}
    dead: list[int] = []
    done: list[int] = []

    def flaky(record):
        attempts[record.offset] = attempts.get(record.offset, 0) + 1
        if record.offset == 5 and attempts[record.offset] < 3:
            raise RuntimeError("flaky")  # succeeds on its third attempt
        if record.offset == 9:
            raise RuntimeError("poison")
        done.append(record.offset)
        if len(done) + len(dead) == 20:
            pc.stop()

    consumer = group_consumer(broker)
    consumer.subscribe([topic])
    with ParallelConsumer(
        consumer,
        flaky,
        parallelism=4,
        retries=2,
        retry_backoff_ms=10,
        on_failure=lambda record, exc: dead.append(record.offset),
    ) as pc:
        thread, errors = run_in_thread(pc)
        thread.join(60)
    assert not errors
    assert dead == [9] and attempts[9] == 3 and attempts[5] == 3
    assert done == [o for o in range(20) if o != 9]  # one key: in offset order, past the dead letter
    assert pc.metrics()["retried"] == 4 and pc.metrics()["dead-lettered"] == 1
    assert consumer.committed(TopicPartition(topic, 0)) == 20
    consumer.close()

    seen: list[int] = []

    def poison(record):
        if record.offset == 12:
            raise ValueError("bad record")
        seen.append(record.offset)

    consumer = group_consumer(broker)
    consumer.subscribe([topic])
    with ParallelConsumer(consumer, poison, parallelism=4, revoke_timeout_ms=60_000) as pc:
        thread, errors = run_in_thread(pc)
        wait_until(lambda: pc.metrics()["failed"] == 1, 60, "offset 12 to fail")
        failed_at = time.monotonic()
        thread.join(60)
        took = time.monotonic() - failed_at
    # no waiting for the failed record to finish: it counts out of its partition at once
    assert took < 10, f"run() raised {took:.1f} s after the failure (revoke_timeout_ms is 60 s)"
    assert len(errors) == 1 and isinstance(errors[0], HandlerFailedError)
    assert f"{topic}-0@12" in str(errors[0]) and isinstance(errors[0].__cause__, ValueError)
    assert seen == list(range(12))
    assert consumer.committed(TopicPartition(topic, 0)) == 12  # completed work only
    consumer.close()


class SeekOnAssignment:
    """The user's listener: seeks each assigned partition back to ``offset`` (a classic replay)."""

    def __init__(self, consumer: Consumer, offset: int) -> None:
        self.consumer = consumer
        self.offset = offset
        self.assigned: list[TopicPartition] = []

    def on_partitions_assigned(self, assigned) -> None:
        for tp in assigned:
            self.consumer.seek(tp, self.offset)
        self.assigned.extend(assigned)

    def on_partitions_revoked(self, revoked) -> None:
        pass


def test_a_seek_below_the_committed_offset_handles_the_records_again(broker, make_topic, produce):
    topic = make_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    produce(topic, 30, key=lambda i: b"k%d" % (i % 3), value=b"x")
    group = f"seek-{uuid.uuid4().hex[:8]}"
    handled: list[int] = []
    lock = threading.Lock()

    def handler(record):
        with lock:
            handled.append(record.offset)
            if len(handled) == expected:
                pc.stop()

    consumer = group_consumer(broker, group_id=group)
    consumer.subscribe([topic])
    expected = 30
    with ParallelConsumer(consumer, handler, parallelism=4) as pc:
        thread, errors = run_in_thread(pc)
        thread.join(60)
    assert not errors and sorted(handled) == list(range(30))
    assert consumer.committed(tp) == 30
    consumer.close()

    handled.clear()
    consumer = group_consumer(broker, group_id=group)
    listener = SeekOnAssignment(consumer, 10)  # below the group's committed 30
    consumer.subscribe([topic], listener=listener)
    expected = 20
    with ParallelConsumer(consumer, handler, parallelism=4) as pc:
        thread, errors = run_in_thread(pc)
        thread.join(60)
    assert not thread.is_alive() and not errors, errors
    assert listener.assigned == [tp]
    assert sorted(handled) == list(range(10, 30))  # handled again from the sought offset, once each
    assert consumer.committed(tp) == 30
    consumer.close()


def test_an_async_handler_runs_on_one_event_loop(broker, make_topic, produce):
    import asyncio

    topic = make_topic(partitions=2)
    produce(topic, 400, key=lambda i: b"k%d" % (i % 8), value=b"x")
    loops: set[int] = set()
    order: dict[tuple[int, bytes], list[int]] = {}
    concurrent = [0, 0]

    async def handler(record):
        loops.add(id(asyncio.get_running_loop()))
        concurrent[0] += 1
        concurrent[1] = max(concurrent[1], concurrent[0])
        await asyncio.sleep(0.002)
        concurrent[0] -= 1
        order.setdefault((record.partition, record.key), []).append(record.offset)
        if sum(map(len, order.values())) == 400:
            pc.stop()

    consumer = group_consumer(broker)
    consumer.subscribe([topic])
    with ParallelConsumer(consumer, handler, parallelism=8) as pc:
        thread, errors = run_in_thread(pc)
        thread.join(60)
    assert not errors and len(loops) == 1
    assert concurrent[1] > 1  # keys ran at once on the one loop
    assert all(v == sorted(v) for v in order.values()) and sum(map(len, order.values())) == 400
    consumer.close()


def test_bad_arguments_name_what_is_wrong(broker):
    auto = Consumer(bootstrap_servers=broker.bootstrap_servers, group_id="g", enable_auto_commit=True)
    with pytest.raises(ConfigError, match="enable_auto_commit=False") as err:
        ParallelConsumer(auto, print)
    assert err.value.key == "enable_auto_commit"
    auto.close()
    consumer = group_consumer(broker)
    for kw, key in (
        ({"ordering": "random"}, "ordering"),
        ({"parallelism": 0}, "parallelism"),
        ({"max_in_flight": -1}, "max_in_flight"),
        ({"retries": -1}, "retries"),
    ):
        with pytest.raises(ConfigError) as err:
            ParallelConsumer(consumer, print, **kw)
        assert err.value.key == key
    consumer.close()


def test_a_drain_that_outlasts_revoke_timeout_gives_the_partition_up(broker, make_topic, produce):
    """A handler still running when revoke_timeout_ms runs out: the revoked partition is released without
    waiting longer (its unfinished records are not committed by this member); the rebalance goes on."""
    from fsm_consumer.machines import add_observer, remove_observer

    topic = make_topic(partitions=2)
    produce(topic, 200, key=lambda i: b"k%d" % i, value=b"x")
    group = f"drain-{uuid.uuid4().hex[:8]}"
    strategy = {"partition_assignment_strategy": ["cooperative-sticky"]}
    release = threading.Event()
    started = threading.Event()

    def handler(record):
        started.set()
        release.wait(30)  # stuck until the test lets it go

    timed_out = []

    def observe(rec):
        if rec.machine == "parallel" and rec.trigger == "drain_timed_out":
            timed_out.append(rec)

    add_observer(observe)
    ca = group_consumer(broker, group_id=group, **strategy)
    ca.subscribe([topic])
    cb = group_consumer(broker, group_id=group, **strategy)
    pa = ParallelConsumer(ca, handler, parallelism=2, revoke_timeout_ms=300)
    ta, ea = run_in_thread(pa)
    stop_b = threading.Event()

    def poll_b():
        cb.subscribe([topic])
        while not stop_b.is_set():
            cb.poll(timeout_ms=100)

    tb = threading.Thread(target=poll_b, daemon=True)
    try:
        wait_until(started.is_set, 60, "member a to start a record")
        tb.start()
        wait_until(
            lambda: timed_out,
            60,
            "a revoked partition's drain to time out",
            explain=lambda: f"b owns {cb.assignment()}",
        )
        wait_until(lambda: cb.assignment(), 60, "member b to get its partition")
    finally:
        remove_observer(observe)
        release.set()
        pa.stop()
        ta.join(30)
        stop_b.set()
        tb.join(10)
        ca.close()
        cb.close()
    assert not ea, ea
