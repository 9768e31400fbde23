"""The machines that run together in one consumer, and the links between them, declared (specs/compositions/).

A composition names its roles (a role is one machine spec; ``copies`` for a machine of which a consumer runs
one per broker, all alike) and the links that code makes between them:

- ``when: {machine: A, enters: [states]}`` or ``when: {machine: A, fired: trigger}`` with
  ``fire: {machine: B, trigger: t}``: once A enters one of the states (or is fired the trigger, whatever A then
  does), every copy of B where ``t`` has a transition is fired ``t`` within the same pass of the loop;
- ``fire: {machine: B, trigger: t}`` with ``only_when: {role: [states], ...}``: code fires ``t`` at B only
  while every copy of each role listed is in one of its states (``unless``: an environment condition, named,
  under which code may fire it all the same).

``Linker`` checks the links as the consumer runs (a link broken is a SpecError naming the composition's line);
``fsm_consumer.machines._product`` explores the machines together under them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ._errors import SpecError
from ._load import _display, shipped_spec
from ._model import Spec
from ._paths import specs_dir
from ._yaml import Located, load_located

if TYPE_CHECKING:
    from ._machine import SpecMachine

__all__ = [
    "Composition",
    "Link",
    "LinkIndex",
    "Linker",
    "load_composition",
    "shipped_composition",
    "shipped_compositions",
]


@attrs.frozen
class Role:
    name: str
    spec: Spec
    copies: int = 1
    description: str = ""


@attrs.frozen
class Link:
    name: str
    target: str  # the role fired
    trigger: str
    when_role: str | None = None  # enters/fired links
    enters: frozenset[str] = frozenset()
    fired: str | None = None
    only_when: Mapping[str, frozenset[str]] = attrs.field(factory=dict)  # only_when links
    unless: tuple[str, ...] = ()
    line: int = 0
    description: str = ""
    within: str = "pass"  # when the firing is due: within the loop's pass, or by the loop's end ("loop")


@attrs.frozen
class RolePredicate:
    """Every copy of each role listed is in one of its states."""

    states: Mapping[str, frozenset[str]]

    def __str__(self) -> str:
        return " and ".join(f"{role} in {sorted(s)}" for role, s in self.states.items())


@attrs.frozen
class Guard:
    """A condition of ``role``'s spec that other machines' states decide: ``value`` while ``during`` holds."""

    role: str
    condition: str
    value: bool
    during: RolePredicate
    line: int = 0
    description: str = ""


@attrs.frozen
class CompositeInvariant:
    name: str
    when: RolePredicate
    then: RolePredicate
    line: int = 0
    description: str = ""


@attrs.frozen
class Finish:
    """From every reachable node where ``start`` holds, one where ``reaches`` holds can be reached without firing
    ``avoiding`` (role.trigger) and with the environment's conditions as ``assuming`` says."""

    name: str
    start: RolePredicate
    reaches: RolePredicate
    avoiding: frozenset[tuple[str, str]] = frozenset()
    assuming: Mapping[str, bool] = attrs.field(factory=dict)
    line: int = 0
    description: str = ""


@attrs.frozen
class Composition:
    name: str
    file: str
    roles: tuple[Role, ...]
    links: tuple[Link, ...]
    conditions: tuple[str, ...] = ()
    invariants: tuple[CompositeInvariant, ...] = ()
    finishes: tuple[Finish, ...] = ()
    description: str = ""
    guards: tuple[Guard, ...] = ()

    def role(self, name: str) -> Role:
        return next(r for r in self.roles if r.name == name)


@attrs.frozen
class LinkIndex:
    """A composition's links and guards by what sets them off: read by the Linker and by the exploration."""

    by_fired: dict[tuple[str, str], list[Link]]  # (role, trigger fired) -> fired links
    by_enters: dict[str, list[Link]]  # role -> enters links
    guarded: dict[tuple[str, str], list[Link]]  # (target role, trigger) -> only_when links
    guards: dict[str, list[Guard]]  # role -> its conditions other machines' states decide

    @classmethod
    def of(cls, composition: Composition) -> LinkIndex:
        index = cls({}, {}, {}, {})
        for link in composition.links:
            if link.when_role is None:
                index.guarded.setdefault((link.target, link.trigger), []).append(link)
            elif link.fired is not None:
                index.by_fired.setdefault((link.when_role, link.fired), []).append(link)
            else:
                index.by_enters.setdefault(link.when_role, []).append(link)
        for guard in composition.guards:
            index.guards.setdefault(guard.role, []).append(guard)
        return index


# -- loading ---------------------------------------------------------------------------------------------
def load_composition(path: str | Path, specs: Mapping[str, Spec] | None = None) -> Composition:
    """Read and check a composition file; its machines are the shipped specs unless ``specs`` names them."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read composition: {exc.strerror}", file=_display(p)) from None
    return parse_composition(text, _display(p), specs)


def parse_composition(text: str, file: str, specs: Mapping[str, Spec] | None = None) -> Composition:
    doc = load_located(text, file)
    return _Reader(doc, specs or {}).composition()


@functools.cache
def shipped_composition(name: str) -> Composition:
    """A composition of the project's specs/compositions/, loaded once per process."""
    return load_composition(specs_dir() / "compositions" / f"{name}.yaml")


def shipped_compositions() -> list[Path]:
    return sorted((specs_dir() / "compositions").glob("*.yaml"))


def is_composition(path: str | Path) -> bool:
    """Whether a YAML file is a composition (its first key ``composition``), not a machine spec."""
    try:
        head = Path(path).read_text(encoding="utf-8").lstrip()
    except OSError:
        return False
    return head.startswith("composition:")


_TOP = {"composition", "description", "machines", "conditions", "links", "guards", "invariants", "finishes"}


class _Reader:
    def __init__(self, doc: Located, specs: Mapping[str, Spec]) -> None:
        self.doc, self.specs = doc, specs
        self.roles: dict[str, Role] = {}

    def fail(self, path: tuple[Any, ...], fault: str, *, key: bool = False) -> SpecError:
        return self.doc.error(path, fault, key=key)

    def mapping(self, value: Any, path: tuple[Any, ...], what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"{what} must be a mapping")
        return value

    def composition(self) -> Composition:
        data = self.mapping(self.doc.data, (), "a composition")
        for key in data:
            if key not in _TOP:
                raise self.fail((key,), f"unknown key {key!r} (expected one of {sorted(_TOP)})", key=True)
        name = data.get("composition")
        if not isinstance(name, str) or not name:
            raise self.fail(("composition",), "composition: a name is required")
        for role, body in self.mapping(data.get("machines"), ("machines",), "machines").items():
            self.roles[role] = self.role(role, self.mapping(body, ("machines", role), f"machine {role!r}"))
        conditions = tuple(self.mapping(data.get("conditions") or {}, ("conditions",), "conditions"))
        links = tuple(self.link(i, item, conditions) for i, item in enumerate(data.get("links") or []))
        names = [link.name for link in links]
        for i, n in enumerate(names):
            if names.index(n) != i:
                raise self.fail(("links", i, "name"), f"link {n!r} is declared twice")
        invariants = tuple(self.invariant(i, item) for i, item in enumerate(data.get("invariants") or []))
        finishes = tuple(self.finish(i, item, conditions) for i, item in enumerate(data.get("finishes") or []))
        guards = tuple(self.guard(i, item) for i, item in enumerate(data.get("guards") or []))
        return Composition(
            name, self.doc.file, tuple(self.roles.values()), links, conditions, invariants, finishes,
            str(data.get("description") or ""), guards,
        )  # fmt: skip

    def guard(self, i: int, item: Any) -> Guard:
        path: tuple[Any, ...] = ("guards", i)
        body = self.mapping(item, path, "a guard")
        role = self.known_role(body.get("machine"), path + ("machine",))
        condition = body.get("condition")
        if condition not in {c for t in role.spec.transitions for c in (*t.conditions, *t.unless)}:
            raise self.fail(path + ("condition",), f"{role.name} ({role.spec.machine}) has no condition {condition!r}")
        if ("false_while" in body) == ("true_while" in body):
            raise self.fail(path, "a guard takes false_while or true_while")
        key = "false_while" if "false_while" in body else "true_while"
        return Guard(
            role.name, str(condition), key == "true_while", self.predicate(body[key], path + (key,)),
            self.doc.line_of(path), str(body.get("description") or ""),
        )  # fmt: skip

    def role(self, role: str, body: dict[str, Any]) -> Role:
        machine = body.get("spec")
        if not isinstance(machine, str):
            raise self.fail(("machines", role), f"machine {role!r}: spec (a machine's name) is required")
        try:
            spec = self.specs.get(machine) or shipped_spec(machine)
        except SpecError as exc:
            raise self.fail(("machines", role, "spec"), f"machine {role!r}: spec {machine!r}: {exc}") from None
        copies = body.get("copies", 1)
        if isinstance(copies, bool) or not isinstance(copies, int) or not 1 <= copies <= 3:
            raise self.fail(("machines", role, "copies"), "copies: 1 to 3 (copies of one spec are alike: symmetric)")
        return Role(role, spec, copies, str(body.get("description") or ""))

    def known_role(self, role: Any, path: tuple[Any, ...]) -> Role:
        if role not in self.roles:
            raise self.fail(path, f"unknown machine {role!r} (declared: {sorted(self.roles)})")
        return self.roles[role]

    def states_of(self, role: Role, states: Any, path: tuple[Any, ...]) -> frozenset[str]:
        items = [states] if isinstance(states, str) else states
        if not isinstance(items, list) or not items:
            raise self.fail(path, "a state or a list of states is required")
        for s in items:
            if s not in role.spec.states:
                raise self.fail(path, f"{role.name} ({role.spec.machine}) has no state {s!r}")
        return frozenset(items)

    def trigger_of(self, role: Role, trigger: Any, path: tuple[Any, ...]) -> str:
        known = set(role.spec.triggers) | set(role.spec.events)
        if trigger not in known:
            raise self.fail(path, f"{role.name} ({role.spec.machine}) has no trigger {trigger!r}")
        return str(trigger)

    def predicate(self, value: Any, path: tuple[Any, ...]) -> RolePredicate:
        body = self.mapping(value, path, "a condition on machines ({machine: [states]})")
        return RolePredicate(
            {r: self.states_of(self.known_role(r, path + (r,)), s, path + (r,)) for r, s in body.items()}
        )

    def link(self, i: int, item: Any, conditions: tuple[str, ...]) -> Link:
        path: tuple[Any, ...] = ("links", i)
        body = self.mapping(item, path, "a link")
        name = body.get("name")
        if not isinstance(name, str):
            raise self.fail(path, "a link needs a name")
        fire = self.mapping(body.get("fire"), path + ("fire",), f"link {name!r}: fire")
        target = self.known_role(fire.get("machine"), path + ("fire", "machine"))
        trigger = self.trigger_of(target, fire.get("trigger"), path + ("fire", "trigger"))
        line = self.doc.line_of(path)
        text = str(body.get("description") or "")
        unless = tuple(body.get("unless") or ())
        for c in unless:
            if c not in conditions:
                raise self.fail(
                    path + ("unless",), f"link {name!r}: unknown condition {c!r} (declare it in conditions)"
                )
        if "only_when" in body:
            if "when" in body:
                raise self.fail(path, f"link {name!r}: when or only_when, not both")
            pred = self.predicate(body["only_when"], path + ("only_when",))
            return Link(name, target.name, trigger, only_when=pred.states, unless=unless, line=line, description=text)
        when = self.mapping(body.get("when"), path + ("when",), f"link {name!r}: when (or only_when)")
        source = self.known_role(when.get("machine"), path + ("when", "machine"))
        if ("enters" in when) == ("fired" in when):
            raise self.fail(path + ("when",), f"link {name!r}: when takes enters or fired")
        within = body.get("within", "pass")
        if within not in ("pass", "loop"):
            raise self.fail(path + ("within",), f"link {name!r}: within is pass (default) or loop")
        if "enters" in when:
            enters = self.states_of(source, when["enters"], path + ("when", "enters"))
            return Link(
                name, target.name, trigger, source.name, enters=enters, line=line, description=text, within=within
            )
        fired = self.trigger_of(source, when["fired"], path + ("when", "fired"))
        return Link(name, target.name, trigger, source.name, fired=fired, line=line, description=text, within=within)

    def invariant(self, i: int, item: Any) -> CompositeInvariant:
        path: tuple[Any, ...] = ("invariants", i)
        body = self.mapping(item, path, "an invariant")
        return CompositeInvariant(
            str(body.get("name") or f"invariant {i}"),
            self.predicate(body.get("when"), path + ("when",)),
            self.predicate(body.get("then"), path + ("then",)),
            self.doc.line_of(path),
            str(body.get("description") or ""),
        )

    def finish(self, i: int, item: Any, conditions: tuple[str, ...]) -> Finish:
        path: tuple[Any, ...] = ("finishes", i)
        body = self.mapping(item, path, "a finish")
        avoiding = set()
        for j, qualified in enumerate(body.get("avoiding") or []):
            role, _, trigger = str(qualified).partition(".")
            r = self.known_role(role, path + ("avoiding", j))
            avoiding.add((r.name, self.trigger_of(r, trigger, path + ("avoiding", j))))
        assuming = self.mapping(body.get("assuming") or {}, path + ("assuming",), "assuming")
        for c, v in assuming.items():
            if c not in conditions or not isinstance(v, bool):
                raise self.fail(path + ("assuming", c), f"assuming: a declared condition and true or false, got {c}")
        return Finish(
            str(body.get("name") or f"finish {i}"),
            self.predicate(body.get("from"), path + ("from",)),
            self.predicate(body.get("reaches"), path + ("reaches",)),
            frozenset(avoiding),
            dict(assuming),
            self.doc.line_of(path),
            str(body.get("description") or ""),
        )


# -- checking the links as the consumer runs ---------------------------------------------------------------
_broken: list[str] = []  # every link found broken in this process (the pytest plugin fails a session on any)


def broken_links() -> list[str]:
    """What the linkers of this process reported broken, oldest first."""
    return list(_broken)


class Linker:
    """The links of ``composition`` checked on the live machines. ``roles``: role -> the machines playing it now
    (read at each check: share sessions come and go); ``conditions``: the environment conditions of ``unless``.
    Each machine of a role calls ``fired`` (SpecMachine.fire) and ``moved`` (a state change); the loop calls
    ``check`` at the end of each pass: what an enters/fired link asked of the machines must be done by then."""

    def __init__(
        self,
        composition: Composition,
        roles: Mapping[str, Callable[[], Sequence[SpecMachine]]],
        conditions: Mapping[str, Callable[[], bool]] | None = None,
    ) -> None:
        self.composition = composition
        self._roles = roles
        self._conditions = conditions or {}
        self._role_of: dict[int, str] = {}
        # (link, machine that must be fired its trigger, the thread whose pass owes it): a machine of the share
        # consumer may be fired from the application's thread too (under the share lock); a pass checks its own
        self._owed: list[tuple[Link, SpecMachine, int]] = []
        self._lock = threading.Lock()  # held for _owed alone, never while calling out
        self._ignored = {r.name: r.spec.ignored() for r in composition.roles}
        index = LinkIndex.of(composition)
        self._by_fired, self._by_enters, self._guarded, self._guards = (
            index.by_fired, index.by_enters, index.guarded, index.guards,
        )  # fmt: skip
        unplayed = {r.name for r in composition.roles} - set(roles)
        if unplayed:
            raise SpecError(f"the linker needs the machines playing {sorted(unplayed)}", file=composition.file)
        missing = {c for link in composition.links for c in link.unless} - set(self._conditions)
        if missing:
            raise SpecError(f"the linker needs the conditions {sorted(missing)}", file=composition.file)

    def attach(self, role: str, machine: SpecMachine) -> None:
        """``machine`` plays ``role``: it reports to this linker from now on."""
        self._role_of[id(machine)] = role
        machine.linker = self

    def fired(self, machine: SpecMachine, trigger: str) -> None:
        role = self._role_of.get(id(machine))
        if role is None:
            return
        linked = False
        if self._owed:
            with self._lock:
                kept = [o for o in self._owed if not (o[1] is machine and o[0].trigger == trigger)]
                linked, self._owed = len(kept) != len(self._owed), kept
        for link in self._guarded.get((role, trigger), ()):
            if linked or any(self._conditions[c]() for c in link.unless):  # a link's own firing is not the code's
                continue
            for other, states in link.only_when.items():
                off = [m for m in self._roles[other]() if m.state not in states]
                if off:
                    self._broken(
                        link,
                        f"{role} was fired {trigger} while {other} is in {off[0].state} (only in {sorted(states)})",
                    )
        for link in self._by_fired.get((role, trigger), ()):
            self._owe(link)

    def moved(self, machine: SpecMachine, source: str, dest: str, index: int) -> None:
        role = self._role_of.get(id(machine))
        for guard in self._guards.get(role or "", ()):
            t = machine.spec.transitions[index]
            taken_as = True if guard.condition in t.conditions else False if guard.condition in t.unless else None
            if taken_as is not None and taken_as != guard.value and self._holds(guard.during):
                error = SpecError(
                    f"guard broken: {role} took {t.label} with {guard.condition}={str(taken_as).lower()} while "
                    f"{guard.during}",
                    file=self.composition.file,
                    line=guard.line,
                )
                _broken.append(str(error))
                raise error
        for link in self._by_enters.get(role or "", ()):
            if dest in link.enters and source not in link.enters:
                self._owe(link)

    def check(self, *, final: bool = False) -> None:
        """The end of a pass: every link's firing is done (``final``, the loop's end: those ``within: loop`` too)."""
        me = threading.get_ident()
        with self._lock:
            mine = [o for o in self._owed if o[2] == me and (final or o[0].within == "pass")]
            self._owed = [o for o in self._owed if o not in mine]
        if mine:
            link, machine, _ = mine[0]
            why = f"entered {sorted(link.enters)}" if link.enters else f"was fired {link.fired}"
            self._broken(
                link, f"{link.when_role} {why}, and {link.target} ({machine.state}) was not fired {link.trigger}"
            )

    def _owe(self, link: Link) -> None:
        spec = self.composition.role(link.target).spec
        ignored = self._ignored[link.target].get(link.trigger, frozenset())
        for m in self._roles[link.target]():
            if m.state in ignored or any(m.state in t.sources for t in spec.transitions if t.trigger == link.trigger):
                with self._lock:
                    self._owed.append((link, m, threading.get_ident()))

    def _holds(self, pred: RolePredicate) -> bool:
        return all(all(m.state in states for m in self._roles[r]()) for r, states in pred.states.items())

    def _broken(self, link: Link, what: str) -> None:
        error = SpecError(f"link {link.name!r} broken: {what}", file=self.composition.file, line=link.line)
        _broken.append(str(error))
        raise error
