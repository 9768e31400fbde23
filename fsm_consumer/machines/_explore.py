"""Every reachable state of a spec, walked breadth-first, and what the spec promises checked in each.

The environment is the most hostile the spec allows: every trigger that code may fire (the declared events,
and every trigger of a transition that no timer or timeout alone fires) may arrive in any state; a running timer
or a pending timeout may fire at any moment; each condition (a model hook) may be true or false at each firing,
independently. What the walk keeps of a running machine is what the spec decides: the state, the timers running
(armed on entering their states from elsewhere, cleared when they fire or when the machine leaves their states)
and the timeouts still pending in this visit. Durations are abstracted away (any pending deadline may come
first), and so are the model's own moves (``restart_timer``): a timer is running only when the spec's
transitions armed it, so a property that needs it running never leans on the model. The state space is finite:
one node per (state, running timers, pending timeouts) that can occur.

Properties, each reported with the shortest sequence of triggers from the initial state:

- totality: a trigger that has transitions from the state is never dropped silently (some transition passes
  whatever its conditions say); a trigger with none there is refused loudly (IllegalTransition) or ignored as
  the spec declares;
- no deadlock: from every reachable node a terminal state can still be reached (close and leave finish);
- invariants written in the spec (``invariants:``): where ``when`` holds, ``then`` holds (a state that may own
  partitions has its lease running, ...), from the initial state on and after every move. The check is
  inductive: the first move that turns an invariant false, from a node where it held, is reported, unless the
  move was taken with a condition as the invariant's ``suspended_by`` says (the spec's decision that what it
  protects is gone: a lease run out with nothing owned); it is checked again once it holds again.

A timer's ``restarted_by`` triggers re-arm it (the model restarts it before firing them: a lease renewed by an
answer), as SpecMachine checks when the machine runs.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from ._model import Invariant, Predicate, Spec
from ._timing import TimingFault, Validate, check_relations

__all__ = ["Exploration", "Node", "Step", "Violation", "explore"]


@attrs.frozen
class Node:
    """What the spec decides about a running machine: its state, running timers, pending timeouts (triggers)."""

    state: str
    timers: frozenset[str] = frozenset()
    pending: frozenset[str] = frozenset()

    def __str__(self) -> str:
        extra = []
        if self.timers:
            extra.append("timers " + ",".join(sorted(self.timers)))
        if self.pending:
            extra.append("timeouts " + ",".join(sorted(self.pending)))
        return self.state + (f" [{'; '.join(extra)}]" if extra else "")


@attrs.frozen
class Step:
    """One move: ``trigger`` arrived (``how``: event, timer or timeout) with the conditions as ``guards`` say, and
    spec transition ``index`` took the machine to ``dest``."""

    trigger: str
    how: str
    guards: tuple[tuple[str, bool], ...]
    index: int
    dest: Node

    def __str__(self) -> str:
        guards = ", ".join(f"{name}={'true' if value else 'false'}" for name, value in self.guards)
        what = f"{self.trigger} ({self.how}{'; ' + guards if guards else ''})"
        return f"--{what}--> {self.dest}"


@attrs.frozen
class Violation:
    """A property that fails, and the shortest way there: ``path`` from the initial node to ``node``."""

    prop: str  # totality, deadlock, invariant
    name: str  # the invariant's name, or the trigger dropped, or the node's state
    message: str
    node: Node
    path: tuple[Step, ...]
    line: int = 0  # the spec line it concerns (an invariant's, a transition's), 0 when none

    def trace(self, initial: Node) -> str:
        lines = [f"  {initial}"] + [f"    {step}" for step in self.path]
        return "\n".join(lines)

    def drawn(self, spec: Spec, initial: Node) -> str:
        """The machine's diagram (DOT) with this counterexample's steps in red."""
        from ._diagram import render_dot

        steps, at = [], initial.state
        for step in self.path:
            steps.append((at, step.dest.state, step.trigger))
            at = step.dest.state
        return render_dot(spec, steps, end=self.node.state)


@attrs.frozen
class Exploration:
    spec: Spec
    initial: Node
    nodes: int
    edges: int
    seconds: float
    violations: tuple[Violation, ...]
    states_reached: frozenset[str]
    timing: tuple[TimingFault, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.violations and not self.timing

    def summary(self) -> str:
        faults = len(self.violations) + len(self.timing)
        verdict = "every property holds" if self.ok else f"{faults} violation(s)"
        checked = len(self.spec.invariants)
        return (
            f"{self.spec.machine}: {self.nodes} nodes, {self.edges} edges, {self.seconds * 1000:.1f} ms; "
            f"totality, no deadlock, {checked} invariant(s), {len(self.spec.relations)} relation(s): {verdict}"
        )

    def report(self) -> str:
        out = [self.summary()]
        for v in self.violations:
            where = f" ({self.spec.file}:{v.line})" if v.line else ""
            out.append(f"  {v.prop} {v.name}{where}: {v.message}")
            out.append(v.trace(self.initial))
        for f in self.timing:
            where = f" ({self.spec.file}:{f.line})" if f.line else ""
            out.append(f"  relation {f.name}{where}: {f.message}")
        return "\n".join(out)


def explore(spec: Spec, validate: Validate | None = None) -> Exploration:
    """Walk every node reachable from the initial state; check totality, deadlock freedom and the invariants;
    and the relations between durations (with ``validate``, the config validator: against what it accepts)."""
    started = time.perf_counter()
    model = _Moves(spec)
    initial = model.enter(spec.initial, None, Node(spec.initial))
    drops: list[tuple[Node, str, str, tuple[tuple[str, bool], ...], int]] = []
    parent, moves_in_order, path_to = breadth_first(initial, lambda node: model.moves(node, drops))
    edges = len(moves_in_order)
    successors: dict[Node, set[Node]] = {node: set() for node in parent}
    for node, step in moves_in_order:
        successors[node].add(step.dest)

    violations: list[Violation] = []
    seen_drops: set[tuple[str, str]] = set()
    for node, trigger, how, guards, line in drops:
        if (node.state, trigger) in seen_drops:
            continue  # the shortest one (the walk is breadth-first): one report per state and trigger
        seen_drops.add((node.state, trigger))
        said = ", ".join(f"{n}={'true' if v else 'false'}" for n, v in guards)
        violations.append(
            Violation(
                "totality",
                trigger,
                f"{trigger} ({how}) in {node.state!r} is dropped silently when {said}: no transition passes "
                "(add one for that case, or make the last one unconditional)",
                node,
                path_to(node),
                line,
            )
        )
    if spec.terminal:
        violations += _deadlocks(spec, parent, successors, path_to)
    for inv in spec.invariants:
        found = _broken(spec, inv, initial, moves_in_order)
        if found is not None:
            before, step = found
            path = path_to(before) + ((step,) if step is not None else ())
            node = step.dest if step is not None else before
            violations.append(Violation("invariant", inv.name, _invariant_message(inv, node), node, path, inv.line))
    return Exploration(
        spec=spec,
        initial=initial,
        nodes=len(parent),
        edges=edges,
        seconds=time.perf_counter() - started,
        violations=tuple(violations),
        states_reached=frozenset(n.state for n in parent) | model.passed,
        timing=tuple(check_relations(spec, validate)),
    )


def breadth_first(initial: Any, moves: Callable[[Any], Iterable[Any]]) -> tuple[dict, list, Callable]:
    """Every node reachable from ``initial`` (each move has a ``dest``), breadth-first: the parent map (node ->
    (node before, move) or None), every edge (node, move) in order, and ``path_to(node)``, the shortest moves."""
    parent: dict[Any, tuple[Any, Any] | None] = {initial: None}
    edges: list[tuple[Any, Any]] = []
    todo = deque([initial])
    while todo:
        node = todo.popleft()
        for move in moves(node):
            edges.append((node, move))
            if move.dest not in parent:
                parent[move.dest] = (node, move)
                todo.append(move.dest)

    def path_to(node: Any) -> tuple[Any, ...]:
        steps = []
        while (link := parent[node]) is not None:
            node, move = link
            steps.append(move)
        return tuple(reversed(steps))

    return parent, edges, path_to


class _Moves:
    """The spec's moves from a node, under the hostile environment (module docstring)."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.ignored = spec.ignored()
        self.by_trigger_source: dict[tuple[str, str], list] = {}
        for t in spec.transitions:
            for s in t.sources:
                self.by_trigger_source.setdefault((t.trigger, s), []).append(t)
        timed = {tm.trigger for tm in spec.timers.values()} | {
            to.trigger for st in spec.states.values() for to in st.timeouts
        }
        # what code may fire: declared events, and transitions' triggers no deadline alone fires
        self.external = sorted(set(spec.events) | ({t.trigger for t in spec.transitions} - timed))
        self.passed: set[str] = set()  # states left at once (at_once), reached though never a node
        self.restarts: dict[str, set[str]] = {}  # trigger -> the timers the model restarts before it
        for tm in spec.timers.values():
            for trig in tm.restarted_by:
                self.restarts.setdefault(trig, set()).add(tm.name)

    def moves(self, node: Node, drops: list) -> Iterator[Step]:
        for trigger in self.external:
            yield from self._fire(node, trigger, "event", node, drops)
        for name in sorted(node.timers):
            timer = self.spec.timers[name]
            before = attrs.evolve(node, timers=node.timers - {name})  # a timer that fires is no longer running
            yield from self._fire(before, timer.trigger, f"timer {name}", node, drops)
        for trigger in sorted(node.pending):
            before = attrs.evolve(node, pending=node.pending - {trigger})  # a timeout fires once per visit
            yield from self._fire(before, trigger, "timeout", node, drops)

    def _fire(self, node: Node, trigger: str, how: str, at: Node, drops: list) -> Iterator[Step]:
        candidates = self.by_trigger_source.get((trigger, node.state))
        if not candidates:
            # ignored as declared, or refused loudly (IllegalTransition): the machine stays where it is; a timer or
            # timeout that fired is spent all the same (it no longer runs: the node changes)
            if node != at and node.state in self.ignored.get(trigger, ()):
                yield Step(trigger, how + ", ignored", (), -1, node)
            return
        hooks = sorted({h for t in candidates for h in (*t.conditions, *t.unless)})
        for values in itertools.product((True, False), repeat=len(hooks)):
            truth = dict(zip(hooks, values, strict=True))
            taken = next((t for t in candidates if _passes(t, truth)), None)
            guards = tuple(zip(hooks, values, strict=True))
            if taken is None:
                drops.append((at, trigger, how, guards, candidates[-1].line))
                continue
            if taken.internal:
                dest = node  # the visit goes on: timers and pending timeouts as they are
            else:
                dest = self._through(self.enter(taken.dest_from(node.state), node, node))
            restarted = self.restarts.get(trigger, set()) & set(self.spec.timers)
            running = {name for name in restarted if dest.state in self.spec.timers[name].states}
            if running - dest.timers:  # the model restarted it before the trigger, as the spec declares
                dest = attrs.evolve(dest, timers=dest.timers | running)
            yield Step(trigger, how, guards, taken.index, dest)
            if not hooks:
                break

    def _through(self, node: Node) -> Node:
        """A state declared ``at_once`` is left by its trigger before anything else can arrive: part of the move."""
        at = self.spec.states[node.state].at_once
        while at is not None:
            (t,) = self.by_trigger_source[(at, node.state)]  # one, unconditional (checked when the spec is built)
            self.passed.add(node.state)
            node = self.enter(t.dest_from(node.state), node, node)
            at = self.spec.states[node.state].at_once
        return node

    def enter(self, state: str, source: Node | None, before: Node) -> Node:
        """The node after entering ``state`` from ``source`` (None: the machine is made): a timer keeps running
        (or not) when it spans both states, is armed when entered from outside, cleared when left; the state's
        timeouts are all pending (a new visit)."""
        timers = set()
        for name, timer in self.spec.timers.items():
            if state not in timer.states:
                continue
            if source is not None and source.state in timer.states:
                if name in before.timers:
                    timers.add(name)
            else:
                timers.add(name)
        pending = frozenset(to.trigger for to in self.spec.states[state].timeouts)
        return Node(state, frozenset(timers), pending)


def _passes(t, truth: dict[str, bool]) -> bool:
    return all(truth[c] for c in t.conditions) and not any(truth[c] for c in t.unless)


def _deadlocks(spec: Spec, parent, successors, path_to) -> list[Violation]:
    """Nodes from which no terminal state can be reached, whatever arrives: the first (shortest) one reported."""
    can_finish = {n for n in parent if n.state in spec.terminal}
    changed = True
    while changed:
        changed = False
        for node, nexts in successors.items():
            if node not in can_finish and nexts & can_finish:
                can_finish.add(node)
                changed = True
    for node in parent:
        if node not in can_finish:
            return [
                Violation(
                    "deadlock",
                    node.state,
                    f"from {node} no terminal state ({', '.join(spec.terminal)}) can be reached, whatever arrives",
                    node,
                    path_to(node),
                    spec.states[node.state].line,
                )
            ]
    return []


def _values(spec: Spec, name: str, state: str) -> set[str]:
    """The values attribute ``name`` may have in ``state``: its own, and its '*' value while an ``unless``
    condition of that value may hold."""
    attr = spec.attributes[name]
    value = attr.of_state[state]
    if value in attr.unless and attr.rest is not None:
        return {value, attr.rest}
    return {value}


def _holds(spec: Spec, p: Predicate, node: Node, *, may: bool) -> bool:
    """Whether ``p`` holds in ``node``: with ``may``, for some value an attribute can have there, else for all."""
    if p.states and node.state not in p.states:
        return False
    if p.attribute is not None:
        possible = _values(spec, p.attribute, node.state)
        inside = possible & set(p.values)
        if not (inside if may else inside == possible):
            return False
    if p.timer is not None and p.timer not in node.timers:
        return False
    return not (p.deadline and not (node.timers or node.pending))


def _may(spec: Spec, p: Predicate, node: Node) -> bool:
    return _holds(spec, p, node, may=True)


def _must(spec: Spec, p: Predicate, node: Node) -> bool:
    return _holds(spec, p, node, may=False)


def _broken(spec: Spec, inv: Invariant, initial: Node, moves: list[tuple[Node, Step]]):
    """The first move (breadth-first) that makes ``inv`` false: (node before, step), or (initial, None) when it
    is false from the start; None when nothing breaks it. A move taken with a condition as the invariant's
    ``suspended_by`` says is the spec's decision that what it protects is gone: not a break."""

    def holds(node: Node) -> bool:
        return not _may(spec, inv.when, node) or _must(spec, inv.then, node)

    if not holds(initial):
        return initial, None
    suspends = set(inv.suspended_by)
    for before, step in moves:
        if holds(before) and not holds(step.dest) and not suspends & set(step.guards):
            return before, step
    return None


def _invariant_message(inv: Invariant, node: Node) -> str:
    return f"in {node}: when {inv.when}, then {inv.then} should hold, and does not" + (
        f" ({inv.description})" if inv.description else ""
    )
