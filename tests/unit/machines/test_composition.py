"""Compositions (specs/compositions/): the machines of one consumer explored together under the links code makes
between them, and the same links checked as a consumer runs (Linker). Each property is shown to catch its break:
a link dropped, a guard dropped, a state no longer left at once, a link firing what its target refuses."""

import textwrap

import attrs
import pytest

from fsm_consumer.cli import main
from fsm_consumer.machines import (
    Linker,
    SpecError,
    SpecMachine,
    _composition,
    load_composition,
    parse_spec,
    shipped_composition,
    shipped_compositions,
    shipped_spec,
)
from fsm_consumer.machines._composition import parse_composition
from fsm_consumer.machines._mutants import COMPOSITION_KINDS, run_composition_mutants
from fsm_consumer.machines._product import explore_composition
from fsm_consumer.machines.testing import SpecDouble


@pytest.fixture(autouse=True)
def _breaks_made_here_on_purpose():
    """The links these tests break on purpose are not the suite's failures (the plugin fails on any other)."""
    before = len(_composition._broken)
    yield
    del _composition._broken[before:]


@pytest.mark.parametrize("path", shipped_compositions(), ids=lambda p: p.stem)
def test_every_shipped_composition_holds_every_property(path):
    result = explore_composition(load_composition(path))
    assert result.ok, result.report()
    assert result.nodes > 100 and result.edges > result.nodes
    assert "every property holds" in result.summary() and f"{result.nodes} nodes" in result.summary()


def test_the_shipped_compositions_cover_the_consumers():
    names = {p.stem for p in shipped_compositions()}
    assert names == {"consumer", "classic_consumer", "share_consumer"}
    share = shipped_composition("share_consumer")
    assert share.role("session").copies == 2  # alike copies: two stand for any number (symmetry)


def _drop(composition, name):
    return attrs.evolve(composition, links=tuple(k for k in composition.links if k.name != name))


@pytest.mark.parametrize("name", ["consumer", "classic_consumer", "share_consumer"])
def test_closing_without_asking_the_member_to_leave_never_finishes_on_its_own(name):
    result = explore_composition(_drop(shipped_composition(name), "close_leaves"))
    found = {(v.prop, v.name) for v in result.violations}
    assert ("finish", "close_finishes_on_its_own") in found, result.report()
    v = next(v for v in result.violations if v.name == "close_finishes_on_its_own")
    assert v.path[-1].dest[0][0].state == "closing"  # the shortest path to a closing that cannot finish
    assert "close (event)" in result.report()


def test_leaving_without_closing_the_share_sessions_breaks_the_invariant_with_its_trace():
    result = explore_composition(_drop(shipped_composition("share_consumer"), "leaving_closes_sessions"))
    (v,) = result.violations
    assert (v.prop, v.name) == ("invariant", "out_of_the_group_while_closing_means_no_session_fetches")
    trace = v.trace(result.initial, ["background", "member", "session"])
    assert "--close (event)--> closing" in trace and "leave_requested (link close_leaves" in trace


def test_a_member_that_rejoins_while_closing_is_found_when_the_guard_is_dropped():
    c = shipped_composition("consumer")
    result = explore_composition(attrs.evolve(c, guards=()))
    (v,) = result.violations
    assert v.name == "close_finishes_on_its_own"
    assert any("wants_membership=true" in m.said for m in v.path)  # the leave answered, joining again


def test_a_share_member_left_in_fenced_when_at_once_is_dropped_never_finishes_closing():
    results = run_composition_mutants(next(p for p in shipped_compositions() if p.stem == "share_consumer"))
    at_once = [r for r in results if r.mutant.kind == "drop_at_once"]
    assert at_once and all(r.found for r in at_once), at_once
    assert {r.mutant.kind for r in results if r.found} == set(COMPOSITION_KINDS)


def test_a_link_that_fires_what_its_target_refuses_is_reported():
    text = """\
    composition: c
    machines:
      background: {spec: background}
      member: {spec: share_membership}
    links:
      - name: bad
        when: {machine: background, enters: [closing]}
        fire: {machine: member, trigger: sessions_closed}
    """
    result = explore_composition(parse_composition(textwrap.dedent(text), "c.yaml"))
    v = next(v for v in result.violations if v.prop == "link")
    assert v.name == "bad" and "IllegalTransition" in v.message and v.line == 6


A = "machines:\n  a: {spec: background}\n"
L = A + "links:\n  - name: x\n"


@pytest.mark.parametrize(
    "body, fault",
    [
        ("machines:\n  a: {spec: nope}\n", "spec 'nope'"),
        (A + "links:\n  - name: x\n    fire: {machine: b, trigger: close}\n", "unknown machine 'b'"),
        (L + "    fire: {machine: a, trigger: nope}\n    only_when: {a: [closing]}\n", "no trigger"),
        (L + "    fire: {machine: a, trigger: close}\n    only_when: {a: [nope]}\n", "no state 'nope'"),
        ("machines:\n  a: {spec: background, copies: 9}\n", "copies: 1 to 3"),
        (A + "extra: 1\n", "unknown key 'extra'"),
    ],
)  # fmt: skip
def test_a_malformed_composition_names_file_line_and_fault(body, fault):
    with pytest.raises(SpecError) as info:
        parse_composition("composition: c\n" + body, "c.yaml")
    assert fault in str(info.value) and str(info.value).startswith("c.yaml:")


# -- the links checked as the machines run ------------------------------------------------------------------
def _machines(member_spec: str = "consumer_membership"):
    background = SpecMachine(shipped_spec("background"), SpecDouble(shipped_spec("background")))
    model = SpecDouble(shipped_spec(member_spec))
    member = model.machine = SpecMachine(shipped_spec(member_spec), model)
    gone = [False]
    linker = Linker(
        shipped_composition("consumer"),
        {"background": lambda: [background], "member": lambda: [member], "connection": lambda: []},
        {"coordinator_gone": lambda: gone[0]},
    )
    linker.attach("background", background)
    linker.attach("member", member)
    return background, member, model, linker, gone


def test_the_linker_accepts_a_close_that_asks_the_member_to_leave():
    background, member, _, linker, _ = _machines()
    background.fire("start")
    member.fire("join_requested")
    background.fire("close")
    member.fire("leave_requested")  # what the closer does within the same pass
    linker.check()


def test_the_linker_reports_a_close_that_did_not_ask_the_member_to_leave():
    background, member, _, linker, _ = _machines()
    background.fire("start")
    member.fire("join_requested")
    background.fire("close")
    with pytest.raises(SpecError, match="link 'close_leaves' broken: background entered"):
        linker.check()


def test_the_linker_reports_a_close_completed_while_the_member_is_still_in_the_group():
    background, member, _, linker, gone = _machines()
    background.fire("start")
    member.fire("join_requested")
    background.fire("close")
    member.fire("leave_requested")
    with pytest.raises(SpecError, match="close_completes_once_out"):
        background.fire("close_completed")  # the member is leaving, not out
    gone[0] = True  # the coordinator is gone: nobody to leave, the close completes
    background.fire("close_completed")
    assert background.state == "closed"


def test_the_linker_reports_a_rejoin_after_close():
    background, member, model, linker, _ = _machines()
    background.fire("start")
    member.fire("join_requested")
    background.fire("close")
    member.fire("leave_requested")
    linker.check()
    assert member.state == "leaving"
    model.flags["wants_membership"] = True  # a leave answered as if the subscription were still wanted
    with pytest.raises(SpecError, match="guard broken: member took leaving --left--> joining"):
        member.fire("left")


def test_the_linker_reports_a_join_or_an_unsubscribe_once_closing():
    background, member, _, linker, _ = _machines()
    background.fire("start")
    background.fire("close")  # nothing to leave: unsubscribed ignores leave_requested
    with pytest.raises(SpecError, match="no_join_once_closing"):
        member.fire("join_requested")


AT_ONCE = """\
machine: m
initial: idle
terminal: [done]
states:
  idle: {}
  bounce: {on_enter: [back], at_once: again}
  done: {}
transitions:
  - {trigger: go, source: idle, dest: bounce}
  - {trigger: again, source: bounce, dest: idle}
  - {trigger: stop, source: "*", dest: done}
"""


class _Bouncer:
    def __init__(self, fires: bool) -> None:
        self.fires, self.machine = fires, None

    def back(self) -> None:
        if self.fires:
            self.machine.fire("again")


@pytest.mark.parametrize("fires", [True, False])
def test_a_state_declared_at_once_is_left_by_its_hooks_or_the_machine_says_so(fires):
    spec = parse_spec(AT_ONCE, "m.yaml", expected_name="m", validate_always=True)
    model = _Bouncer(fires)
    model.machine = machine = SpecMachine(spec, model)
    if fires:
        machine.fire("go")
        assert machine.state == "idle"
    else:
        with pytest.raises(SpecError, match="declares at_once 'again', but its hooks did not fire it"):
            machine.fire("go")


@pytest.mark.parametrize(
    "change, fault",
    [
        (("bounce: {on_enter: [back], at_once: again}", "bounce: {at_once: again}"), "needs an on_enter hook"),
        (("dest: idle}", "dest: idle, conditions: ok}"), "one unconditional"),
        (("bounce: {on_enter: [back], at_once: again}", "bounce: {on_enter: [back], at_once: stop}"), None),
    ],
)  # fmt: skip
def test_at_once_is_checked_when_the_spec_is_built(change, fault):
    text = AT_ONCE.replace(*change)
    if fault is None:  # stop from "*" is unconditional and leaves: a valid at_once
        parse_spec(text, "m.yaml", expected_name="m", validate_always=True)
        return
    with pytest.raises(SpecError, match=fault):
        parse_spec(text, "m.yaml", expected_name="m", validate_always=True)


def test_check_specs_explores_the_compositions(capsys):
    assert main(["check-specs", "--explore"]) == 0
    out = capsys.readouterr().out
    for name in ("consumer", "classic_consumer", "share_consumer"):
        assert f"composition {name} (" in out and "every property holds" in out


def test_check_specs_reports_a_compositions_mutants(capsys):
    path = next(p for p in shipped_compositions() if p.stem == "consumer")
    assert main(["check-specs", "--mutants", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mutants of 0 spec(s) and 1 composition(s)" in out
    assert "  drop_link: 3 of 5 found (60%)" in out and "  drop_guard: 1 of 1 found (100%)" in out


def test_check_specs_explores_a_users_composition_file(tmp_path, capsys):
    path = tmp_path / "mine.yaml"
    path.write_text((shipped_compositions()[1]).read_text().replace("composition: consumer", "composition: mine"))
    assert main(["check-specs", "--explore", str(path)]) == 0
    assert "composition mine (" in capsys.readouterr().out


def test_a_compositions_counterexample_is_drawn_on_each_machines_diagram(tmp_path, capsys):
    """A user's composition with a link missing: --draw writes each machine's diagram with its part in red."""
    source = next(p for p in shipped_compositions() if p.stem == "consumer").read_text()
    start = source.index("  - name: close_leaves")
    end = source.index("  - name: close_completes_once_out")
    path = tmp_path / "broken.yaml"
    path.write_text(source[:start] + source[end:])  # closing no longer asks the member to leave
    assert main(["check-specs", "--explore", "--draw", str(tmp_path / "drawn"), str(path)]) == 1
    out = capsys.readouterr().out
    assert "finish close_finishes_on_its_own" in out
    background = (tmp_path / "drawn" / "consumer.background.finish.close_finishes_on_its_own.dot").read_text()
    member = (tmp_path / "drawn" / "consumer.member.finish.close_finishes_on_its_own.dot").read_text()
    assert "red" in background and "close" in background  # its steps, down -> initialized -> closing, in red
    assert "red" in member  # where the member ends
