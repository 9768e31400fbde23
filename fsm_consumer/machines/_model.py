"""The checked, immutable form of a spec: what the compiler and the diagram writer read."""

from __future__ import annotations

import attrs


@attrs.frozen
class Duration:
    name: str
    default: int
    config: str | None = None
    description: str = ""
    computed_by: str | None = None  # model hook: configured ms -> ms for this visit


@attrs.frozen
class Timeout:
    after: str  # duration name
    trigger: str
    line: int = 0
    description: str = ""


@attrs.frozen
class State:
    name: str
    description: str = ""
    on_enter: tuple[str, ...] = ()
    on_exit: tuple[str, ...] = ()
    timeouts: tuple[Timeout, ...] = ()
    line: int = 0
    at_once: str | None = None  # a trigger its on_enter hooks fire before the machine settles (a transient state)


@attrs.frozen
class Transition:
    index: int  # position in the spec's list: the unit of coverage
    trigger: str
    sources: tuple[str, ...]  # concrete states ('*' already expanded)
    dest: str | None  # None: re-enter the source ('=')
    wildcard: bool = False
    conditions: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    description: str = ""
    line: int = 0
    internal: bool = False  # stays in the source state: no exit/entry hooks, timeouts run on

    def dest_from(self, source: str) -> str:
        return source if self.dest is None else self.dest

    @property
    def label(self) -> str:
        src = "*" if self.wildcard else ",".join(self.sources)
        return f"{src} --{self.trigger}--> {self.dest or '='}"


@attrs.frozen
class Timer:
    """A deadline spanning ``states``: armed on entering them from elsewhere, re-armed by the model
    (``SpecMachine.restart_timer``), disarmed on leaving them; fires ``trigger`` from ``tick``."""

    name: str
    after: str  # duration name
    trigger: str
    states: frozenset[str]
    line: int = 0
    description: str = ""
    restarted_by: tuple[str, ...] = ()  # triggers before which the model restarts it (see the schema)


@attrs.frozen
class Event:
    """A trigger fired from outside the machine's own hooks, and the states it can arrive in."""

    trigger: str
    arrives_in: tuple[str, ...]
    line: int = 0
    description: str = ""


@attrs.frozen
class Ignore:
    """A trigger that is a deliberate no-op in ``sources``."""

    trigger: str
    sources: tuple[str, ...]
    line: int = 0
    description: str = ""


@attrs.frozen
class Attribute:
    """What the model reads of the current state: each state has exactly one of ``values``."""

    name: str
    values: dict[str, tuple[str, ...]]  # value -> the states that have it
    of_state: dict[str, str]  # state -> its value
    line: int = 0
    description: str = ""
    value_descriptions: dict[str, str] = attrs.field(factory=dict)
    rest: str | None = None  # the value of every state not named ('*'), if any
    unless: dict[str, str] = attrs.field(factory=dict)  # value -> the condition under which it is ``rest``


@attrs.frozen
class Predicate:
    """What an invariant says of a node of the exploration (machines/_explore.py); every part given must hold."""

    states: tuple[str, ...] = ()  # the state is one of these
    attribute: str | None = None  # attribute ``attribute`` has one of ``values`` there
    values: tuple[str, ...] = ()
    timer: str | None = None  # timer ``timer`` is running
    deadline: bool = False  # some timer runs or some timeout is pending: the state cannot wait forever

    def __str__(self) -> str:
        parts = []
        if self.states:
            parts.append(f"state in [{', '.join(self.states)}]")
        if self.attribute is not None:
            parts.append(f"{self.attribute} in [{', '.join(self.values)}]")
        if self.timer is not None:
            parts.append(f"timer {self.timer} running")
        if self.deadline:
            parts.append("a deadline running")
        return " and ".join(parts) or "always"


@attrs.frozen
class Invariant:
    """In every reachable node where ``when`` holds, ``then`` holds (checked by ``check-specs --explore``)."""

    name: str
    when: Predicate
    then: Predicate
    line: int = 0
    description: str = ""
    suspended_by: tuple[tuple[str, bool], ...] = ()  # (condition, value): a transition taken so suspends it


@attrs.frozen
class Relation:
    """Duration ``shorter`` is at most (``strict``: below) duration ``longer``, for the defaults and for every
    configuration the validator accepts (checked by ``check-specs --explore``)."""

    name: str
    shorter: str
    longer: str
    strict: bool = False
    line: int = 0
    description: str = ""

    def __str__(self) -> str:
        return f"{self.shorter} {'<' if self.strict else '<='} {self.longer}"


@attrs.frozen
class Spec:
    machine: str
    file: str
    initial: str
    states: dict[str, State]
    transitions: tuple[Transition, ...]
    terminal: tuple[str, ...] = ()
    durations: dict[str, Duration] = attrs.field(factory=dict)
    description: str = ""
    timers: dict[str, Timer] = attrs.field(factory=dict)
    events: dict[str, Event] = attrs.field(factory=dict)
    ignores: tuple[Ignore, ...] = ()
    attributes: dict[str, Attribute] = attrs.field(factory=dict)
    invariants: tuple[Invariant, ...] = ()
    relations: tuple[Relation, ...] = ()

    def ignored(self) -> dict[str, frozenset[str]]:
        """trigger -> the states where firing it is a no-op."""
        out: dict[str, set[str]] = {}
        for ig in self.ignores:
            out.setdefault(ig.trigger, set()).update(ig.sources)
        return {t: frozenset(s) for t, s in out.items()}

    @property
    def triggers(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for t in self.transitions:
            seen.setdefault(t.trigger, None)
        return tuple(seen)

    def hooks(self) -> dict[str, list[str]]:
        """Every hook name the spec uses, mapped to where (for binding errors)."""
        used: dict[str, list[str]] = {}
        for d in self.durations.values():
            if d.computed_by:
                used.setdefault(d.computed_by, []).append(f"durations.{d.name}.computed_by")
        for s in self.states.values():
            for kind in ("on_enter", "on_exit"):
                for h in getattr(s, kind):
                    used.setdefault(h, []).append(f"states.{s.name}.{kind} (line {s.line})")
        for t in self.transitions:
            for kind in ("conditions", "unless", "before", "after"):
                for h in getattr(t, kind):
                    used.setdefault(h, []).append(f"transition {t.trigger} {kind} (line {t.line})")
        for a in self.attributes.values():
            for value, h in a.unless.items():
                used.setdefault(h, []).append(f"attributes.{a.name}.values.{value}.unless (line {a.line})")
        return used
