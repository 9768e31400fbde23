"""Consumer metrics: plain counters, each written by one thread only (no locks on the hot path).

Rates are computed when metrics are read, from totals and the consumer's age. Connection and
held-error states are not counted here: metrics_flat() passes in snapshots taken for it (the transport's
node_states() and HeldErrors.describe(), both safe to take from the application thread).
``kafka_python_view`` gives kafka-python 3.0's nested shape of metrics() from that flat view.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .structs import TopicPartition

# kafka-python 3.0's metric groups and names (those there is a figure for here), each from the flat view's
# key; a group's defaults stand for figures of a part this consumer lacks (the coordinator's, without a group)
_KAFKA_PYTHON_GROUPS: dict[str, dict[str, str]] = {
    "consumer-fetch-manager-metrics": {
        name: name
        for name in (
            "bytes-consumed-rate",
            "fetch-latency-avg",
            "fetch-latency-max",
            "fetch-rate",
            "fetch-size-avg",
            "fetch-size-max",
            "records-consumed-rate",
            "records-lag-max",
            "records-per-request-avg",
        )
    },
    "consumer-coordinator-metrics": {
        name: name
        for name in (
            "assigned-partitions",
            "commit-latency-avg",
            "commit-latency-max",
            "commit-rate",
            "last-heartbeat-seconds-ago",
        )
    },
    "consumer-metrics": {"connection-count": "connections-ready"},
}
_NO_GROUP = {
    "commit-latency-avg": 0.0,
    "commit-latency-max": 0.0,
    "commit-rate": 0.0,
    "last-heartbeat-seconds-ago": math.inf,
}


def kafka_python_view(flat: Mapping[str, Any], *, client_id: str, raw: bool = False) -> dict[Any, Any]:
    """kafka-python 3.0's ``metrics()``: metric group -> {metric name -> value}, with its group and
    metric names (``m["consumer-fetch-manager-metrics"]["records-lag-max"]``). ``raw``: kafka-python's
    ``raw=True`` form, ``{kafka.metrics.MetricName: kafka.metrics.KafkaMetric}``, each ``value()``
    this snapshot's."""
    nested = {
        group: {name: flat[key] if key in flat else _NO_GROUP[name] for name, key in names.items()}
        for group, names in _KAFKA_PYTHON_GROUPS.items()
    }
    if not raw:
        return nested
    from kafka.metrics import AnonMeasurable, KafkaMetric, MetricName

    tags = {"client-id": client_id}
    out: dict[Any, Any] = {}  # kafka.metrics.MetricName -> KafkaMetric (kafka-python is untyped)
    for group, values in nested.items():
        for name, value in values.items():
            metric = MetricName(name, group, tags=tags)
            out[metric] = KafkaMetric(metric, AnonMeasurable(lambda _config, _now, v=value: v), None)
    return out


class Metrics:
    def __init__(self) -> None:
        self.started = time.monotonic()
        # application thread
        self.records_total = 0
        self.bytes_total = 0
        self.polls = 0
        # background thread
        self.fetch_requests = 0
        self.fetch_incremental = 0  # of fetch_requests, those sent in an incremental session
        self.fetch_responses = 0
        self.fetch_bytes = 0
        self.fetch_bytes_max = 0
        self.fetch_latency_total_ms = 0.0
        self.fetch_latency_max_ms = 0.0
        self._fetch_sent_at: float | None = None
        self.loop_iterations = 0

    def records_consumed(self, n: int, out: object) -> None:
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

    def age_s(self) -> float:
        """Seconds since the consumer started (never 0): what rates divide by."""
        return max(time.monotonic() - self.started, 1e-9)

    def snapshot(
        self,
        *,
        lag: Mapping[TopicPartition, int],
        buffer_bytes: int,
        buffer_peak: int,
        app_events: int,
        bg_events: int,
        nodes: Mapping[int, Mapping[str, Any]] | None = None,
        held: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """``nodes``: the transport's node_states() snapshot; ``held``: HeldErrors.describe()."""
        age = self.age_s()
        max_lag = max(lag.values()) if lag else 0
        nodes = nodes or {}
        held = dict(held or {})
        return {
            "records-consumed-total": self.records_total,
            "records-consumed-rate": self.records_total / age,
            "bytes-consumed-total": self.bytes_total,
            "bytes-consumed-rate": self.bytes_total / age,
            "fetch-total": self.fetch_responses,
            "fetch-rate": self.fetch_responses / age,
            "records-per-request-avg": self.records_total / self.fetch_responses if self.fetch_responses else 0.0,
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
            "connection-states": {
                str(node): {
                    "address": n.get("address"),
                    "state": n.get("state"),
                    "failures": n.get("failures", 0),
                    "last-error": n.get("last_error"),
                }
                for node, n in nodes.items()
            },
            "connections-ready": sum(1 for n in nodes.values() if n.get("state") == "ready"),
            "connections-failing": sum(1 for n in nodes.values() if n.get("failures", 0) > 0),
            "errors-held": held,
            "errors-held-count": len(held),
        }
