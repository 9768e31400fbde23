"""The request manager contract (Kafka's RequestManager.poll, sans-IO).

``poll(now)`` returns how long the manager can wait before it needs polling again, and the
requests to send now. Each request names the manager method that takes its completion: the
engine calls ``handler(pending, now)`` when the transport completes it. No futures are chained.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import attrs

NO_WAIT = 0.0
FOREVER = math.inf


@attrs.define(slots=True, eq=False)
class Outgoing:
    request: Any  # a kafka-python request (version picked by the transport)
    node: int | None  # None: any ready node
    handler: Callable[[Any, float], None]  # (pending, now) -> None
    timeout_ms: float | None = None  # None: request_timeout_ms
    min_version: int = 0
    max_version: int | None = None


class RequestManager(Protocol):
    def poll(self, now: float) -> tuple[float, list[Outgoing]]: ...


def error_of(code: int) -> type[Exception]:
    """kafka-python's typed error class for a broker error code."""
    import kafka.errors as ke

    return ke.for_code(code)
