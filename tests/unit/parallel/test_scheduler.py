"""The scheduler: a lane's records one at a time in order, lanes in parallel, holds and drops."""

from __future__ import annotations

import random
import threading
import time

import pytest

from fsm_consumer.fetch import TopicPartition
from fsm_consumer.parallel._scheduler import Job, Scheduler, lane_of

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def jobs(tp, keys, start=0):
    return [Job(tp, start + i, None, lane_of("key", tp, k)) for i, k in enumerate(keys)]


def test_lanes_by_ordering():
    assert lane_of("key", TP0, b"a") == (TP0, b"a")
    assert lane_of("key", TP0, None) == (TP0, None)  # a null key follows its partition
    assert lane_of("partition", TP0, b"a") == (TP0, None)
    assert lane_of("unordered", TP0, b"a") is None
    with pytest.raises(ValueError, match="ordering"):
        Scheduler("random", 4)


def test_deserialized_keys_name_lanes_and_an_unhashable_one_is_a_clear_error():
    # a key deserializer may return str, int or a tuple: equal keys share a lane and run in order
    s = Scheduler("key", 2)
    s.submit(jobs(TP0, ["k", "k", 7, (1, "x")]))
    taken = [s.try_take(w) for w in (0, 1, 0, 1)]
    offsets = sorted(j.offset for j in taken if j is not None)
    assert offsets == [0, 2, 3]  # "k"'s second record waits for its first
    assert lane_of("key", TP0, bytearray(b"a")) == (TP0, b"a")
    for unhashable in ({"id": 1}, [1, 2], (1, [2])):
        with pytest.raises(TypeError, match="ordering='partition'"):
            lane_of("key", TP0, unhashable)
    assert lane_of("partition", TP0, {"id": 1}) == (TP0, None)  # no lane by key: any key will do


def test_a_lane_hands_out_its_next_record_only_when_the_last_is_done():
    s = Scheduler("key", 2)
    s.submit(jobs(TP0, [b"a", b"a", b"b"]))
    first = s.try_take(0)
    second = s.try_take(1)
    assert {first.offset, second.offset} == {0, 2}  # a's second record waits for its first
    assert s.try_take(0) is None and s.try_take(1) is None
    s.done(first if first.offset == 0 else second)
    assert s.try_take(0).offset == 1
    assert s.queued == 0


def test_unordered_records_are_all_ready():
    s = Scheduler("unordered", 1)
    s.submit([Job(TP0, i, None, None) for i in range(3)])
    assert [s.try_take(0).offset for _ in range(3)] == [0, 1, 2]


def test_a_held_partition_hands_nothing_out_until_released():
    s = Scheduler("key", 2)
    s.hold(TP0)
    s.submit(jobs(TP0, [b"a", b"b"]) + jobs(TP1, [b"a"]))
    got = s.try_take(0) or s.try_take(1)
    assert got.tp == TP1
    assert s.try_take(0) is None and s.try_take(1) is None
    s.release(TP0)
    assert sorted(j.offset for j in (s.try_take(0), s.try_take(1))) == [0, 1]


def test_drop_forgets_the_queued_records_of_a_partition_only():
    s = Scheduler("key", 1)
    s.submit(jobs(TP0, [b"a", b"a", b"b"]) + jobs(TP1, [b"c"]))
    running = s.try_take(0)
    assert (running.tp, running.offset) == (TP0, 0)
    assert s.drop(TP0) == 2  # a's second record and b's: queued, not running
    left = s.try_take(0)
    assert (left.tp, left.offset) == (TP1, 0)
    assert s.try_take(0) is None
    s.done(running)  # a running job of a dropped partition finishes harmlessly
    s.done(left)
    assert s.queued == 0 and s.try_take(0) is None


def test_an_idle_worker_takes_ready_lanes_of_another_range():
    s = Scheduler("key", 8)
    s.submit(jobs(TP0, [b"k%d" % i for i in range(40)]))
    taken = [s.try_take(0) for _ in range(40)]  # worker 0 alone drains every range
    assert sorted(j.offset for j in taken) == list(range(40))


def test_threads_keep_each_key_in_order_and_never_run_a_key_twice_at_once():
    s = Scheduler("key", 8)
    rng = random.Random(7)
    keys = [b"k%d" % rng.randrange(20) for _ in range(3000)]
    seen: dict[bytes, list[int]] = {}
    running: set[bytes] = set()
    overlaps = []
    lock = threading.Lock()

    def worker(i):
        while True:
            job = s.take(i, timeout=2)
            if job is None:
                return
            key = job.lane[1]
            with lock:
                if key in running:
                    overlaps.append(job.offset)
                running.add(key)
            time.sleep(rng.random() / 10000)
            with lock:
                running.discard(key)
                seen.setdefault(key, []).append(job.offset)
            s.done(job)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for start in range(0, 3000, 500):  # submitted in pieces while workers run, as poll() does
        s.submit(jobs(TP0, keys[start : start + 500], start))
    deadline = time.monotonic() + 30
    while sum(map(len, seen.values())) < 3000 and time.monotonic() < deadline:
        time.sleep(0.01)
    s.close()
    for t in threads:
        t.join(5)
    assert not overlaps
    assert sum(map(len, seen.values())) == 3000
    for key, offsets in seen.items():
        assert offsets == sorted(offsets), key


def test_a_partition_held_below_an_offset_fills_holes_but_does_not_go_past_it():
    s = Scheduler("key", 1)
    s.submit(jobs(TP0, [b"a", b"b", b"c", b"b", b"a"]))  # offsets 0..4
    s.hold(TP0, below=3)  # offsets 0, 1, 2 may run
    taken = [s.try_take(0) for _ in range(3)]
    assert sorted(j.offset for j in taken) == [0, 1, 2]
    assert s.try_take(0) is None
    for j in taken:
        s.done(j)  # b's offset 3 and a's offset 4 are their lanes' heads now: past the bound
    assert s.try_take(0) is None and s.held_queued() == 2
    s.release(TP0)
    assert sorted(j.offset for j in (s.try_take(0), s.try_take(0))) == [3, 4]
