"""check-specs --explore: every reachable node of a spec walked, totality, deadlock freedom and the spec's own
invariants checked, each violation with the shortest trigger sequence; each property shown to catch its break,
and the membership spec as it stood before its lease ran while rejoining reported with its trace."""

from pathlib import Path

import pytest

from fsm_consumer.cli import main
from fsm_consumer.machines import (
    FakeClock,
    SpecError,
    SpecMachine,
    all_spec_paths,
    load_spec,
    parse_spec,
    shipped_compositions,
)
from fsm_consumer.machines._explore import explore
from fsm_consumer.machines._mutants import KINDS, run_mutants

BEFORE_LEASE = Path(__file__).parent / "fixtures" / "before_lease" / "membership.yaml"


def spec(text: str, name: str = "m"):
    return parse_spec(text, f"{name}.yaml", expected_name=name, validate_always=True)


@pytest.mark.parametrize("path", all_spec_paths(), ids=lambda p: p.stem)
def test_every_shipped_spec_holds_every_property(path):
    result = explore(load_spec(path))
    assert result.ok, result.report()
    assert result.nodes >= len(result.spec.states) and result.edges > 0
    assert result.states_reached == set(result.spec.states)  # every state reachable (the builder checks it too)
    assert "every property holds" in result.summary()


def test_the_shipped_specs_state_invariants():
    stated = {p.stem: len(load_spec(p).invariants) for p in all_spec_paths()}
    assert all(stated[m] >= 1 for m in ("membership", "consumer_membership", "share_batch", "share_membership"))


def test_the_membership_spec_before_its_lease_ran_while_rejoining_is_reported_with_its_trace():
    result = explore(load_spec(BEFORE_LEASE))
    assert not result.ok
    (v,) = result.violations
    assert (v.prop, v.name) == ("invariant", "lease_while_owning")
    assert v.node.state == "joining" and "session" not in v.node.timers
    assert [s.trigger for s in v.path] == ["join_requested"]  # the shortest: a member joins without a lease
    assert "unjoined" in v.trace(result.initial) and "--join_requested (event)--> joining" in v.trace(result.initial)
    assert "when partitions in [may_own], then timer session running" in result.report()


def test_todays_membership_spec_holds_the_same_invariant():
    result = explore(load_spec(next(p for p in all_spec_paths() if p.stem == "membership")))
    assert "lease_while_owning" in {i.name for i in result.spec.invariants} and result.ok


BASE = """\
machine: m
initial: idle
terminal: [done]
durations:
  lease: {default: 100}
  wait: {default: 50}
timers:
  lease: {after: lease, trigger: lease_out, states: [owning, busy]}
attributes:
  owns:
    values:
      held: {states: [owning, busy]}
      free: {states: "*"}
states:
  idle: {}
  owning: {}
  busy: {}
  done: {}
transitions:
  - {trigger: take, source: idle, dest: owning}
  - {trigger: work, source: owning, dest: busy}
  - {trigger: rest, source: busy, dest: owning}
  - {trigger: lease_out, source: [owning, busy], dest: idle}
  - {trigger: stop, source: "*", dest: done}
invariants:
  lease_while_owning:
    when: {attribute: owns, values: [held]}
    then: {timer: lease}
"""


def test_a_well_formed_spec_holds():
    assert explore(spec(BASE)).ok


def test_totality_catches_a_trigger_dropped_when_its_condition_fails():
    text = BASE.replace(
        "  - {trigger: work, source: owning, dest: busy}",
        "  - {trigger: work, source: owning, dest: busy, conditions: ready}",
    )
    result = explore(spec(text))
    (v,) = result.violations
    assert (v.prop, v.name, v.node.state) == ("totality", "work", "owning")
    assert "ready=false" in v.message and [s.trigger for s in v.path] == ["take"]
    # an else-branch makes it total again
    total = text.replace(
        "  - {trigger: rest,", "  - {trigger: work, source: owning, dest: '=', internal: true}\n  - {trigger: rest,"
    )
    assert explore(spec(total)).ok


def test_no_deadlock_catches_a_state_that_cannot_reach_the_end():
    text = """\
machine: m
initial: a
terminal: [done]
states: {a: {}, b: {}, c: {}, done: {}}
transitions:
  - {trigger: go, source: a, dest: b}
  - {trigger: loop, source: b, dest: c}
  - {trigger: back, source: c, dest: b}
  - {trigger: stop, source: a, dest: done}
"""
    result = explore(spec(text))
    (v,) = result.violations
    assert (v.prop, v.node.state) == ("deadlock", "b") and [s.trigger for s in v.path] == ["go"]
    assert explore(spec(text.replace("source: a, dest: done", "source: [a, c], dest: done"))).ok


def test_an_invariant_catches_a_timer_that_no_longer_runs_where_it_should():
    text = BASE.replace("states: [owning, busy]}\nattributes", "states: [owning]}\nattributes")
    text = text.replace("source: [owning, busy], dest: idle}", "source: [owning], dest: idle}")
    result = explore(spec(text))
    (v,) = result.violations
    assert (v.prop, v.name, v.node.state) == ("invariant", "lease_while_owning", "busy")
    assert [s.trigger for s in v.path] == ["take", "work"]


def test_a_timer_that_fired_and_stays_breaks_an_invariant_unless_the_spec_suspends_it():
    text = BASE.replace(
        "  - {trigger: lease_out, source: [owning, busy], dest: idle}",
        "  - {trigger: lease_out, source: [owning, busy], dest: idle, conditions: owned}\n"
        "  - {trigger: lease_out, source: [owning, busy], dest: '=', internal: true}",
    )
    (v,) = explore(spec(text)).violations
    assert v.name == "lease_while_owning" and v.path[-1].trigger == "lease_out"
    assert v.path[-1].guards == (("owned", False),)
    suspended = text + "    suspended_by: {owned: false}\n"
    assert explore(spec(suspended)).ok


def test_restarted_by_arms_the_timer_again_and_the_machine_checks_the_model_did():
    # the lease fired with nothing owned, the machine stays; 'take' again must restart it
    text = BASE.replace("  idle: {}\n", "").replace("initial: idle", "initial: owning")
    text = text.replace(
        "  - {trigger: take, source: idle, dest: owning}\n", "  - {trigger: take, source: owning, dest: busy}\n"
    )
    text = text.replace(
        "  - {trigger: lease_out, source: [owning, busy], dest: idle}",
        "  - {trigger: lease_out, source: [owning, busy], dest: '=', internal: true}",
    )
    text = text.replace(
        "    then: {timer: lease}\n", "    then: {timer: lease}\n    suspended_by: {never_true: true}\n"
    ).replace(
        "  - {trigger: stop,",
        "  - {trigger: stop, source: busy, dest: busy, conditions: never_true}\n  - {trigger: stop,",
    )
    broken = explore(spec(text))
    assert any(v.name == "lease_while_owning" for v in broken.violations)
    fixed_text = text.replace(
        "trigger: lease_out, states: [owning, busy]}",
        "trigger: lease_out, states: [owning, busy], restarted_by: [take]}",
    )
    fixed = explore(spec(fixed_text))
    assert not [v for v in fixed.violations if v.name == "lease_while_owning" and v.path[-1].trigger == "take"]

    class Model:
        def never_true(self):
            return False

    machine = SpecMachine(spec(fixed_text), Model(), clock=FakeClock())
    machine.tick(100.0)  # the lease runs out: it stays in owning, the timer no longer runs
    assert machine.state == "owning" and machine.timer_deadline("lease") is None
    with pytest.raises(SpecError, match="restarted_by"):
        machine.fire("take")  # fired without restart_timer: the spec's promise is broken, loudly
    machine2 = SpecMachine(spec(fixed_text), Model(), clock=FakeClock())
    machine2.tick(100.0)
    machine2.restart_timer("lease", 100.0)
    assert machine2.fire("take") and machine2.timer_deadline("lease") == 200.0


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("then: {timer: lease}", "then: {timer: leash}"),
        ("values: [held]", "values: [maybe]"),
        ("attribute: owns,", "attribute: own,"),
        ("then: {timer: lease}", "then: {states: [nowhere]}"),
    ],
)
def test_an_invariant_naming_what_the_spec_lacks_is_refused_with_its_line(bad, says):
    with pytest.raises(SpecError) as info:
        spec(BASE.replace(bad, says))
    assert "m.yaml:" in str(info.value) and "invariant 'lease_while_owning'" in str(info.value)


def test_restarted_by_and_suspended_by_must_name_what_exists():
    with pytest.raises(SpecError, match="restarted_by 'rest'|restarted_by 'nothing'"):
        spec(
            BASE.replace(
                "states: [owning, busy]}\nattributes", "states: [owning, busy], restarted_by: [nothing]}\nattributes"
            )
        )
    with pytest.raises(SpecError, match="suspended_by names 'ghost'"):
        spec(BASE + "    suspended_by: {ghost: false}\n")


def test_every_kind_of_mutant_of_the_membership_spec_is_found_somewhere():
    path = next(p for p in all_spec_paths() if p.stem == "membership")
    results = run_mutants(path)
    kinds = {r.mutant.kind for r in results if r.found}
    assert kinds == set(KINDS), {k: [r.mutant.change for r in results if r.mutant.kind == k] for k in KINDS}
    # the lease no longer running in joining: the old defect, found by the invariant
    joining = next(r for r in results if r.mutant.change == "timer session no longer runs in joining")
    assert joining.found and "lease_while_owning" in joining.by


def test_check_specs_explore_on_a_users_file_prints_the_trace_and_draws_it(tmp_path, capsys):
    assert main(["check-specs", "--explore", "--draw", str(tmp_path), str(BEFORE_LEASE)]) == 1
    out = capsys.readouterr().out
    assert "lease_while_owning" in out and "--join_requested (event)--> joining" in out
    drawn = (tmp_path / "membership.invariant.lease_while_owning.dot").read_text()
    assert "color=red" in drawn and "1. join_requested" in drawn


def test_check_specs_explore_passes_on_the_shipped_specs(capsys):
    assert main(["check-specs", "--explore"]) == 0
    out = capsys.readouterr().out
    assert out.count("every property holds") == len(all_spec_paths()) + len(shipped_compositions())


TIMED = """\
machine: m
initial: a
terminal: [done]
durations:
  backoff: {default: 100, config: retry_backoff_ms}
  session: {default: 45000, config: session_timeout_ms}
  pause: {default: 500}
states:
  a: {timeout: {after: backoff, trigger: again}}
  done: {}
transitions:
  - {trigger: again, source: a, dest: a}
  - {trigger: stop, source: a, dest: done}
relations:
  backoff_within_session:
    below: [backoff, session]
"""


def test_a_relation_the_defaults_break_is_reported_with_its_line():
    result = explore(spec(TIMED.replace("default: 100, config", "default: 50000, config")))
    (f,) = result.timing
    assert f.name == "backoff_within_session" and "the defaults break it" in f.message and f.line > 0
    assert not result.ok and "relation backoff_within_session" in result.report()


def test_a_relation_checked_against_the_config_validator():
    from fsm_consumer._config import ConsumerConfig

    def consumer(config):
        return ConsumerConfig.from_kwargs(**config)

    assert explore(spec(TIMED), consumer).ok  # retry_backoff_ms >= session_timeout_ms: refused, both named

    def lax(config):  # a validator without that rule accepts the breaking configuration: reported
        return None

    first, second = explore(spec(TIMED), lax).timing  # both edges of it: the backoff raised, the session cut
    assert "accepts {'retry_backoff_ms': 45000}" in first.message and "session_timeout_ms" in first.message
    assert "accepts {'session_timeout_ms': 100}" in second.message

    def vague(config):
        raise ValueError("no")

    faults = explore(spec(TIMED), vague).timing
    assert faults and all("does not name" in f.message for f in faults)


def test_a_relation_over_one_key_and_a_constant_or_the_same_key():
    same = TIMED.replace(
        "session: {default: 45000, config: session_timeout_ms}", "session: {default: 200, config: retry_backoff_ms}"
    )
    (f,) = explore(spec(same), lambda c: None).timing
    assert "one can never be below the other" in f.message
    at_most = same.replace("below: [backoff, session]", "at_most: [backoff, session]")
    assert explore(spec(at_most), lambda c: None).ok
    constant = TIMED.replace("below: [backoff, session]", "below: [pause, session]")
    (f,) = explore(spec(constant), lambda c: None).timing  # session_timeout_ms=500 accepted by a lax validator
    assert "{'session_timeout_ms': 500}" in f.message


def test_a_relation_naming_an_unknown_duration_is_refused():
    with pytest.raises(SpecError, match="relation 'backoff_within_session': 'lease' names no declared duration"):
        spec(TIMED.replace("below: [backoff, session]", "below: [backoff, lease]"))
