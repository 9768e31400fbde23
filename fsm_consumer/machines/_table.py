"""A spec run as a table, for machines kept by the thousand (one per assigned partition).

A SpecMachine compiles its spec into a transitions.Machine bound to one model: 0.2-0.6 ms each, so a
consumer assigned 1,000 partitions would spend up to 0.6 s per assignment building their fetch machines.
A spec that calls nothing on a change (no on_enter/on_exit, before/after, durations, timeouts or timers;
its conditions, transition or attribute ones, are read from the model) is compiled once per process into
a table instead, and an instance is its state name and its model: h11's way (the machine is a table).

``fire`` means what SpecMachine.fire means for such a spec: the first transition of the trigger from the
state whose conditions hold is taken (False if none holds, or the spec ignores the trigger there), and a
trigger with no transition from the state raises IllegalTransition. Every change goes to the process's
observers (spec coverage) and the ``fsm_consumer.fsm`` DEBUG log, as SpecMachine's do.
"""

from __future__ import annotations

from typing import Any

from ._errors import IllegalTransition, SpecError
from ._log import TransitionRecord, logger, observers
from ._model import Spec

_DEBUG = 10

# (state, trigger) -> ((conditions, unless, dest, spec index), ...) in the spec's order
_Moves = dict[tuple[str, str], tuple[tuple[tuple[str, ...], tuple[str, ...], str, int], ...]]


class _Table:
    __slots__ = ("spec", "moves", "ignored", "triggers", "attributes", "unless", "conditions")

    def __init__(self, spec: Spec) -> None:
        calls = [s.name for s in spec.states.values() if s.on_enter or s.on_exit or s.timeouts]
        calls += [t.trigger for t in spec.transitions if t.before or t.after]
        if calls or spec.durations or spec.timers:
            raise SpecError(
                f"machine {spec.machine!r} calls its model or keeps time ({', '.join(calls) or 'durations'}): "
                "run it as a SpecMachine",
                file=spec.file,
            )
        self.spec = spec
        moves: dict[tuple[str, str], list] = {}
        for t in spec.transitions:
            for source in t.sources:
                moves.setdefault((source, t.trigger), []).append((t.conditions, t.unless, t.dest_from(source), t.index))
        self.moves: _Moves = {k: tuple(v) for k, v in moves.items()}
        self.ignored = spec.ignored()
        self.triggers = frozenset(spec.triggers) | frozenset(self.ignored)
        self.attributes = {name: a.of_state for name, a in spec.attributes.items()}
        # attribute -> value -> (its condition, the value while it holds)
        self.unless = {name: {v: (c, a.rest) for v, c in a.unless.items()} for name, a in spec.attributes.items()}
        self.conditions = sorted(spec.hooks())  # all it calls: conditions only (checked above)


_tables: dict[int, _Table] = {}


def _table(spec: Spec) -> _Table:
    table = _tables.get(id(spec))
    if table is None or table.spec is not spec:
        table = _tables[id(spec)] = _Table(spec)
    return table


class TableMachine:
    """One instance of a hookless spec: ``state``, ``fire(trigger)``, ``attribute(name)``."""

    __slots__ = ("_table", "model", "state", "instance")

    def __init__(self, spec: Spec, model: Any, *, instance: str = "") -> None:
        self._table = table = _table(spec)
        missing = [c for c in table.conditions if not callable(getattr(model, c, None))]
        if missing:
            raise SpecError(
                f"{type(model).__name__} lacks the conditions {', '.join(missing)} of machine {spec.machine!r}",
                file=spec.file,
            )
        self.model = model  # its conditions are read from it (methods named in the spec)
        self.state = spec.initial
        self.instance = instance

    def fire(self, trigger: str) -> bool:
        """Take the trigger's transition from the current state. True if the state changed (or was
        re-entered); False if no condition held or the spec ignores the trigger here; IllegalTransition
        (the state unchanged) if the state has no transition for it."""
        table = self._table
        state = self.state
        moves = table.moves.get((state, trigger))
        if moves is None:
            if state in table.ignored.get(trigger, ()):
                return False
            raise IllegalTransition(table.spec.machine, state, trigger, known=trigger in table.triggers)
        model = self.model
        for conditions, unless, dest, index in moves:
            if all(getattr(model, c)() for c in conditions) and not any(getattr(model, u)() for u in unless):
                self.state = dest
                self._record(state, trigger, dest, index)
                return True
        return False

    def attribute(self, name: str) -> str:
        """The current state's value of attribute ``name``; a value with ``unless: <condition>`` is the
        attribute's '*' value while the model's condition holds (as SpecMachine.attribute)."""
        table = self._table
        value = table.attributes[name][self.state]
        conditional = table.unless[name].get(value)
        if conditional is not None and conditional[1] is not None and getattr(self.model, conditional[0])():
            return conditional[1]
        return value

    def _record(self, source: str, trigger: str, dest: str, index: int) -> None:
        watchers = observers()
        debug = logger.isEnabledFor(_DEBUG)
        if not watchers and not debug:
            return
        # no clock: a table machine keeps no time (its records' time is 0)
        rec = TransitionRecord(self._table.spec.machine, source, trigger, dest, 0.0, index, self.instance)
        if debug:
            logger.debug("%s%s: %s --%s--> %s", rec.machine, "/" + self.instance if self.instance else "", *rec[1:4])
        for fn in watchers:
            fn(rec)

    def __repr__(self) -> str:
        name = self._table.spec.machine + ("/" + self.instance if self.instance else "")
        return f"<TableMachine {name} state={self.state}>"
