"""Coordinator discovery for a group (seed 001), driven by specs/background.yaml.

The background machine decides when to discover (its hooks call ``start_discovery``); this
manager sends FindCoordinator and reports back with the machine's triggers. The coordinator gets
a connection of its own (a synthetic node id, as Kafka's Java client does) so a long-polling
Fetch on the broker's data connection never delays a heartbeat.

Failed or timed-out discoveries back off exponentially (the error policy's Backoffs, jittered, up
to ``retry_backoff_max_ms``): the machine's discovery_backoff state waits as long as
``next_backoff_ms`` says (its duration's computed_by hook).
"""

from __future__ import annotations

from kafka.protocol.metadata import FindCoordinatorRequest

from ..policy import Action, Backoffs, classify, public_error
from ._base import FOREVER, Outgoing, error_of

_COORDINATOR_ID_BASE = 2**31 - 1


class CoordinatorManager:
    def __init__(self, config, machine, held) -> None:
        self._config = config
        self._group_id = config.group_id
        self._machine = machine  # the background SpecMachine
        self._held = held
        self._send = False
        self.node: int | None = None  # the synthetic node id while the coordinator is usable
        self.brokers: dict[int, tuple[str, int]] = {}
        self.version = 0  # bumps when the coordinator's address changes
        self._found: tuple[int, str, int] | None = None
        self._backoff = Backoffs(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self.last_error: str | None = None  # why the last discovery failed, for a timeout's message

    # -- asked by other managers ----------------------------------------------------------
    def needed(self) -> None:
        """A group request wants the coordinator: start discovery if nothing is under way."""
        if self._machine.state == "initialized":
            self._machine.fire("coordinator_needed")

    def mark_unknown(self) -> None:
        """NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, or its connection failed."""
        if self._machine.state == "stable":
            self._machine.fire("coordinator_lost")

    @property
    def state(self) -> str:
        """The background machine's state (discovery, stable, closing...), for metrics."""
        return self._machine.state

    @property
    def ready(self) -> bool:
        return self.node is not None

    @property
    def gone_for_close(self) -> bool:
        """Closing without a coordinator: group requests cannot be sent any more, give them up."""
        return self.node is None and self._machine.state in ("closing", "closed", "failed")

    # -- hooks called through BackgroundLifecycle -------------------------------------------
    def start_discovery(self) -> None:
        self._send = True

    def on_ready(self) -> None:
        assert self._found is not None  # the machine gets ready only after a FindCoordinator answer
        node_id, host, port = self._found
        self.node = _COORDINATOR_ID_BASE - node_id
        if self.brokers.get(self.node) != (host, port):
            self.brokers = {self.node: (host, port)}
            self.version += 1

    def on_unusable(self) -> None:
        self.node = None

    # -- loop ---------------------------------------------------------------------------------
    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        if not self._send:
            return FOREVER, []
        self._send = False
        request = FindCoordinatorRequest(key=self._group_id, key_type=0, coordinator_keys=[self._group_id])
        # the spec's discovery_timeout governs; the transport's deadline is only a safety net behind it
        return FOREVER, [Outgoing(request, None, self.on_response, timeout_ms=2 * self._config.request_timeout_ms)]

    def on_response(self, pending, now: float) -> None:
        if self._machine.state != "coordinator_discovery":
            return  # closing or timed out meanwhile
        if pending.error is not None:
            self._failed(now, f"FindCoordinator failed: {pending.error!r}")
            return
        r = pending.response
        if getattr(r, "coordinators", None):
            c = r.coordinators[0]
            code, node_id, host, port = c.error_code, c.node_id, c.host, c.port
        else:
            code, node_id, host, port = r.error_code, r.node_id, r.host, r.port
        if code == 0 and node_id >= 0:
            self._backoff.succeeded("discovery")
            self.last_error = None
            self._held.release(("group", "discovery"))
            self._found = (node_id, host, port)
            self._machine.fire("coordinator_found")
            return
        if classify(code) is Action.FATAL:  # GROUP_AUTHORIZATION_FAILED...: held, raised by every call
            self._held.hold(("group", "discovery"), public_error(code, f"FindCoordinator for group {self._group_id!r}"))
        self._failed(
            now,
            f"FindCoordinator answered {error_of(code).__name__}"
            if code
            else f"FindCoordinator answered node {node_id}",
        )

    def next_backoff_ms(self, now: float) -> float:
        """One more discovery failed (an error or the spec's discovery_timeout): the pause before
        the next, growing with each failure in a row."""
        return self._backoff.failed("discovery", now) - now

    def _failed(self, now: float, why: str) -> None:
        self.last_error = why
        self._machine.fire("discovery_failed", now)
