"""When the next heartbeat is due (sans-IO): one in flight at a time, every heartbeat_interval_ms,
sooner after a failure only by retry_backoff_ms."""

from __future__ import annotations


class HeartbeatTimer:
    def __init__(self, interval_ms: float, retry_backoff_ms: float) -> None:
        self.interval_ms = interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.in_flight = False
        self.due_at = 0.0
        self.sent_at: float | None = None
        self.last_ok: float | None = None
        self.last_rtt_ms: float | None = None

    def reset(self, now: float) -> None:
        """A new generation: first heartbeat one interval from now."""
        self.due_at = now + self.interval_ms
        self.in_flight = False

    def due(self, now: float) -> bool:
        return not self.in_flight and now >= self.due_at

    def wait(self, now: float) -> float:
        return float("inf") if self.in_flight else max(0.0, self.due_at - now)

    def sent(self, now: float) -> None:
        self.in_flight = True
        self.sent_at = now

    def answered(self, now: float, ok: bool) -> None:
        self.in_flight = False
        if ok:
            self.last_ok = now
            if self.sent_at is not None:
                self.last_rtt_ms = now - self.sent_at
            self.due_at = now + self.interval_ms
        else:
            self.due_at = now + self.retry_backoff_ms
