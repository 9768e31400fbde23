"""The model of specs/background.yaml: the background loop's lifecycle and coordinator link.

Coordinator discovery itself belongs to a coordinator component (group consumers); a consumer
without one never leaves ``initialized`` for discovery. Closing asks every closer to finish
(commit, leave the group) and ends when all are done or the close budget runs out.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..machines import SpecMachine


class Closer(Protocol):
    def begin_close(self, autocommit: bool) -> None: ...

    @property
    def close_done(self) -> bool: ...


class BackgroundLifecycle:
    def __init__(self) -> None:
        self.coordinator: Any = None  # set by group consumers
        self.closers: list[Closer] = []
        self.close_deadline_ms = math.inf
        self.close_autocommit = True  # close(autocommit=False) commits nothing
        self.stopped = False
        self.failure: BaseException | None = None
        self.machine: SpecMachine | None = None  # the SpecMachine bound to this model

    # -- hooks named in background.yaml -----------------------------------------------------
    def send_find_coordinator(self) -> None:
        if self.coordinator is not None:
            self.coordinator.start_discovery()

    def coordinator_ready(self) -> None:
        if self.coordinator is not None:
            self.coordinator.on_ready()

    def coordinator_unusable(self) -> None:
        if self.coordinator is not None:
            self.coordinator.on_unusable()

    def discovery_backoff_ms(self, configured: float) -> float:
        if self.coordinator is None:
            return configured
        assert self.machine is not None  # bound right after the machine is built, before any hook runs
        return self.coordinator.next_backoff_ms(self.machine.now)

    def close_budget_ms(self, configured: float) -> float:
        assert self.machine is not None  # bound right after the machine is built, before any hook runs
        left = self.close_deadline_ms - self.machine.now  # the loop's `now`: this model reads no clock
        return max(0.0, min(configured, left)) if math.isfinite(left) else configured

    def begin_close(self) -> None:
        for closer in self.closers:
            closer.begin_close(self.close_autocommit)

    def finish_close(self) -> None:
        self.stopped = True

    def record_failure(self) -> None:
        self.stopped = True

    # -- asked by the loop ---------------------------------------------------------------------
    @property
    def closers_done(self) -> bool:
        return all(c.close_done for c in self.closers)
