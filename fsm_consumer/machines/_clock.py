"""Clocks in monotonic milliseconds. Machines and managers are handed one; only the
engine constructs the real one, tests drive a FakeClock."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> float: ...


class MonotonicClock:
    """The wall's monotonic time; never goes back, unaffected by NTP steps."""

    __slots__ = ()

    def now_ms(self) -> float:
        return time.monotonic() * 1000.0


class FakeClock:
    """A clock that moves only when told to."""

    __slots__ = ("_now",)

    def __init__(self, start_ms: float = 0.0) -> None:
        self._now = float(start_ms)

    def now_ms(self) -> float:
        return self._now

    def advance(self, ms: float) -> float:
        if ms < 0:
            raise ValueError(f"a clock cannot go back (advance by {ms} ms)")
        self._now += ms
        return self._now

    def set(self, now_ms: float) -> None:
        if now_ms < self._now:
            raise ValueError(f"a clock cannot go back ({now_ms} < {self._now})")
        self._now = float(now_ms)
