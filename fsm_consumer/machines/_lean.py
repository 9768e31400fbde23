"""transitions' State/Transition/Event classes trimmed for a hot control loop.

The stock classes log several lines and resolve callbacks by name on every trigger (~15 us);
ours look each hook up in the instance's table of bound methods (resolved once, when the
SpecMachine is made) and report each state change to the owning SpecMachine. One set of
states, events and transitions serves every machine of a spec (a share consumer makes one per
acquired batch): what belongs to an instance (its state, hooks, owner and transitions.Machine
with its queue) travels on the model they are given, the carrier. The transitions.Machine is
unchanged (queue, states, event table), so its documented semantics hold: queued triggers,
exceptions clear the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, cast

from transitions import Event, State, Transition

from ._errors import IllegalTransition


class _Owner(Protocol):
    """What a transition tells its SpecMachine (a protocol: _machine imports this module, not back)."""

    def _stayed(self, transition: LeanTransition) -> None: ...
    def _entered(self, transition: LeanTransition) -> float: ...
    def _arm(self, state: str, now: float) -> None: ...


class Carrier:
    """The model transitions keeps the state on, one per SpecMachine: the real model stays free of helper
    methods, and the shared states and transitions find the instance's hooks, owner and machine here."""

    __slots__ = ("state", "hooks", "owner", "machine")

    def __init__(self, state: str, hooks: dict[str, Callable[[], Any]], owner: _Owner, machine: Any) -> None:
        self.state = state  # set by LeanTransition
        self.hooks = hooks  # hook name -> the model's bound method
        self.owner: _Owner | None = owner  # the SpecMachine (None once it is released)
        self.machine = machine  # its transitions.Machine (the queue)


# The compiler gives hook names only (transitions' stubs allow a name or a callable): each is looked up in
# the carrier's table, so the callback lists hold str.
_Names = list[str]


class LeanState(State):
    """Enter/exit callbacks are hook names, called with no arguments."""

    def enter(self, event_data):
        hooks = event_data.model.hooks
        for name in cast("_Names", self.on_enter):
            hooks[name]()

    def exit(self, event_data):
        hooks = event_data.model.hooks
        for name in cast("_Names", self.on_exit):
            hooks[name]()


class LeanTransition(Transition):
    """Conditions and callbacks are hook names; the carrier's ``owner`` records the change and arms timeouts."""

    index = -1  # spec transition index
    trigger_name = ""
    checks: tuple[tuple[str, bool], ...] = ()  # ((hook name, expected_truth), ...)
    internal = False  # stays in the state: no exit/entry, the visit goes on
    dest: str  # the compiler always gives a destination (the source for '=')

    def execute(self, event_data):
        carrier = event_data.model
        hooks = carrier.hooks
        for name, expected in self.checks:
            if bool(hooks[name]()) is not expected:
                return False
        for name in cast("_Names", self.before):
            hooks[name]()
        owner = carrier.owner
        if self.internal:
            owner._stayed(self)
            for name in cast("_Names", self.after):
                hooks[name]()
            return True
        states = event_data.machine.states
        states[self.source].exit(event_data)
        carrier.state = self.dest  # what Machine.set_state does, minus its type checks
        now = owner._entered(self)
        states[self.dest].enter(event_data)
        owner._arm(self.dest, now)  # after on_enter, so computed durations see its effects
        for name in cast("_Names", self.after):
            hooks[name]()
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
    Triggers still go through Machine._process, i.e. transitions' own queue: the instance's machine, which
    the carrier knows (the event itself is shared by every machine of the spec)."""

    def trigger(self, model, *args, **kwargs):
        machine = model.machine
        return machine._process(partial(self._trigger, LeanEventData(machine, model)))

    def _trigger(self, event_data):
        state = event_data.model.state
        candidates = self.transitions.get(state)
        if not candidates:
            machine = event_data.machine
            if state in machine.fsm_ignored.get(self.name, ()):
                return False  # declared a no-op here by the spec (a queued trigger lands here too)
            raise IllegalTransition(machine.name.rstrip(": "), state, self.name)
        for trans in candidates:
            if trans.execute(event_data):
                event_data.result = True
                return True
        return False
