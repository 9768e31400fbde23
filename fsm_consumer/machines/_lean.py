"""transitions' State/Transition/Event classes trimmed for a hot control loop.

The stock classes log several lines and resolve callbacks by name on every trigger (~15 us);
ours call hooks that were resolved to bound methods once, at bind time, and report each state
change to the owning SpecMachine. The transitions.Machine around them is unchanged (queue,
states, event table), so its documented semantics hold: queued triggers, exceptions clear the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol, cast

from transitions import Event, State, Transition

from ._errors import IllegalTransition


class _Owner(Protocol):
    """What a transition tells its SpecMachine (a protocol: _machine imports this module, not back)."""

    def _stayed(self, transition: LeanTransition) -> None: ...
    def _entered(self, transition: LeanTransition) -> float: ...
    def _arm(self, state: str, now: float) -> None: ...


# The compiler passes bound methods only, never callback names, so every callback list of these
# classes holds plain callables (transitions' stubs also allow a name, a str).
_Hooks = list[Callable[[], object]]


class LeanState(State):
    """Enter/exit callbacks are plain callables with no arguments."""

    def enter(self, event_data):
        for fn in cast("_Hooks", self.on_enter):
            fn()

    def exit(self, event_data):
        for fn in cast("_Hooks", self.on_exit):
            fn()


class LeanTransition(Transition):
    """Conditions and callbacks are pre-resolved; ``owner`` records the change and arms timeouts."""

    owner: _Owner | None = None  # the SpecMachine (set on each instance by the compiler)
    index = -1  # spec transition index
    trigger_name = ""
    checks: tuple[tuple[Callable[[], object], bool], ...] = ()  # ((callable, expected_truth), ...)
    internal = False  # stays in the state: no exit/entry, the visit goes on
    dest: str  # the compiler always gives a destination (the source for '=')

    def execute(self, event_data):
        for fn, expected in self.checks:
            if bool(fn()) is not expected:
                return False
        for fn in cast("_Hooks", self.before):
            fn()
        assert self.owner is not None  # set by the compiler right after it creates the transition
        if self.internal:
            self.owner._stayed(self)
            for fn in cast("_Hooks", self.after):
                fn()
            return True
        states = event_data.machine.states
        states[self.source].exit(event_data)
        event_data.model.state = self.dest  # what Machine.set_state does, minus its type checks
        now = self.owner._entered(self)
        states[self.dest].enter(event_data)
        self.owner._arm(self.dest, now)  # after on_enter, so computed durations see its effects
        for fn in cast("_Hooks", self.after):
            fn()
        return True


class LeanEventData:
    """What our State/Transition classes read of an event: far cheaper than a full EventData."""

    __slots__ = ("machine", "model", "result")

    def __init__(self, machine, model):
        self.machine = machine
        self.model = model
        self.result = False


class LeanEvent(Event):
    """Raises IllegalTransition (not MachineError) and skips the unused prepare/finalize hooks.
    Triggers still go through Machine._process, i.e. transitions' own queue."""

    def trigger(self, model, *args, **kwargs):
        return self.machine._process(partial(self._trigger, LeanEventData(self.machine, model)))

    def _trigger(self, event_data):
        state = event_data.model.state
        candidates = self.transitions.get(state)
        if not candidates:
            if state in self.machine.fsm_ignored.get(self.name, ()):
                return False  # declared a no-op here by the spec (a queued trigger lands here too)
            raise IllegalTransition(self.machine.name.rstrip(": "), state, self.name)
        for trans in candidates:
            if trans.execute(event_data):
                event_data.result = True
                return True
        return False
