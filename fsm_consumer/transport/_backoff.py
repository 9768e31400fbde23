"""Reconnect backoff: exponential, capped, with jitter so that clients do not reconnect in step."""

from __future__ import annotations

import random

__all__ = ["ReconnectBackoff"]

_JITTER = 0.2  # +-20%, as Kafka's Java client (ExponentialBackoff)


class ReconnectBackoff:
    """One node's backoff: ``base * 2**failures`` with +-20% jitter, never above ``max_ms``.

    Unlike Java (which jitters after capping and may exceed the max by 20%), the result is
    clamped to ``max_ms``: a user who sets a maximum gets at most that.
    """

    __slots__ = ("base_ms", "max_ms", "failures", "_rng")

    def __init__(self, base_ms: float, max_ms: float, rng: random.Random) -> None:
        if base_ms < 0 or max_ms < 0:
            raise ValueError("backoff durations must be >= 0")
        self.base_ms = float(base_ms)
        self.max_ms = float(max(base_ms, max_ms))
        self.failures = 0
        self._rng = rng

    def next_ms(self) -> float:
        """The backoff after one more consecutive failure."""
        term = self.base_ms * 2.0 ** min(self.failures, 60)
        self.failures += 1
        return min(self.max_ms, term * self._rng.uniform(1 - _JITTER, 1 + _JITTER))

    def maximum(self) -> float:
        """The backoff after a failure that retrying soon cannot fix (wrong credentials)."""
        self.failures += 1
        return self.max_ms

    def reset(self) -> None:
        """A connection got ready: the next failure starts from the base again."""
        self.failures = 0
