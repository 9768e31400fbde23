"""Helpers for testing specs and the models bound to them.

``SpecDouble`` is a model that has every hook a spec names: actions are recorded, conditions read
a ``flags`` dict. ``cover_plan`` finds, for every transition, a shortest sequence of triggers (with
the flags each step needs) that reaches and fires it, so a test can prove every transition works.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ._model import Spec, Transition

Step = tuple[str, dict[str, bool]]  # (trigger, condition flags to set before firing it)


class SpecDouble:
    """A model for ``spec``: each action hook appends its name to ``calls``; each condition hook
    returns ``flags[name]`` (False when unset). Computed durations return the configured value,
    or ``computed[name]`` when set."""

    def __init__(self, spec: Spec) -> None:
        self.calls: list[str] = []
        self.flags: dict[str, bool] = {}
        self.computed: dict[str, float] = {}
        # set it to the machine bound to this double: a state declared at_once is then left as the spec says
        # (its last on_enter hook fires the trigger), as a real model's hooks do
        self.machine: Any = None
        self._at_once = {st.on_enter[-1]: (st.name, st.at_once) for st in spec.states.values() if st.at_once}
        conditions = {c for t in spec.transitions for c in (*t.conditions, *t.unless)}
        computed = {d.computed_by: d.name for d in spec.durations.values() if d.computed_by}
        for hook in spec.hooks():
            if hook in conditions:
                setattr(self, hook, self._condition(hook))
            elif hook in computed:
                setattr(self, hook, self._duration(hook, computed[hook]))
            else:
                setattr(self, hook, self._action(hook))

    def _condition(self, name: str):
        return lambda: self.flags.get(name, False)

    def _action(self, name: str):
        at_once = self._at_once.get(name)
        if at_once is None:
            return lambda: self.calls.append(name)

        def act() -> None:
            self.calls.append(name)
            state, trigger = at_once
            if self.machine is not None and self.machine.state == state:
                self.machine.fire(trigger)

        return act

    def _duration(self, hook: str, duration: str):
        def compute(configured: float) -> float:
            self.calls.append(hook)
            return self.computed.get(duration, configured)

        return compute


def flags_for(spec: Spec, t: Transition, source: str) -> dict[str, bool] | None:
    """Condition flags under which ``t`` is the one taken for its trigger from ``source``; None if
    no assignment makes it win over the earlier transitions with the same trigger and source."""
    flags = {c: True for c in t.conditions} | {u: False for u in t.unless}
    if any(flags.get(c) is False for c in t.conditions) or any(flags.get(u) is True for u in t.unless):
        return None
    for e in spec.transitions:
        if e.index >= t.index:
            break
        if e.trigger != t.trigger or source not in e.sources:
            continue
        if any(flags.get(c) is False for c in e.conditions) or any(flags.get(u) is True for u in e.unless):
            continue  # already fails
        free_c = next((c for c in e.conditions if c not in flags), None)
        free_u = next((u for u in e.unless if u not in flags), None)
        if free_c is not None:
            flags[free_c] = False
        elif free_u is not None:
            flags[free_u] = True
        else:
            return None
    return flags


def _edges(spec: Spec):
    for t in spec.transitions:
        for src in t.sources:
            flags = flags_for(spec, t, src)
            if flags is not None:
                yield src, t, flags


def cover_plan(spec: Spec) -> dict[int, list[Step]]:
    """For each transition index: the steps from the initial state that end by firing it.
    A transition missing from the result cannot be taken under any condition flags."""
    by_source: dict[str, list[tuple[Transition, dict[str, bool]]]] = {}
    for src, t, flags in _edges(spec):
        by_source.setdefault(src, []).append((t, flags))
    transient = {st.name: st.at_once for st in spec.states.values() if st.at_once}
    paths: dict[str, list[Step]] = {spec.initial: []}
    todo = deque([spec.initial])
    while todo:  # BFS: shortest path to every state
        s = todo.popleft()
        for t, flags in by_source.get(s, []):
            if s in transient and t.trigger != transient[s]:
                continue  # a state left at once takes nothing else
            d = t.dest_from(s)
            if d not in paths:
                # the trigger of a state left at once is fired by its hooks: no step of its own
                paths[d] = paths[s] + ([] if s in transient else [(t.trigger, flags)])
                todo.append(d)
    plan: dict[int, list[Step]] = {}
    for t in spec.transitions:
        options = [
            paths[s] + ([] if s in transient else [(t.trigger, flags)])
            for s, tt, flags in _edges(spec)
            if tt is t and s in paths and (s not in transient or t.trigger == transient[s])
        ]
        if options:
            plan[t.index] = min(options, key=len)
    return plan


def run_steps(machine: Any, double: SpecDouble, steps: list[Step]) -> None:
    """Fire ``steps`` on a machine bound to ``double``."""
    for trigger, flags in steps:
        double.flags.clear()
        double.flags.update(flags)
        machine.fire(trigger)
