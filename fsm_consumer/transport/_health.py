"""One node's connection health: consecutive failures, the last error, and when to tell the user.

Sans-IO: the connection reports each failure and each ready connection with its clock's time;
this decides which deserve a log line. A node that keeps failing gets one WARNING, then at most
one per ``WARN_INTERVAL_MS`` counting the failures it did not report, so a broker that is down
for an hour costs 120 lines instead of one per reconnect. Once the node is ready again after a
WARNING, one INFO says so: the last line about a node is always true.
"""

from __future__ import annotations

import logging

__all__ = ["WARN_INTERVAL_MS", "NodeHealth"]

WARN_INTERVAL_MS = 30_000.0

logger = logging.getLogger("fsm_consumer.transport")


def _times(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


class NodeHealth:
    """``failures`` in a row since the node was last ready, ``last_error`` the latest one's reason."""

    __slots__ = ("failures", "last_error", "_warned_at", "_unreported", "_warned")

    def __init__(self) -> None:
        self.failures = 0
        self.last_error: str | None = None
        self._warned_at: float | None = None  # clock ms of the last WARNING
        self._unreported = 0  # failures since then that got no WARNING of their own
        self._warned = False  # a WARNING since the last INFO: the recovery deserves one

    def report(self, where: str, reason: str, now_ms: float, *, quiet: bool = False) -> None:
        """Log a failure: at DEBUG when ``quiet`` (the client's own doing, not counted), else counted and
        logged as ``failed`` decides."""
        if quiet:
            logger.debug("%s: %s", where, reason)
            return
        warning = self.failed(where, reason, now_ms)
        if warning is not None:
            logger.warning("%s", warning)
        else:
            logger.debug("connection to %s failed: %s", where, reason)

    def failed(self, where: str, reason: str, now_ms: float) -> str | None:
        """Count a failure; return the WARNING to log now, or None while the last one is recent."""
        self.failures += 1
        self.last_error = reason
        if self._warned_at is not None and now_ms - self._warned_at < WARN_INTERVAL_MS:
            self._unreported += 1
            return None
        message = f"connection to {where} failed: {reason}"
        if self._unreported:
            message += f" (failed {_times(self._unreported, 'more time')} since the last warning)"
        self._warned_at, self._unreported, self._warned = now_ms, 0, True
        return message

    def ready(self, where: str) -> str | None:
        """The connection is ready: reset the count; return the INFO to log if a WARNING said the
        node was failing (failures no WARNING reported recover as quietly as they failed)."""
        failures, self.failures, self.last_error = self.failures, 0, None
        if not self._warned:
            return None
        self._warned = False
        return f"{where} is reachable again after {_times(failures, 'failure')}"
