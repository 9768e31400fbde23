"""Every way a spec can be wrong gives a SpecError naming the file, the line and the fault."""

import textwrap

import pytest

from fsm_consumer.machines import FakeClock, SpecError, SpecMachine, load_spec

GOOD = """\
machine: demo
initial: a
durations:
  wait: {default: 100}
states:
  a: {}
  b:
    timeout: {after: wait, trigger: timed_out}
transitions:
  - {trigger: go, source: a, dest: b}
  - {trigger: timed_out, source: b, dest: a}
"""


def load(tmp_path, text, name="demo"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    return load_spec(path)


def fails(tmp_path, text, line, *words, name="demo"):
    with pytest.raises(SpecError) as info:
        load(tmp_path, text, name)
    message = str(info.value)
    assert f"{name}.yaml:{line}:" in message, message
    assert info.value.line == line
    for w in words:
        assert w in message, message
    return message


def test_good_spec_loads(tmp_path):
    spec = load(tmp_path, GOOD)
    assert spec.machine == "demo" and list(spec.states) == ["a", "b"]
    assert [t.trigger for t in spec.transitions] == ["go", "timed_out"]


def test_yaml_syntax_error(tmp_path):
    fails(
        tmp_path,
        GOOD.replace("  - {trigger: go, source: a, dest: b}", "  - {trigger: go, source: a"),
        11,
        "YAML syntax error",
    )


def test_missing_required_key(tmp_path):
    fails(tmp_path, GOOD.replace("initial: a\n", ""), 1, "'initial' is a required property")


def test_wrong_type(tmp_path):
    fails(tmp_path, GOOD.replace("{default: 100}", "{default: soon}"), 4, "durations.wait.default", "integer")


def test_unknown_key_names_it_and_suggests(tmp_path):
    msg = fails(tmp_path, GOOD.replace("  a: {}", "  a:\n    on_entry: [x]"), 7, "unknown key 'on_entry'")
    assert "did you mean 'on_enter'" in msg


def test_unknown_top_level_key(tmp_path):
    fails(tmp_path, GOOD + "extra: 1\n", 12, "unknown key 'extra'")


def test_bad_name(tmp_path):
    fails(tmp_path, GOOD.replace("trigger: go,", "trigger: Go-now,"), 10, "'Go-now' is not a valid name")


@pytest.mark.parametrize("word", ["on", "off", "yes", "no"])
def test_yaml11_boolean_key(tmp_path, word):
    text = GOOD.replace("  a: {}", f"  a: {{}}\n  {word}: {{}}")
    fails(tmp_path, text, 7, f"key '{word}' is read by YAML 1.1 as a boolean")


def test_yaml11_boolean_value(tmp_path):
    fails(tmp_path, GOOD.replace("dest: b}", "dest: off}"), 10, "value 'off' is read by YAML 1.1 as a boolean")


def test_duplicate_key(tmp_path):
    fails(tmp_path, GOOD.replace("  a: {}", "  a: {}\n  a: {}"), 7, "duplicate key 'a'", "first given on line 6")


def test_transition_names_unknown_source(tmp_path):
    fails(
        tmp_path,
        GOOD.replace("source: a, dest: b", "source: nowhere, dest: b"),
        10,
        "source 'nowhere' is not a declared state",
    )


def test_transition_names_unknown_dest(tmp_path):
    fails(
        tmp_path,
        GOOD.replace("source: a, dest: b", "source: a, dest: nowhere"),
        10,
        "dest 'nowhere' is not a declared state",
    )


def test_unknown_initial(tmp_path):
    fails(tmp_path, GOOD.replace("initial: a", "initial: z"), 2, "initial state 'z' is not declared")


def test_unknown_terminal(tmp_path):
    fails(tmp_path, GOOD.replace("initial: a\n", "initial: a\nterminal: [z]\n"), 3, "terminal state 'z'")


def test_unreachable_state(tmp_path):
    fails(tmp_path, GOOD.replace("  a: {}", "  a: {}\n  island: {}"), 7, "state 'island' is unreachable")


def test_non_terminal_state_without_exit(tmp_path):
    text = GOOD.replace("  - {trigger: timed_out, source: b, dest: a}", "  - {trigger: timed_out, source: b, dest: c}")
    text = text.replace("  a: {}", "  a: {}\n  c: {}")
    fails(tmp_path, text, 7, "state 'c' is not terminal but has no transition out of it")


def test_terminal_state_without_exit_is_fine(tmp_path):
    text = (
        GOOD.replace("dest: a}", "dest: c}")
        .replace("  a: {}", "  a: {}\n  c: {}")
        .replace("initial: a\n", "initial: a\nterminal: [c]\n")
    )
    assert load(tmp_path, text).terminal == ("c",)


def test_transition_out_of_terminal_state(tmp_path):
    text = GOOD.replace("initial: a\n", "initial: a\nterminal: [b]\n")
    fails(tmp_path, text, 12, "leaves terminal state 'b'")


def test_timeout_names_undeclared_trigger(tmp_path):
    fails(
        tmp_path,
        GOOD.replace("trigger: timed_out}", "trigger: never_declared}"),
        8,
        "timeout trigger 'never_declared' is not declared",
    )


def test_timeout_trigger_without_transition_from_its_state(tmp_path):
    text = GOOD.replace("trigger: timed_out}", "trigger: go}")
    fails(tmp_path, text, 8, "timeout trigger 'go' has no transition from 'b'")


def test_timeout_names_undeclared_duration(tmp_path):
    fails(tmp_path, GOOD.replace("after: wait,", "after: forever,"), 8, "'forever' names no declared duration")


def test_ambiguous_transitions(tmp_path):
    text = GOOD + "  - {trigger: go, source: a, dest: a}\n"
    fails(tmp_path, text, 12, "'go' from 'a' is given twice (lines 10 and 12)", "no condition to tell them apart")


def test_same_conditions_are_ambiguous(tmp_path):
    text = (
        GOOD.replace("dest: b}", "dest: b, conditions: ok}") + "  - {trigger: go, source: a, dest: a, conditions: ok}\n"
    )
    fails(tmp_path, text, 12, "given twice")


def test_unconditional_before_conditional_is_dead(tmp_path):
    text = GOOD + "  - {trigger: go, source: a, dest: a, conditions: ok}\n"
    fails(tmp_path, text, 12, "can never be taken", "line 10")


def test_conditional_then_fallback_is_fine(tmp_path):
    text = GOOD.replace("dest: b}", "dest: a, conditions: stay}", 1) + "  - {trigger: go, source: a, dest: b}\n"
    spec = load(tmp_path, text)
    assert [t.conditions for t in spec.transitions if t.trigger == "go"] == [("stay",), ()]


def test_machine_name_must_match_file(tmp_path):
    fails(tmp_path, GOOD, 1, "must be named like its file ('other')", name="other")


def test_empty_file(tmp_path):
    fails(tmp_path, "", 1, "empty")


def test_binding_lists_every_missing_hook(tmp_path):
    text = GOOD.replace("  a: {}", "  a:\n    on_enter: [hello]").replace(
        "dest: b}", "dest: b, conditions: ready, after: [notify]}"
    )
    spec = load(tmp_path, text)

    class Model:
        def hello(self):
            pass

    with pytest.raises(SpecError) as info:
        SpecMachine(spec, Model(), clock=FakeClock())
    message = str(info.value)
    assert message.startswith(f"{spec.file}:")
    assert "ready" in message and "notify" in message and "hello" not in message.split("lacks")[1]
    assert "line 11" in message  # where the transition that names them stands
    assert len(info.value.faults) == 2


def test_unreadable_file(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "missing.yaml")
    assert "missing.yaml" in str(info.value) and "cannot read" in str(info.value)


# -- attributes: what the model reads of a state, given by every state (issue 23) ------------------------------

ATTRS = (
    GOOD
    + """\
attributes:
  commit:
    description: what a commit may do
    values:
      open: {states: [a]}
      refused: {states: [b]}
"""
)


def test_attributes_load_and_a_machine_reads_them(tmp_path):
    spec = load(tmp_path, ATTRS)
    assert spec.attributes["commit"].of_state == {"a": "open", "b": "refused"}

    class Model:
        pass

    m = SpecMachine(spec, Model(), clock=FakeClock(0))
    assert m.attribute("commit") == "open"
    m.fire("go")
    assert m.attribute("commit") == "refused"


def test_an_attribute_must_give_every_state_a_value(tmp_path):
    fails(tmp_path, ATTRS.replace("      refused: {states: [b]}\n", ""), 16, "no value to state(s) b")


def test_an_attribute_gives_a_state_one_value(tmp_path):
    fails(
        tmp_path,
        ATTRS.replace("refused: {states: [b]}", "refused: {states: [b, a]}"),
        17,
        "state 'a' is given two values",
    )


def test_an_attribute_value_names_declared_states(tmp_path):
    fails(tmp_path, ATTRS.replace("refused: {states: [b]}", "refused: {states: [b, c]}"), 17, "'c' is not a declared")


def test_an_attribute_may_give_the_rest_once(tmp_path):
    spec = load(tmp_path, ATTRS.replace("refused: {states: [b]}", 'refused: {states: "*"}'))
    assert spec.attributes["commit"].of_state == {"a": "open", "b": "refused"}
    fails(
        tmp_path,
        ATTRS.replace("refused: {states: [b]}", 'refused: {states: "*"}').replace(
            "open: {states: [a]}", 'open: {states: "*"}'
        ),
        17,
        "only one value may take the rest",
    )


def test_an_attribute_value_unless_a_condition_is_the_rest_while_it_holds(tmp_path):
    """``unless: <condition>``: what may be sent decided in the spec (membership's request: no LeaveGroup
    for a member that keeps its place), read through the model's condition when the attribute is read."""
    spec = load(
        tmp_path,
        ATTRS.replace("open: {states: [a]}", "open: {states: [a], unless: frozen}").replace(
            "refused: {states: [b]}", 'refused: {states: "*"}'
        ),
    )
    assert spec.attributes["commit"].unless == {"open": "frozen"}

    class Model:
        is_frozen = False

        def frozen(self) -> bool:
            return self.is_frozen

    model = Model()
    m = SpecMachine(spec, model, clock=FakeClock(0))
    assert m.attribute("commit") == "open"
    model.is_frozen = True
    assert m.attribute("commit") == "refused"  # read when asked: the model's condition now
    assert m.attribute_of("commit", "a") == "open"  # the state's own value, as the diagram shows it
    with pytest.raises(SpecError, match=r"frozen \(used by attributes.commit.values.open.unless"):
        SpecMachine(spec, object(), clock=FakeClock(0))


def test_unless_needs_a_rest_value_and_is_not_on_it(tmp_path):
    fails(
        tmp_path,
        ATTRS.replace("open: {states: [a]}", "open: {states: [a], unless: frozen}"),
        16,
        "no value takes '*'",
    )
    fails(
        tmp_path,
        ATTRS.replace("refused: {states: [b]}", 'refused: {states: "*", unless: frozen}'),
        17,
        "not on '*' itself",
    )


def test_an_internal_transition_stays_in_its_state(tmp_path):
    text = GOOD.replace(
        "  - {trigger: go, source: a, dest: b}",
        "  - {trigger: go, source: a, dest: b, conditions: ready}\n"
        "  - {trigger: go, source: a, dest: '=', internal: true}",
    )

    class Model:
        ready = False
        entered = 0

        def is_ready(self):
            return self.ready

    text = text.replace("conditions: ready", "conditions: is_ready")
    spec = load(tmp_path, text)
    model = Model()
    m = SpecMachine(spec, model, clock=FakeClock(0))
    visit = m.visit
    assert m.fire("go") and m.state == "a" and m.visit == visit and m.log[-1].trigger == "go"
    model.ready = True
    assert m.fire("go") and m.state == "b"
    fails(
        tmp_path,
        GOOD.replace("  - {trigger: go, source: a, dest: b}", "  - {trigger: go, source: a, dest: b, internal: true}"),
        10,
        "must be '='",
    )


def test_shipped_schema_is_a_valid_json_schema():
    """The shipped schema is trusted at run time (checking it costs each process 60 ms): checked here."""
    from fsm_consumer.machines._schema import check_schema_file

    check_schema_file()


def test_a_users_schema_is_checked_against_the_metaschema(tmp_path, monkeypatch):
    import json
    import shutil

    from fsm_consumer.machines import _schema
    from fsm_consumer.machines._paths import ENV_VAR, schema_path

    schema = json.loads(schema_path().read_text())
    schema["properties"]["machine"] = {"type": "no-such-type"}
    (tmp_path / "spec.schema.json").write_text(json.dumps(schema))
    shutil.copy(schema_path().parent / "connection.yaml", tmp_path / "connection.yaml")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    _schema._validator.cache_clear()
    try:
        with pytest.raises(SpecError, match="no-such-type") as info:
            load_spec(tmp_path / "connection.yaml")
        assert info.value.file == str(tmp_path / "spec.schema.json")
        assert "properties.machine.type" in str(info.value)
    finally:
        monkeypatch.delenv(ENV_VAR)
        _schema._validator.cache_clear()
    load_spec(schema_path().parent / "connection.yaml")  # the shipped schema again
