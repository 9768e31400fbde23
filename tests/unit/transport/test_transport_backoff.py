"""ReconnectBackoff (growth, jitter, cap) and the Waker socketpair."""

from __future__ import annotations

import random
import selectors
import threading
import time

import pytest

from fsm_consumer.transport import ReconnectBackoff, Waker


def test_backoff_doubles_with_jitter_until_the_cap():
    backoff = ReconnectBackoff(50, 1000, random.Random(7))
    values = [backoff.next_ms() for _ in range(8)]
    for i, value in enumerate(values[:5]):  # 50, 100, 200, 400, 800, each +-20%
        assert 50 * 2**i * 0.8 <= value <= 50 * 2**i * 1.2
    assert len(set(values[:5])) == 5
    assert values[5:] == [1000.0] * 3  # 1600 * 0.8 is already above the cap
    assert backoff.failures == 8


def test_backoff_is_reproducible_with_a_seeded_rng_and_resets():
    a = ReconnectBackoff(50, 1000, random.Random(1))
    b = ReconnectBackoff(50, 1000, random.Random(1))
    assert [a.next_ms() for _ in range(5)] == [b.next_ms() for _ in range(5)]
    a.reset()
    assert 40 <= a.next_ms() <= 60


def test_backoff_after_an_authentication_failure_is_the_maximum():
    backoff = ReconnectBackoff(50, 1000, random.Random(3))
    assert backoff.maximum() == 1000
    assert ReconnectBackoff(500, 100, random.Random()).maximum() == 500  # max below base: base wins


def test_backoff_rejects_negative_durations():
    with pytest.raises(ValueError):
        ReconnectBackoff(-1, 10, random.Random())


def test_waker_makes_select_return_and_drains():
    waker = Waker()
    selector = selectors.DefaultSelector()
    try:
        selector.register(waker, selectors.EVENT_READ)
        assert selector.select(0) == []
        timer = threading.Timer(0.05, waker.wake)
        started = time.monotonic()
        timer.start()
        events = selector.select(5)
        timer.join()
        assert len(events) == 1 and time.monotonic() - started < 1
        for _ in range(10_000):  # more wake-ups than the socket buffer holds: no error, no block
            waker.wake()
        waker.drain()
        assert selector.select(0) == []
    finally:
        selector.close()
        waker.close()
    waker.wake()  # after close: silently nothing
