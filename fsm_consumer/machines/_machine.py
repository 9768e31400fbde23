"""A Spec compiled into a transitions.Machine bound to a model, with deadline timeouts.

A spec is compiled once (states, events, transitions, hooks by name) and shared by all its machines; each
SpecMachine binds its model's hooks and has a machine shell of its own (state, queue).

Timeouts are deadlines, never threads: entering a state arms ``now + duration`` for each of its
timeouts; ``tick(now)`` fires the due ones in deadline order. Leaving the state disarms them, so a
deadline from an earlier visit can never fire. Timers span several states (a session): armed on
entering their states from elsewhere, re-armed by ``restart_timer(name, now)``, disarmed on leaving.

``now`` comes from the caller (``fire(trigger, now)``, ``tick(now)``: the engine owns the clock);
a machine built with a ``clock`` reads it when no ``now`` is given (tests, standalone use).
A trigger the spec declares ignorable in the current state is a no-op (``fire`` returns False).
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from collections.abc import Mapping
from typing import Any

from transitions import Machine

from ._clock import Clock
from ._errors import IllegalTransition, SpecError
from ._lean import Carrier, LeanEvent, LeanState, LeanTransition
from ._log import Observer, TransitionRecord, logger, observers
from ._model import Spec

_DEBUG = 10


class _TransitionsMachine(Machine):
    state_cls = LeanState
    transition_cls = LeanTransition
    event_cls = LeanEvent
    fsm_ignored: Mapping[str, frozenset[str]]  # trigger -> states where it is a no-op (read by LeanEvent)


class _Compiled:
    """A spec compiled once into transitions' states, events and transitions, hooks by name: every SpecMachine
    of the spec shares it (a share consumer makes one per acquired batch: building a transitions graph each
    time cost ~0.2 ms) and brings its own carrier (state, bound hooks, owner) and machine (queue)."""

    def __init__(self, spec: Spec) -> None:
        self.hooks = spec.hooks()  # name -> where the spec uses it (binding errors name the places)
        self.ignored = spec.ignored()
        self.timeouts = {s.name: tuple((t.after, t.trigger) for t in s.timeouts) for s in spec.states.values()}
        self.attributes = {name: a.of_state for name, a in spec.attributes.items()}
        states = [
            LeanState(s.name, on_enter=list(s.on_enter), on_exit=list(s.on_exit), final=s.name in spec.terminal)
            for s in spec.states.values()
        ]
        self.machine = _TransitionsMachine(
            model=[],  # no model of its own: each instance's carrier is the model its triggers are given
            states=states,
            initial=spec.initial,
            auto_transitions=False,
            ignore_invalid_triggers=False,
            queued=True,
            send_event=False,
            name=spec.machine,
        )
        # Events and transitions made directly, as Machine.add_transition would make them, without what it adds
        # for calling triggers as methods of a model (a trigger goes through SpecMachine._events)
        events = self.machine.events
        for t in spec.transitions:
            checks = tuple((c, True) for c in t.conditions) + tuple((c, False) for c in t.unless)
            event = events.get(t.trigger)
            if event is None:
                event = events[t.trigger] = LeanEvent(t.trigger, self.machine)
            for source in t.sources:
                compiled = LeanTransition(source, t.dest_from(source), before=list(t.before), after=list(t.after))
                compiled.index, compiled.checks = t.index, checks
                compiled.trigger_name = t.trigger
                compiled.internal = t.internal
                event.transitions[source].append(compiled)
        self.machine.fsm_ignored = self.ignored
        self.events = dict(events)
        # trigger -> the timers the model restarts before firing it (restarted_by), with their states
        self.restarts: dict[str, tuple[tuple[str, frozenset[str], int], ...]] = {}
        for tm in spec.timers.values():
            for trig in tm.restarted_by:
                self.restarts[trig] = (*self.restarts.get(trig, ()), (tm.name, tm.states, tm.line))

    def new_machine(self) -> _TransitionsMachine:
        """A machine for one instance: the shared states and events, a queue of its own."""
        machine = object.__new__(_TransitionsMachine)
        machine.__dict__.update(self.machine.__dict__)
        machine._transition_queue = deque()
        machine.models = []
        return machine


# spec identity -> (the spec, weakly, and its compiled form); a spec is immutable (attrs frozen), and a dropped
# one (users' and tests' specs) takes its entry with it
_COMPILED: dict[int, tuple[weakref.ref[Spec], _Compiled]] = {}


def _compiled(spec: Spec) -> _Compiled:
    got = _COMPILED.get(id(spec))
    if got is not None and got[0]() is spec:
        return got[1]
    compiled = _Compiled(spec)
    key = id(spec)

    def forget(_ref: weakref.ref[Spec]) -> None:
        _COMPILED.pop(key, None)

    _COMPILED[key] = (weakref.ref(spec, forget), compiled)
    return compiled


def resolve_durations(spec: Spec, config: Any = None, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """Each named duration in ms: an explicit override, else the config key, else the spec default."""
    out: dict[str, float] = {}
    for name, d in spec.durations.items():
        value: Any = d.default
        if overrides and name in overrides:
            value = overrides[name]
        elif config is not None and d.config:
            got = config.get(d.config) if isinstance(config, Mapping) else getattr(config, d.config, None)
            if got is not None:
                value = got
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise SpecError(
                f"duration {name!r} (config {d.config!r}) must be a non-negative number of ms, got {value!r}",
                file=spec.file,
            )
        out[name] = float(value)
    return out


def _bind(spec: Spec, hooks: Mapping[str, list[str]], model: Any) -> dict[str, Any]:
    """Resolve every hook name to a bound method once; list all that are missing in one error."""
    resolved, missing = {}, []
    for hook, where in hooks.items():
        fn = getattr(model, hook, None)
        if callable(fn):
            resolved[hook] = fn
        else:
            missing.append(f"{hook} (used by {', '.join(where)})")
    if missing:
        faults = [f"model {type(model).__name__} lacks hook {m}" for m in missing]
        raise SpecError(
            f"model {type(model).__name__} lacks {len(missing)} hook(s) named by the spec: " + "; ".join(missing),
            file=spec.file,
            faults=faults,
        )
    return resolved


class SpecMachine:
    """One running machine: ``fire(trigger)``, ``tick(now)``, ``state``, ``log``, ``next_deadline``."""

    def __init__(
        self,
        spec: Spec,
        model: Any,
        *,
        clock: Clock | None = None,
        config: Any = None,
        durations: Mapping[str, float] | None = None,
        log_size: int = 256,
        instance: str = "",
        now: float | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.machine
        self.instance = instance
        self.observer: Observer | None = None  # this machine's state changes (a consumer's history)
        self.linker: Any = None  # a composition's Linker (_composition.py): the links to other machines checked
        self.model = model
        self._clock = clock
        self.durations = resolve_durations(spec, config, durations)
        compiled = _compiled(spec)
        hooks = _bind(spec, compiled.hooks, model)
        self.log: deque[TransitionRecord] = deque(maxlen=log_size)
        self._changes = 0
        self._visit = 0
        self._pending: list[tuple[float, int, str]] = []
        self.next_deadline: float | None = None
        self._timeouts = compiled.timeouts
        self._ignored = compiled.ignored
        self._timers = spec.timers
        self._timer_due: dict[str, float] = {}  # running timers: name -> deadline
        self._now = now if now is not None else (clock.now_ms() if clock is not None else 0.0)
        self._computed = {d.name: hooks[d.computed_by] for d in spec.durations.values() if d.computed_by}
        self._machine = compiled.new_machine()
        self._carrier = Carrier(spec.initial, hooks, self, self._machine)
        self._machine.models.append(self._carrier)
        self._attributes = compiled.attributes
        # value -> (its condition, the value while it holds), per attribute: a value the spec makes conditional
        self._unless = {
            name: {v: (hooks[c], a.rest) for v, c in a.unless.items()}
            for name, a in spec.attributes.items()
            if a.unless
        }
        self._events = compiled.events
        self._at_once = {st.name: st.at_once for st in spec.states.values() if st.at_once}  # transient states
        self._restarts = compiled.restarts
        self._arm(spec.initial, self._now)
        for name, timer in self._timers.items():
            if spec.initial in timer.states:
                self._arm_timer(name, self._now)
        self._update_next()

    # -- driving -------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._carrier.state

    def fire(self, trigger: str, now: float | None = None) -> bool:
        """Fire ``trigger`` at ``now``. Returns True if a transition was taken (or, when called from a
        hook of this machine, queued: it runs after the current transition); False if no condition
        held or the spec declares the trigger ignorable here. Raises IllegalTransition if the current
        state has no transition for it; the state is then unchanged."""
        if self.linker is not None:
            self.linker.fired(self, trigger)
        if now is not None:
            self._now = now
        elif self._clock is not None and not self._machine._transition_queue:
            self._now = self._clock.now_ms()
        event = self._events.get(trigger)
        if event is None:
            if self.state in self._ignored.get(trigger, ()):
                return False
            raise IllegalTransition(self.name, self.state, trigger, known=False)
        if self._machine._transition_queue:
            return event.trigger(self._carrier)
        if self.state not in event.transitions and self.state in self._ignored.get(trigger, ()):
            if logger.isEnabledFor(_DEBUG):
                logger.debug(
                    "%s%s: %s ignored in %s",
                    self.name,
                    "/" + self.instance if self.instance else "",
                    trigger,
                    self.state,
                )
            return False
        before = self._changes
        event.trigger(self._carrier)
        if self._at_once and self.state in self._at_once:
            st = self.spec.states[self.state]
            raise SpecError(
                f"{self.name}: state {st.name!r} declares at_once {st.at_once!r}, but its hooks did not fire it",
                file=self.spec.file,
                line=st.line,
            )
        return self._changes != before

    def tick(self, now: float) -> int:
        """Fire the timeouts and timers that are due at ``now``, in deadline order; return how many fired."""
        self._now = now
        nxt = self.next_deadline
        if nxt is None or now < nxt:
            return 0
        fired, visit = 0, self._visit
        while True:
            # a state's timeouts fire only for the visit that armed them (no chains in one tick)
            if self._pending and self._visit == visit and self._pending[0][0] <= now:
                _, _, trigger = self._pending.pop(0)
            else:
                due = [(at, name) for name, at in self._timer_due.items() if at <= now]
                if not due:
                    break
                _, name = min(due)
                del self._timer_due[name]
                trigger = self._timers[name].trigger
            self._update_next()
            self.fire(trigger)
            fired += 1
        return fired

    def restart_timer(self, name: str, since: float) -> None:
        """Re-arm timer ``name`` to run its whole duration from ``since`` (a heartbeat answered: the
        time it was sent) while the machine is in one of the timer's states, also after it fired. Never
        earlier than it runs already: a lease renewed by a newer request is not cut short by the late
        answer to an older one."""
        if self.state in self._timers[name].states:
            due = since + self.duration_ms(self._timers[name].after)
            running = self._timer_due.get(name)
            if not math.isinf(due) and (running is None or due > running):
                self._timer_due[name] = due
                self._update_next()

    def timer_ran_out(self, name: str) -> bool:
        """Whether timer ``name`` runs and its deadline has passed (it fires at the next tick)."""
        due = self._timer_due.get(name)
        return due is not None and due <= self._now

    @property
    def timers_running(self) -> bool:
        """Whether a timer spanning states runs (a lease: its owner wants a stalled process noticed)."""
        return bool(self._timer_due)

    def timer_deadline(self, name: str) -> float | None:
        """When timer ``name`` fires, None while it is not running."""
        return self._timer_due.get(name)

    @property
    def visit(self) -> int:
        """Counts state entries: a request sent 'once per visit of a state' remembers this."""
        return self._visit

    @property
    def now(self) -> float:
        """The time of the last fire or tick."""
        return self._now

    # -- queries -------------------------------------------------------------------------
    def may(self, trigger: str) -> bool:
        """Whether the current state has a transition for ``trigger`` (conditions not evaluated)."""
        event = self._events.get(trigger)
        return event is not None and self.state in event.transitions

    def handles(self, trigger: str) -> bool:
        """Whether firing ``trigger`` now is legal: a transition, or an ignore entry of the spec."""
        return self.may(trigger) or self.state in self._ignored.get(trigger, ())

    def legal_triggers(self) -> list[str]:
        return [name for name, ev in self._events.items() if self.state in ev.transitions]

    def attribute(self, name: str) -> str:
        """The current state's value of attribute ``name`` (declared under attributes in the spec); a value
        with ``unless: <condition>`` is the attribute's '*' value while the model's condition holds."""
        value = self._attributes[name][self._carrier.state]
        conditional = self._unless.get(name)
        if conditional and value in conditional:
            holds, rest = conditional[value]
            if holds() and rest is not None:  # the spec's checker makes 'unless' need a '*' value
                return rest
        return value

    def attribute_of(self, name: str, state: str) -> str:
        return self._attributes[name][state]

    @property
    def is_terminal(self) -> bool:
        return self.state in self.spec.terminal

    def release(self) -> None:
        """Let a machine in a terminal state go with its model: the references that make the two a cycle (the
        model's bound hooks, the carrier's owner, the transitions machine's models) are cut, so both are freed
        as soon as nothing else holds them, not by the cyclic collector (a share consumer lets a batch and its
        machine go for every acquired batch, ~20 objects each, which filled the collector's generations).
        ``state`` and ``log`` stay readable; a trigger fired after raises IllegalTransition, as in any
        terminal state."""
        if not self.is_terminal:
            raise ValueError(f"{self!r}: only a machine in a terminal state is released")
        self._carrier.hooks = {}
        self._carrier.owner = None
        self._machine.models.clear()
        self._computed = {}
        self._unless = {}
        self.model = None

    def __repr__(self) -> str:
        return f"<SpecMachine {self.name}{'/' + self.instance if self.instance else ''} state={self.state}>"

    # -- called by LeanTransition between exit and enter ---------------------------------
    def _record(self, transition: LeanTransition) -> TransitionRecord:
        self._changes += 1
        rec = TransitionRecord(
            self.name,
            transition.source,
            transition.trigger_name,
            transition.dest,
            self._now,
            transition.index,
            self.instance,
        )
        self.log.append(rec)
        if logger.isEnabledFor(_DEBUG):
            logger.debug(
                "%s%s: %s --%s--> %s",
                self.name,
                "/" + self.instance if self.instance else "",
                rec.source,
                rec.trigger,
                rec.dest,
            )
        if self.observer is not None:
            self.observer(rec)
        if self.linker is not None:
            self.linker.moved(self, rec.source, rec.dest, rec.index)
        for fn in observers():
            fn(rec)
        return rec

    def _stayed(self, transition: LeanTransition) -> None:
        """An internal transition: logged and counted, but the visit, its timeouts and timers go on."""
        self._record(transition)
        if transition.trigger_name in self._restarts:
            self._check_restarted(transition)

    def _check_restarted(self, transition: LeanTransition) -> None:
        """The spec says the model restarts these timers before firing this trigger (restarted_by): what the
        exploration of the spec relies on is what the machine checks as it runs."""
        for name, states, line in self._restarts[transition.trigger_name]:
            if transition.dest in states and name not in self._timer_due:
                if math.isinf(self.duration_ms(self._timers[name].after)):
                    continue  # a duration not known yet: the timer cannot run, restarted or not
                raise SpecError(
                    f"{self.name}: timer {name!r} is not running after {transition.trigger_name!r} into "
                    f"{transition.dest!r}, but the spec says the model restarts it before that trigger "
                    f"(timers.{name}.restarted_by): the model fired it without restart_timer({name!r}, ...)",
                    file=self.spec.file,
                    line=line,
                )

    def _entered(self, transition: LeanTransition) -> float:
        now = self._now
        rec = self._record(transition)
        self._visit += 1  # from here on, the old visit's deadlines are void
        self._pending = []
        for name, timer in self._timers.items():
            inside = rec.dest in timer.states
            if not inside:
                self._timer_due.pop(name, None)
            elif rec.source not in timer.states:
                self._arm_timer(name, now)
        self._update_next()
        if transition.trigger_name in self._restarts:
            self._check_restarted(transition)
        return now

    def _arm_timer(self, name: str, since: float) -> None:
        # an infinite duration (a computed one not known yet) never fires: the timer is not running
        due = since + self.duration_ms(self._timers[name].after)
        if math.isinf(due):
            self._timer_due.pop(name, None)
        else:
            self._timer_due[name] = due

    def _arm(self, state: str, now: float) -> None:
        timeouts = self._timeouts[state]
        if not timeouts:
            self._pending = []
        else:
            self._pending = sorted((now + self.duration_ms(name), i, trig) for i, (name, trig) in enumerate(timeouts))
        self._update_next()

    def _update_next(self) -> None:
        nxt = self._pending[0][0] if self._pending else None
        for at in self._timer_due.values():
            if nxt is None or at < nxt:
                nxt = at
        self.next_deadline = nxt

    def duration_ms(self, name: str) -> float:
        """The duration for a visit starting now: configured, or as the model computes it."""
        configured = self.durations[name]
        compute = self._computed.get(name)
        if compute is None:
            return configured
        ms = compute(configured)
        if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms < 0:
            raise SpecError(
                f"duration {name!r}: hook {compute.__name__} returned {ms!r}, not a non-negative number of ms",
                file=self.spec.file,
            )
        return float(ms)
