"""Raw (schema-valid) YAML data -> Spec, with the semantic checks a schema cannot express."""

from __future__ import annotations

from collections import deque

from ._errors import SpecError
from ._model import (
    Attribute,
    Duration,
    Event,
    Ignore,
    Invariant,
    Predicate,
    Relation,
    Spec,
    State,
    Timeout,
    Timer,
    Transition,
)
from ._yaml import Located


def _hooks(value) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def build_spec(doc: Located, expected_name: str | None = None) -> Spec:
    data = doc.data
    name = data["machine"]
    if expected_name is not None and name != expected_name:
        raise doc.error(("machine",), f"machine {name!r} must be named like its file ({expected_name!r})")

    durations = {
        d: Duration(
            name=d,
            default=v["default"],
            config=v.get("config"),
            description=v.get("description", ""),
            computed_by=v.get("computed_by"),
        )
        for d, v in (data.get("durations") or {}).items()
    }
    states: dict[str, State] = {}
    for sname, body in data["states"].items():
        body = body or {}
        raw_timeouts = ([body["timeout"]] if "timeout" in body else []) + list(body.get("timeouts", []))
        if "timeout" in body and "timeouts" in body:
            raise doc.error(
                ("states", sname, "timeouts"), f"state {sname!r}: give 'timeout' or 'timeouts', not both", key=True
            )
        timeouts = []
        for i, t in enumerate(raw_timeouts):
            tpath = ("states", sname, "timeout") if "timeout" in body else ("states", sname, "timeouts", i)
            if t["after"] not in durations:
                raise doc.error(
                    tpath + ("after",),
                    f"state {sname!r}: timeout after {t['after']!r} names no declared duration "
                    f"(declared: {', '.join(durations) or 'none'})",
                )
            timeouts.append(
                Timeout(
                    after=t["after"],
                    trigger=t["trigger"],
                    line=doc.line_of(tpath),
                    description=t.get("description", ""),
                )
            )
        states[sname] = State(
            name=sname,
            description=body.get("description", ""),
            on_enter=_hooks(body.get("on_enter")),
            on_exit=_hooks(body.get("on_exit")),
            timeouts=tuple(timeouts),
            line=doc.line_of(("states", sname), key=True),
            at_once=body.get("at_once"),
        )

    for field in ("initial",):
        if data[field] not in states:
            raise doc.error((field,), f"{field} state {data[field]!r} is not declared under states")
    terminal = tuple(data.get("terminal") or ())
    for i, t in enumerate(terminal):
        if t not in states:
            raise doc.error(("terminal", i), f"terminal state {t!r} is not declared under states")
    non_terminal = tuple(s for s in states if s not in terminal)

    transitions = []
    for i, raw in enumerate(data["transitions"]):
        path = ("transitions", i)
        src = raw["source"]
        wildcard = src == "*"
        sources = non_terminal if wildcard else ((src,) if isinstance(src, str) else tuple(src))
        for j, s in enumerate(sources):
            if s not in states:
                spath = path + (("source",) if isinstance(src, str) else ("source", j))
                raise doc.error(spath, f"transition {raw['trigger']!r}: source {s!r} is not a declared state")
        dest = None if raw["dest"] == "=" else raw["dest"]
        if raw.get("internal") and dest is not None:
            raise doc.error(
                path + ("internal",),
                f"transition {raw['trigger']!r} is internal (it stays in its "
                f"state), so its dest must be '=', not {dest!r}",
                key=True,
            )
        if dest is not None and dest not in states:
            raise doc.error(path + ("dest",), f"transition {raw['trigger']!r}: dest {dest!r} is not a declared state")
        for s in sources:
            if s in terminal:
                raise doc.error(path + ("source",), f"transition {raw['trigger']!r} leaves terminal state {s!r}")
        transitions.append(
            Transition(
                index=i,
                trigger=raw["trigger"],
                sources=sources,
                dest=dest,
                wildcard=wildcard,
                conditions=_hooks(raw.get("conditions")),
                unless=_hooks(raw.get("unless")),
                before=_hooks(raw.get("before")),
                after=_hooks(raw.get("after")),
                description=raw.get("description", ""),
                line=doc.line_of(path),
                internal=bool(raw.get("internal")),
            )
        )

    timers = _build_timers(doc, data, states, durations)
    events = {
        trig: Event(
            trigger=trig,
            arrives_in=_states_of(doc, ("events", trig, "arrives_in"), body["arrives_in"], states, tuple(states)),
            line=doc.line_of(("events", trig), key=True),
            description=body.get("description", ""),
        )
        for trig, body in (data.get("events") or {}).items()
    }
    ignores = []
    for i, raw in enumerate(data.get("ignore") or ()):
        path = ("ignore", i)
        if raw["source"] == "*":  # every state the trigger has no transition from
            sources = tuple(
                s for s in states if not any(raw["trigger"] == t.trigger and s in t.sources for t in transitions)
            )
        else:
            sources = _states_of(doc, path + ("source",), raw["source"], states, ())
        ignores.append(
            Ignore(trigger=raw["trigger"], sources=sources, line=doc.line_of(path), description=raw["description"])
        )
    attributes = _build_attributes(doc, data, states)
    invariants = _build_invariants(doc, data, states, timers, attributes)
    relations = _build_relations(doc, data, durations)
    spec = Spec(
        machine=name,
        file=doc.file,
        initial=data["initial"],
        states=states,
        transitions=tuple(transitions),
        terminal=terminal,
        durations=durations,
        description=data.get("description", ""),
        timers=timers,
        events=events,
        ignores=tuple(ignores),
        attributes=attributes,
        invariants=invariants,
        relations=relations,
    )
    _check_ambiguity(spec, doc)
    _check_timeouts(spec, doc)
    _check_ignores(spec, doc)
    _check_arrivals(spec, doc)
    _check_restarts(spec, doc)
    _check_reachability(spec, doc)
    _check_exits(spec, doc)
    return spec


def _states_of(doc: Located, path: tuple, value, states, everything: tuple[str, ...]) -> tuple[str, ...]:
    if value == "*":
        return everything
    names = (value,) if isinstance(value, str) else tuple(value)
    for j, s in enumerate(names):
        if s not in states:
            raise doc.error(path if isinstance(value, str) else path + (j,), f"{s!r} is not a declared state")
    return names


def _build_timers(doc: Located, data: dict, states, durations) -> dict[str, Timer]:
    timers = {}
    for tname, body in (data.get("timers") or {}).items():
        path = ("timers", tname)
        if body["after"] not in durations:
            raise doc.error(
                path + ("after",),
                f"timer {tname!r}: after {body['after']!r} names no declared duration "
                f"(declared: {', '.join(durations) or 'none'})",
            )
        covered = _states_of(doc, path + ("states",), body["states"], states, ())
        timers[tname] = Timer(
            name=tname,
            after=body["after"],
            trigger=body["trigger"],
            states=frozenset(covered),
            line=doc.line_of(path, key=True),
            description=body.get("description", ""),
            restarted_by=tuple(body.get("restarted_by") or ()),
        )
    return timers


def _check_restarts(spec: Spec, doc: Located) -> None:
    """A timer's restarted_by names triggers with a transition into the timer's states."""
    for tm in spec.timers.values():
        for i, trig in enumerate(tm.restarted_by):
            if not any(
                t.trigger == trig and any(t.dest_from(s) in tm.states for s in t.sources) for t in spec.transitions
            ):
                raise doc.error(
                    ("timers", tm.name, "restarted_by", i),
                    f"timer {tm.name!r}: restarted_by {trig!r} names no transition into its states",
                )


def _build_attributes(doc: Located, data: dict, states) -> dict[str, Attribute]:
    """Every state gets exactly one value of every attribute: a state added later must say what it
    means (may it heartbeat, what does a commit do there) instead of silently counting as one."""
    out = {}
    for aname, body in (data.get("attributes") or {}).items():
        path = ("attributes", aname)
        of_state: dict[str, str] = {}
        values: dict[str, tuple[str, ...]] = {}
        rest = None
        for value, vbody in body["values"].items():
            vpath = path + ("values", value, "states")
            if vbody["states"] == "*":
                if rest is not None:
                    raise doc.error(
                        vpath, f"attribute {aname!r}: only one value may take the rest ('*'); {rest!r} does already"
                    )
                rest = value
                continue
            names = _states_of(doc, vpath, vbody["states"], states, ())
            for s in names:
                if s in of_state:
                    raise doc.error(
                        vpath, f"attribute {aname!r}: state {s!r} is given two values ({of_state[s]!r} and {value!r})"
                    )
                of_state[s] = value
            values[value] = names
        unless = {v: b["unless"] for v, b in body["values"].items() if "unless" in b}
        for value in unless:
            if rest is None or value == rest:
                raise doc.error(
                    path + ("values", value, "unless"),
                    f"attribute {aname!r}: value {value!r} has 'unless', which gives its states the '*' value while "
                    + ("it holds, but no value takes '*'" if rest is None else "it holds; not on '*' itself"),
                )
        missing = [s for s in states if s not in of_state]
        if rest is not None:
            values[rest] = tuple(missing)
            of_state.update({s: rest for s in missing})
        elif missing:
            raise doc.error(
                path + ("values",),
                f"attribute {aname!r} gives no value to state(s) {', '.join(missing)}: every state must have one",
            )
        out[aname] = Attribute(
            name=aname,
            values=values,
            of_state=of_state,
            line=doc.line_of(path, key=True),
            description=body.get("description", ""),
            value_descriptions={v: b.get("description", "") for v, b in body["values"].items()},
            rest=rest,
            unless=unless,
        )
    return out


def _build_invariants(doc: Located, data: dict, states, timers, attributes) -> tuple[Invariant, ...]:
    out = []
    for name, body in (data.get("invariants") or {}).items():
        path = ("invariants", name)
        parts = {}
        for part in ("when", "then"):
            raw, where = body[part], path + (part,)
            named = tuple(raw.get("states") or ())
            for i, s in enumerate(named):
                if s not in states:
                    raise doc.error(
                        where + ("states", i), f"invariant {name!r}: {part} names state {s!r}, not declared"
                    )
            attr = raw.get("attribute")
            values = tuple(raw.get("values") or ())
            if attr is not None:
                if attr not in attributes:
                    raise doc.error(
                        where + ("attribute",),
                        f"invariant {name!r}: {part} names attribute {attr!r} "
                        f"(declared: {', '.join(attributes) or 'none'})",
                    )
                for i, v in enumerate(values):
                    if v not in attributes[attr].values:
                        raise doc.error(
                            where + ("values", i),
                            f"invariant {name!r}: attribute {attr!r} has no value {v!r} "
                            f"(its values: {', '.join(attributes[attr].values)})",
                        )
            timer = raw.get("timer")
            if timer is not None and timer not in timers:
                raise doc.error(
                    where + ("timer",),
                    f"invariant {name!r}: {part} names timer {timer!r} (declared: {', '.join(timers) or 'none'})",
                )
            parts[part] = Predicate(
                states=named, attribute=attr, values=values, timer=timer, deadline=bool(raw.get("deadline"))
            )
        hooks = {h for t in data.get("transitions") or () for k in ("conditions", "unless") for h in _hooks(t.get(k))}
        suspended = tuple((body.get("suspended_by") or {}).items())
        for cond, _ in suspended:
            if cond not in hooks:
                raise doc.error(
                    path + ("suspended_by", cond),
                    f"invariant {name!r}: suspended_by names {cond!r}, no transition's condition",
                    key=True,
                )
        out.append(
            Invariant(
                name=name,
                when=parts["when"],
                then=parts["then"],
                line=doc.line_of(path, key=True),
                description=body.get("description", ""),
                suspended_by=suspended,
            )
        )
    return tuple(out)


def _build_relations(doc: Located, data: dict, durations) -> tuple[Relation, ...]:
    out = []
    for name, body in (data.get("relations") or {}).items():
        kind = "below" if "below" in body else "at_most"
        pair = body[kind]
        for i, d in enumerate(pair):
            if d not in durations:
                raise doc.error(
                    ("relations", name, kind, i),
                    f"relation {name!r}: {d!r} names no declared duration (declared: {', '.join(durations) or 'none'})",
                )
        out.append(
            Relation(
                name=name,
                shorter=pair[0],
                longer=pair[1],
                strict=kind == "below",
                line=doc.line_of(("relations", name), key=True),
                description=body.get("description", ""),
            )
        )
    return tuple(out)


def _handles(spec: Spec, trigger: str, state: str, ignored: dict[str, frozenset[str]]) -> bool:
    return state in ignored.get(trigger, ()) or any(
        trigger == t.trigger and state in t.sources for t in spec.transitions
    )


def _check_ignores(spec: Spec, doc: Located) -> None:
    """An ignore entry must not shadow a transition: the trigger would mean two things in one state."""
    for ig in spec.ignores:
        for s in ig.sources:
            for t in spec.transitions:
                if t.trigger == ig.trigger and s in t.sources:
                    raise _at(
                        doc,
                        ig.line,
                        f"trigger {ig.trigger!r} is ignored in {s!r} but has a transition from it on line {t.line}",
                    )


def _check_arrivals(spec: Spec, doc: Located) -> None:
    """Every trigger that can arrive in a state (an event from outside, a timer) is handled there:
    by a transition or a declared ignore. Nothing is skipped silently at run time."""
    ignored = spec.ignored()
    for ev in spec.events.values():
        for s in ev.arrives_in:
            if not _handles(spec, ev.trigger, s, ignored):
                raise _at(
                    doc,
                    ev.line,
                    f"event {ev.trigger!r} can arrive in state {s!r} (events.{ev.trigger}."
                    f"arrives_in), which has no transition and no ignore entry for it",
                )
    for tm in spec.timers.values():
        for s in sorted(tm.states):
            if not _handles(spec, tm.trigger, s, ignored):
                raise _at(
                    doc,
                    tm.line,
                    f"timer {tm.name!r} runs in state {s!r} but its trigger {tm.trigger!r} has no transition from it",
                )


def _check_ambiguity(spec: Spec, doc: Located) -> None:
    """Same trigger and source: later entries must be told apart by conditions, and an
    unconditional entry must come last (transitions takes the first that passes)."""
    seen: dict[tuple[str, str], list[Transition]] = {}
    for t in spec.transitions:
        for s in t.sources:
            for earlier in seen.get((t.trigger, s), []):
                guard = (earlier.conditions, earlier.unless)
                if guard == (t.conditions, t.unless):
                    raise doc.error(
                        ("transitions", t.index),
                        f"transition {t.trigger!r} from {s!r} is given twice (lines {earlier.line} and "
                        f"{t.line}) with no condition to tell them apart",
                    )
                if guard == ((), ()):
                    raise doc.error(
                        ("transitions", t.index),
                        f"transition {t.trigger!r} from {s!r} can never be taken: the unconditional "
                        f"one on line {earlier.line} comes first",
                    )
            seen.setdefault((t.trigger, s), []).append(t)


def _check_timeouts(spec: Spec, doc: Located) -> None:
    triggers = set(spec.triggers)
    for st in spec.states.values():
        if st.at_once is not None:
            # a transient state: left at once by its own trigger, which must be taken whatever the conditions say
            if not st.on_enter:
                raise _at(doc, st.line, f"state {st.name!r}: at_once {st.at_once!r} needs an on_enter hook to fire it")
            out = [t for t in spec.transitions if t.trigger == st.at_once and st.name in t.sources]
            if (
                len(out) != 1
                or out[0].conditions
                or out[0].unless
                or out[0].internal
                or out[0].dest_from(st.name) == st.name
            ):
                raise _at(
                    doc, st.line,
                    f"state {st.name!r}: at_once {st.at_once!r} needs one unconditional transition out of {st.name!r}",
                )  # fmt: skip
            if st.timeouts or st.name in spec.terminal or st.name == spec.initial:
                raise _at(
                    doc, st.line, f"state {st.name!r}: a state left at once has no timeout, is not terminal nor initial"
                )
        for to in st.timeouts:
            if to.trigger not in triggers:
                raise _at(
                    doc, to.line, f"state {st.name!r}: timeout trigger {to.trigger!r} is not declared by any transition"
                )
            if not any(to.trigger == t.trigger and st.name in t.sources for t in spec.transitions):
                raise _at(
                    doc,
                    to.line,
                    f"state {st.name!r}: timeout trigger {to.trigger!r} has no transition from {st.name!r}",
                )


def _at(doc: Located, line: int, fault: str) -> SpecError:
    return SpecError(fault, file=doc.file, line=line)


def _check_reachability(spec: Spec, doc: Located) -> None:
    reached = {spec.initial}
    todo = deque([spec.initial])
    while todo:
        s = todo.popleft()
        for t in spec.transitions:
            if s in t.sources:
                d = t.dest_from(s)
                if d not in reached:
                    reached.add(d)
                    todo.append(d)
    for name, st in spec.states.items():
        if name not in reached:
            raise _at(doc, st.line, f"state {name!r} is unreachable from the initial state {spec.initial!r}")


def _check_exits(spec: Spec, doc: Located) -> None:
    for name, st in spec.states.items():
        if name in spec.terminal:
            continue
        if not any(name in t.sources and t.dest_from(name) != name for t in spec.transitions):
            raise _at(
                doc,
                st.line,
                f"state {name!r} is not terminal but has no transition out of it (add one, or list it under terminal)",
            )
