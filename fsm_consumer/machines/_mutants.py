"""Specs broken on purpose, to show that the checks catch what they claim to (``check-specs --mutants``).

Each kind of mutant makes one small change to a spec's YAML data, the kind of slip that let the worst defects
of this project's history through (a lease that did not run in some states, a commit allowed where it should
not be): drop a transition, drop a timeout, take a state out of a timer, drop a timer's restart, move a state
to another value of an attribute. A mutant is found when loading it fails (schema or the builder's checks) or
its exploration reports a violation; one that passes every check is a change the specs' properties do not
constrain (each kind must have some found: a kind never found is a kind of slip nothing would catch).

A composition (specs/compositions/) has its own kinds: drop a link, drop a guard, and drop a machine's
``at_once`` (a state its hooks leave at once, which only the machines together show to matter); each mutant is
explored as the composition (``_product.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import yaml

from ._errors import SpecError
from ._explore import explore
from ._load import parse_spec

__all__ = ["COMPOSITION_KINDS", "KINDS", "Mutant", "MutantResult", "mutants", "run_composition_mutants", "run_mutants"]

KINDS = ("drop_transition", "drop_timeout", "shrink_timer", "drop_restart", "move_attribute")
COMPOSITION_KINDS = ("drop_link", "drop_guard", "drop_at_once")


@attrs.frozen
class Mutant:
    kind: str
    machine: str
    change: str
    data: dict[str, Any]


@attrs.frozen
class MutantResult:
    mutant: Mutant
    found: bool
    by: str  # how: the loading error or the first violation; "" when not found


def mutants(data: dict[str, Any]) -> Iterator[Mutant]:
    """Every mutant of one spec's YAML data (as yaml.safe_load gives it), kind by kind."""
    machine = data["machine"]
    for i, t in enumerate(data.get("transitions") or ()):
        m = copy.deepcopy(data)
        del m["transitions"][i]
        src = t["source"] if isinstance(t["source"], str) else ",".join(t["source"])
        yield Mutant("drop_transition", machine, f"transition {i} ({src} --{t['trigger']}--> {t['dest']})", m)
    for name, body in (data.get("states") or {}).items():
        body = body or {}
        timeouts = ([body["timeout"]] if "timeout" in body else []) + list(body.get("timeouts") or ())
        for j in range(len(timeouts)):
            m = copy.deepcopy(data)
            st = m["states"][name]
            if "timeout" in st:
                del st["timeout"]
            else:
                del st["timeouts"][j]
                if not st["timeouts"]:
                    del st["timeouts"]
            yield Mutant("drop_timeout", machine, f"state {name}: timeout {timeouts[j]['trigger']}", m)
    for name, body in (data.get("timers") or {}).items():
        for state in body["states"]:
            if len(body["states"]) < 2:
                continue
            m = copy.deepcopy(data)
            m["timers"][name]["states"] = [s for s in body["states"] if s != state]
            yield Mutant("shrink_timer", machine, f"timer {name} no longer runs in {state}", m)
        for trigger in body.get("restarted_by") or ():
            m = copy.deepcopy(data)
            rest = [t for t in body["restarted_by"] if t != trigger]
            if rest:
                m["timers"][name]["restarted_by"] = rest
            else:
                del m["timers"][name]["restarted_by"]
            yield Mutant("drop_restart", machine, f"timer {name} no longer restarted by {trigger}", m)
    for name, body in (data.get("attributes") or {}).items():
        values = body["values"]
        listed = [(v, s) for v, spec in values.items() if spec["states"] != "*" for s in spec["states"]]
        for value, state in listed:
            for other in values:
                if other == value:
                    continue
                m = copy.deepcopy(data)
                vals = m["attributes"][name]["values"]
                vals[value]["states"] = [s for s in vals[value]["states"] if s != state]
                if not vals[value]["states"]:
                    continue  # a value with no state: the schema refuses it, a trivial find
                if vals[other]["states"] != "*":
                    vals[other]["states"] = [*vals[other]["states"], state]
                yield Mutant("move_attribute", machine, f"attribute {name}: {state} from {value} to {other}", m)


def run_mutants(path: Path) -> list[MutantResult]:
    """Load and explore every mutant of the spec at ``path``."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    out = []
    for mutant in mutants(data):
        text = yaml.safe_dump(mutant.data, sort_keys=False)
        try:
            spec = parse_spec(text, f"{path} ({mutant.change})", expected_name=path.stem, validate_always=True)
        except SpecError as exc:
            out.append(MutantResult(mutant, True, f"refused: {str(exc).splitlines()[0][:160]}"))
            continue
        exploration = explore(spec)
        if exploration.violations:
            v = exploration.violations[0]
            out.append(MutantResult(mutant, True, f"{v.prop} {v.name}"))
        else:
            out.append(MutantResult(mutant, False, ""))
    return out


def run_composition_mutants(path: Path, specs: dict[str, Any] | None = None) -> list[MutantResult]:
    """Explore every mutant of the composition at ``path`` (its machines: ``specs`` by name, else the shipped)."""
    from ._composition import load_composition
    from ._product import explore_composition

    base = load_composition(path, specs)
    name = base.name
    variants: list[tuple[Mutant, Any]] = []
    for i, link in enumerate(base.links):
        variants.append(
            (Mutant("drop_link", name, f"link {link.name}", {}), attrs.evolve(base, links=_without(base.links, i)))
        )
    for i, guard in enumerate(base.guards):
        change = f"guard {guard.role}.{guard.condition}"
        variants.append((Mutant("drop_guard", name, change, {}), attrs.evolve(base, guards=_without(base.guards, i))))
    for role in base.roles:
        data = yaml.safe_load(Path(role.spec.file).read_text(encoding="utf-8"))
        for state, body in (data.get("states") or {}).items():
            if not (body or {}).get("at_once"):
                continue
            m = copy.deepcopy(data)
            del m["states"][state]["at_once"]
            spec = parse_spec(yaml.safe_dump(m, sort_keys=False), f"{role.spec.file} (no at_once in {state})")
            roles = tuple(attrs.evolve(r, spec=spec) if r.spec.machine == role.spec.machine else r for r in base.roles)
            change = f"{role.spec.machine}: {state} no longer left at once"
            variants.append((Mutant("drop_at_once", name, change, {}), attrs.evolve(base, roles=roles)))
    out = []
    for mutant, composition in variants:
        result = explore_composition(composition)
        v = result.violations[0] if result.violations else None
        out.append(MutantResult(mutant, v is not None, f"{v.prop} {v.name}" if v is not None else ""))
    return out


def _without(items: tuple[Any, ...], i: int) -> tuple[Any, ...]:
    return items[:i] + items[i + 1 :]
