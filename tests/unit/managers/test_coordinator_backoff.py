"""Coordinator discovery backs off exponentially (jittered, capped at retry_backoff_max_ms), driven with
the shipped background machine on a fake clock and FindCoordinator answers handed to the manager."""

from __future__ import annotations

from types import SimpleNamespace

from kafka.protocol.metadata import FindCoordinatorResponse

from fsm_consumer._config import ConsumerConfig
from fsm_consumer.engine._lifecycle import BackgroundLifecycle
from fsm_consumer.machines import FakeClock, SpecMachine, shipped_spec
from fsm_consumer.managers import CoordinatorManager
from fsm_consumer.state import HeldErrors

RTT = 2.0


class Rig:
    def __init__(self, **config):
        self.config = ConsumerConfig.from_kwargs(bootstrap_servers="127.0.0.1:1", group_id="g", **config)
        self.clock = FakeClock(0)
        self.lifecycle = BackgroundLifecycle()
        self.machine = SpecMachine(shipped_spec("background"), self.lifecycle, clock=self.clock, config=self.config)
        self.lifecycle.machine = self.machine
        self.held = HeldErrors()
        self.coordinator = CoordinatorManager(self.config, self.machine, self.held)
        self.lifecycle.coordinator = self.coordinator
        self.machine.fire("start")
        self.sent: list[float] = []

    def run(self, until: float, code: int, error=None) -> None:
        """The loop: tick the machine, poll the manager, answer each FindCoordinator after RTT."""
        while self.clock.now_ms() < until:
            now = self.clock.now_ms()
            self.machine.tick(now)
            wait, out = self.coordinator.poll(now)
            for o in out:
                self.sent.append(now)
                self.clock.advance(RTT)
                c = FindCoordinatorResponse.Coordinator(
                    key="g", node_id=-1 if code else 3, host="h", port=9092, error_code=code, error_message=None
                )
                response = FindCoordinatorResponse[4](throttle_time_ms=0, coordinators=[c])
                o.handler(SimpleNamespace(error=error, response=None if error else response), self.clock.now_ms())
            if out:
                continue
            if self.machine.next_deadline is not None:
                wait = min(wait, self.machine.next_deadline - now)
            self.clock.advance(max(1.0, min(wait, until - now)))


def test_failed_discoveries_back_off_exponentially_up_to_the_cap():
    rig = Rig()
    rig.coordinator.needed()
    rig.run(10_000.0, 15)
    gaps = [b - a for a, b in zip(rig.sent, rig.sent[1:], strict=False)]
    assert 8 <= len(rig.sent) <= 20, rig.sent  # not 10 a second for 10 s
    assert gaps[0] <= 120 + RTT + 1  # the machine's retry_backoff_ms first ...
    assert gaps[2] >= 320  # ... then growing ...
    assert all(800 <= g <= 1200 + RTT + 1 for g in gaps[5:]), gaps  # ... to retry_backoff_max_ms, jittered
    assert "CoordinatorNotAvailableError" in rig.coordinator.last_error
    assert rig.machine.state in ("discovery_backoff", "coordinator_discovery")


def test_transport_failures_back_off_too_and_success_resets_the_backoff():
    rig = Rig()
    rig.coordinator.needed()
    rig.run(5_000.0, 0, error=ConnectionError("refused"))
    assert len(rig.sent) <= 12
    assert "refused" in rig.coordinator.last_error
    rig.run(rig.clock.now_ms() + 1_500.0, 0)
    assert rig.machine.state == "stable" and rig.coordinator.node is not None
    assert rig.coordinator.last_error is None
    # lost again: the first rediscovery goes at once, not after the old backoff
    rig.coordinator.mark_unknown()
    before = len(rig.sent)
    start = rig.clock.now_ms()
    rig.run(start + 1.0, 0)
    assert len(rig.sent) == before + 1 and rig.sent[-1] == start


def test_group_authorization_failed_is_held_and_retried_slowly():
    rig = Rig()
    rig.coordinator.needed()
    rig.run(10_000.0, 30)
    assert rig.held.holds(("group", "discovery"))
    assert len(rig.sent) <= 20
