"""Assignment time for a large group: 100 members, 1000 partitions (10 topics x 100)."""

from __future__ import annotations

import time

import pytest

from fsm_consumer.assignors import Subscription, resolve
from fsm_consumer.assignors._builtin import encode_sticky_user_data

COUNTS = {f"topic-{i}": 100 for i in range(10)}
MEMBERS = [f"member-{i:03d}" for i in range(100)]
SUBS = {m: Subscription(topics=list(COUNTS)) for m in MEMBERS}


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_simple_assignors_are_fast(name):
    result, seconds = _timed(lambda: resolve(name).assign(COUNTS, SUBS))
    assert sum(len(a.partitions) for a in result.values()) == 1000
    assert seconds < 0.25, f"{name}: {seconds:.3f}s"


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_sticky_assignors_fresh_and_on_join(name):
    # kafka-python's sticky executor builds per-member lists of every partition
    # and re-sorts members on each placement: ~0.3-0.7s here. The bound only
    # catches a regression to something unusable.
    first, fresh_seconds = _timed(lambda: resolve(name).assign(COUNTS, SUBS))
    assert {len(a.partitions) for a in first.values()} == {10}

    def previous(m):
        if name == "sticky":
            return Subscription(topics=list(COUNTS), user_data=encode_sticky_user_data(first[m].partitions, 1))
        return Subscription(topics=list(COUNTS), owned_partitions=first[m].partitions, generation=1)

    grown = {m: previous(m) for m in MEMBERS} | {"member-new": Subscription(topics=list(COUNTS))}
    after, join_seconds = _timed(lambda: resolve(name).assign(COUNTS, grown))
    moved = sum(1 for m in MEMBERS for tp in first[m].partitions if tp not in after[m].partitions)
    assert moved == 1000 // 101
    print(f"\n{name}: fresh {fresh_seconds:.3f}s, one member joining {join_seconds:.3f}s")
    assert fresh_seconds < 5 and join_seconds < 5
