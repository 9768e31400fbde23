"""Consumer metrics: plain counters, each written by one thread only (no locks on the hot path).

Rates are computed when metrics() is read, from totals and the consumer's age. Connection and
held-error states are not counted here: metrics() passes in snapshots taken for it (the transport's
node_states() and HeldErrors.describe(), both safe to take from the application thread).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any


class Metrics:
    def __init__(self) -> None:
        self.started = time.monotonic()
        # application thread
        self.records_total = 0
        self.bytes_total = 0
        self.polls = 0
        self.last_poll = None
        # background thread
        self.fetch_requests = 0
        self.fetch_incremental = 0          # of fetch_requests, those sent in an incremental session
        self.fetch_responses = 0
        self.fetch_bytes = 0
        self.fetch_bytes_max = 0
        self.fetch_latency_total_ms = 0.0
        self.fetch_latency_max_ms = 0.0
        self._fetch_sent_at: float | None = None
        self.loop_iterations = 0

    def records_consumed(self, n: int, out) -> None:
        self.records_total += n

    def bytes_consumed(self, n: int) -> None:
        self.bytes_total += n

    def fetch_sent(self, now: float) -> None:
        self.fetch_requests += 1
        self._fetch_sent_at = now

    def fetch_completed(self, now: float, nbytes: int) -> None:
        self.fetch_responses += 1
        self.fetch_bytes += nbytes
        self.fetch_bytes_max = max(self.fetch_bytes_max, nbytes)
        if self._fetch_sent_at is not None:
            latency = now - self._fetch_sent_at
            self.fetch_latency_total_ms += latency
            self.fetch_latency_max_ms = max(self.fetch_latency_max_ms, latency)

    def snapshot(self, *, lag: dict, buffer_bytes: int, buffer_peak: int, app_events: int, bg_events: int,
                 nodes: Mapping[int, Mapping[str, Any]] | None = None,
                 held: Mapping[str, str] | None = None) -> dict:
        """``nodes``: the transport's node_states() snapshot; ``held``: HeldErrors.describe()."""
        age = max(time.monotonic() - self.started, 1e-9)
        max_lag = max(lag.values()) if lag else 0
        nodes = nodes or {}
        held = dict(held or {})
        return {
            "records-consumed-total": self.records_total,
            "records-consumed-rate": self.records_total / age,
            "bytes-consumed-total": self.bytes_total,
            "bytes-consumed-rate": self.bytes_total / age,
            "fetch-total": self.fetch_responses,
            "fetch-size-avg": self.fetch_bytes / self.fetch_responses if self.fetch_responses else 0.0,
            "fetch-size-max": self.fetch_bytes_max,
            "fetch-latency-avg": self.fetch_latency_total_ms / self.fetch_responses if self.fetch_responses else 0.0,
            "fetch-latency-max": self.fetch_latency_max_ms,
            "records-lag": {f"{tp.topic}-{tp.partition}": v for tp, v in sorted(lag.items())},
            "records-lag-max": max_lag,
            "fetch-buffer-bytes": buffer_bytes,
            "fetch-buffer-bytes-peak": buffer_peak,
            "background-loop-iterations": self.loop_iterations,
            "application-events-queued": app_events,
            "background-events-queued": bg_events,
            "poll-count": self.polls,
            "connection-states": {str(node): {"address": n.get("address"), "state": n.get("state"),
                                              "failures": n.get("failures", 0), "last-error": n.get("last_error")}
                                  for node, n in nodes.items()},
            "connections-ready": sum(1 for n in nodes.values() if n.get("state") == "ready"),
            "connections-failing": sum(1 for n in nodes.values() if n.get("failures", 0) > 0),
            "errors-held": held,
            "errors-held-count": len(held),
        }
