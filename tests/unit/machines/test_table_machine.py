"""TableMachine: a hookless spec run as a table gives what its SpecMachine gives, step for step."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_consumer.machines import (
    IllegalTransition,
    SpecError,
    SpecMachine,
    TableMachine,
    add_observer,
    parse_spec,
    remove_observer,
    shipped_spec,
)

GATE = parse_spec(
    """\
machine: gate
initial: shut
attributes:
  passes:
    values:
      walk_through: {states: [open], unless: jammed}
      closed_to_all: {states: "*"}
states:
  shut: {}
  open: {}
  broken: {}
transitions:
  - {trigger: push, source: shut, dest: open, conditions: unlocked}
  - {trigger: push, source: shut, dest: "=", unless: unlocked}
  - {trigger: push, source: open, dest: shut}
  - {trigger: kick, source: "*", dest: broken}
  - {trigger: fix, source: broken, dest: shut}
ignore:
  - {trigger: fix, source: [shut, open], description: nothing to fix}
""",
    "gate.yaml",
)


class Flags:
    """Conditions answer from the flags the test sets; both machines read the same model."""

    def __init__(self, **flags):
        self.flags = flags

    def __getattr__(self, name):
        if name.startswith("_") or name == "flags":
            raise AttributeError(name)
        return lambda: self.flags.get(name, False)


def outcome(machine, trigger):
    try:
        return machine.fire(trigger)
    except IllegalTransition as exc:
        return ("illegal", exc.state, exc.trigger)


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["push", "kick", "fix", "sent", "answered", "unanswered", "released", "invalidate", "nope"]),
        st.booleans(),
        st.booleans(),
    ),
    max_size=40,
)


@pytest.mark.parametrize("spec", [GATE, shipped_spec("fetch")], ids=["gate", "fetch"])
@settings(max_examples=150, deadline=None)
@given(steps=STEPS)
def test_a_table_machine_steps_as_its_spec_machine(spec, steps):
    model = Flags()
    table, compiled = TableMachine(spec, model), SpecMachine(spec, model)
    for trigger, first, second in steps:
        model.flags = {"unlocked": first, "jammed": second, "not_ahead": second}
        assert outcome(table, trigger) == outcome(compiled, trigger)
        assert table.state == compiled.state
        for name in spec.attributes:
            assert table.attribute(name) == compiled.attribute(name)


def test_changes_reach_the_observers_with_their_spec_index():
    seen = []
    add_observer(seen.append)
    try:
        machine = TableMachine(GATE, Flags(unlocked=True), instance="g1")
        assert machine.fire("push") and machine.fire("kick")
        assert machine.fire("fix") and machine.state == "shut"
        assert not machine.fire("fix")  # ignored: no change, nothing observed
    finally:
        remove_observer(seen.append)
    assert [(r.machine, r.source, r.trigger, r.dest, r.index, r.instance) for r in seen] == [
        ("gate", "shut", "push", "open", 0, "g1"),
        ("gate", "open", "kick", "broken", 3, "g1"),
        ("gate", "broken", "fix", "shut", 4, "g1"),
    ]


def test_an_illegal_or_ignored_trigger_leaves_the_state():
    machine = TableMachine(GATE, Flags(unlocked=False))
    assert machine.fire("fix") is False and machine.state == "shut"  # ignored here
    assert machine.fire("push") is True and machine.state == "shut"  # '=': re-entered
    machine.fire("kick")
    with pytest.raises(IllegalTransition, match="'push' is not legal in state 'broken'"):
        machine.fire("push")
    assert machine.state == "broken"


def test_a_spec_that_calls_its_model_or_keeps_time_is_refused():
    door = parse_spec(
        """\
machine: door
initial: shut
durations:
  hold: {default: 100}
states:
  shut: {on_enter: [log]}
  open:
    timeout: {after: hold, trigger: close}
transitions:
  - {trigger: push, source: shut, dest: open}
  - {trigger: close, source: open, dest: shut}
""",
        "door.yaml",
    )
    with pytest.raises(SpecError, match="door.yaml.*calls its model or keeps time.*SpecMachine"):
        TableMachine(door, object())


def test_a_model_without_the_conditions_is_refused_naming_them():
    with pytest.raises(SpecError, match="object lacks the conditions jammed, unlocked of machine 'gate'"):
        TableMachine(GATE, object())
