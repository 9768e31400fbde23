"""Per-key backoff (a node, a partition, a topic): exponential from ``retry_backoff_ms`` up to
``retry_backoff_max_ms`` with +-20% jitter, so a failure that repeats is retried a few times a
second at most, never in a tight loop."""

from __future__ import annotations

import random
from collections.abc import Hashable

_JITTER = 0.2


class Backoffs:
    def __init__(self, base_ms: float, max_ms: float, rng: random.Random | None = None) -> None:
        self.base_ms = float(base_ms)
        self.max_ms = float(max(base_ms, max_ms))
        self._rng = rng or random.Random()
        self._failures: dict[Hashable, int] = {}
        self._until: dict[Hashable, float] = {}

    def failed(self, key: Hashable, now: float) -> float:
        """One more consecutive failure of ``key``: returns when it may be tried again."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        term = self.base_ms * 2.0 ** min(n, 30)
        until = now + min(self.max_ms, term * self._rng.uniform(1 - _JITTER, 1 + _JITTER))
        self._until[key] = until
        return until

    def succeeded(self, key: Hashable) -> None:
        self._failures.pop(key, None)
        self._until.pop(key, None)

    def wait(self, key: Hashable, now: float) -> float:
        """ms until ``key`` may be tried (0: now)."""
        until = self._until.get(key)
        return 0.0 if until is None or until <= now else until - now

    def failures(self, key: Hashable) -> int:
        return self._failures.get(key, 0)

    def forget(self, keep) -> None:
        """Drop the keys ``keep(key)`` rejects (partitions no longer assigned)."""
        for key in [k for k in self._failures if not keep(k)]:
            self.succeeded(key)
