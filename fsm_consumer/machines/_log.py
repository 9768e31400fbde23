"""What a machine did: a bounded ring of fired transitions per machine, the
``fsm_consumer.fsm`` DEBUG log, and process-wide observers (spec coverage, member histories)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

logger = __import__("logging").getLogger("fsm_consumer.fsm")


class TransitionRecord(NamedTuple):
    machine: str
    source: str
    trigger: str
    dest: str
    time: float  # the machine clock's now_ms() when the state changed
    # the transition's position in its spec (coverage counts these); the field shadows tuple.index,
    # which NamedTuple allows at runtime but mypy reports as an incompatible override
    index: int  # type: ignore[assignment]
    instance: str = ""  # which machine object (several consumers share a spec)


Observer = Callable[[TransitionRecord], None]
_observers: list[Observer] = []


def add_observer(fn: Observer) -> None:
    """Call ``fn`` with every transition any machine in this process fires (from that machine's thread)."""
    if fn not in _observers:
        _observers.append(fn)


def remove_observer(fn: Observer) -> None:
    if fn in _observers:
        _observers.remove(fn)


def observers() -> list[Observer]:
    return _observers
