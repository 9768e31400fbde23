"""A wait the user should hear about: what the member is waiting for once it has taken ``FIRST_MS``, then
again every ``EVERY_MS`` while it lasts (issue 49: no silent waits). Sans-IO: the manager that owns one
says when a wait starts and ends and asks ``due(now)`` in its ``poll``; this only keeps the times.
"""

from __future__ import annotations

import math

FIRST_MS = 5_000.0  # longer than Apache Kafka's default initial rebalance delay (3 s): a normal join is quiet
EVERY_MS = 30_000.0


class SlowWait:
    """One wait at a time: ``start`` begins it (a new one replaces the old), ``stop`` ends it."""

    def __init__(self) -> None:
        self.what: str | None = None
        self.since = 0.0
        self.told = 0  # notices given for this wait
        self._next = math.inf

    def start(self, what: str, now: float) -> None:
        self.what, self.since, self.told, self._next = what, now, 0, now + FIRST_MS

    def stop(self) -> None:
        self.what, self._next = None, math.inf

    def due(self, now: float) -> float | None:
        """The milliseconds waited so far when a notice is due now (and the next one scheduled), else None."""
        if self.what is None or now < self._next:
            return None
        self.told += 1
        self._next = now + EVERY_MS
        return now - self.since

    def wait(self, now: float) -> float:
        """Milliseconds until the next notice (the loop must wake for it), inf when nothing is waited for."""
        return math.inf if self.what is None else max(0.0, self._next - now)
