"""The compiled machine: triggers, conditions, queueing, deadline timeouts, the transition log."""

import logging

import pytest
from transitions import Machine

from fsm_consumer.machines import (
    FakeClock,
    IllegalTransition,
    SpecError,
    SpecMachine,
    add_observer,
    parse_spec,
    remove_observer,
)

SPEC = parse_spec(
    """\
machine: door
initial: closed
terminal: [gone]
durations:
  hold: {default: 100, config: hold_ms}
  nag: {default: 30}
  cool: {default: 10, computed_by: cool_ms}
states:
  closed: {on_exit: [left_closed]}
  open:
    on_enter: [opened]
    timeouts:
      - {after: hold, trigger: auto_close}
      - {after: nag, trigger: beep}
  cooling:
    timeout: {after: cool, trigger: cooled}
  gone: {}
transitions:
  - {trigger: push, source: closed, dest: open, conditions: unlocked, before: [before_push], after: [after_push]}
  - {trigger: push, source: closed, dest: closed, unless: unlocked}
  - {trigger: auto_close, source: open, dest: cooling}
  - {trigger: beep, source: open, dest: "=", unless: quiet}
  - {trigger: slam, source: open, dest: cooling, after: [chain]}
  - {trigger: cooled, source: cooling, dest: closed}
  - {trigger: chained, source: cooling, dest: closed}
  - {trigger: vanish, source: "*", dest: gone}
""",
    "door.yaml",
)


class DoorModel:
    """The model: action hooks record calls, condition hooks read flags."""

    def __init__(self):
        self.calls = []
        self.flag_unlocked = True
        self.flag_quiet = False
        self.cool = 10
        self.machine = None

    def left_closed(self):
        self.calls.append("left_closed")

    def opened(self):
        self.calls.append("opened")

    def before_push(self):
        self.calls.append("before_push")

    def after_push(self):
        self.calls.append("after_push")

    def unlocked(self):
        return self.flag_unlocked

    def quiet(self):
        return self.flag_quiet

    def chain(self):
        self.calls.append(("chain_sees", self.machine.state))
        self.machine.fire("chained")  # queued: runs after this transition completes
        self.calls.append(("chain_after_fire", self.machine.state))

    def cool_ms(self, configured):
        self.calls.append(("cool_ms", configured))
        return self.cool


def make(clock=None, **kw):
    door = DoorModel()
    clock = clock or FakeClock()
    m = SpecMachine(SPEC, door, clock=clock, **kw)
    door.machine = m
    return door, m, clock


def test_compiles_to_a_transitions_machine():
    _, m, _ = make()
    assert isinstance(m._machine, Machine)
    assert m._machine.has_queue and not m._machine.auto_transitions and not m._machine.ignore_invalid_triggers
    assert m.state == "closed"


def test_hooks_run_in_order():
    door, m, _ = make()
    assert m.fire("push") is True
    assert m.state == "open"
    assert door.calls == ["before_push", "left_closed", "opened", "after_push"]


def test_condition_selects_transition():
    door, m, _ = make()
    door.flag_unlocked = False
    assert m.fire("push") is True  # the unless-branch: closed -> closed (re-entered)
    assert m.state == "closed"
    assert m.log[-1].dest == "closed" and m.log[-1].index == 1


def test_illegal_trigger_raises_and_keeps_state():
    _, m, _ = make()
    with pytest.raises(IllegalTransition) as info:
        m.fire("cooled")
    assert (info.value.machine, info.value.state, info.value.trigger) == ("door", "closed", "cooled")
    assert m.state == "closed" and len(m.log) == 0


def test_unknown_trigger_raises():
    _, m, _ = make()
    with pytest.raises(IllegalTransition, match="not declared"):
        m.fire("fly")
    assert m.state == "closed"


def test_may_and_legal_triggers():
    _, m, _ = make()
    assert m.may("push") and not m.may("cooled") and not m.may("fly")
    assert sorted(m.legal_triggers()) == ["push", "vanish"]


def test_trigger_from_hook_is_queued():
    door, m, _ = make()
    m.fire("push")
    m.fire("slam")
    assert ("chain_sees", "cooling") in door.calls
    assert ("chain_after_fire", "cooling") in door.calls  # not yet processed inside the hook
    assert m.state == "closed"
    assert [r.trigger for r in m.log][-2:] == ["slam", "chained"]


def test_timeout_fires_at_deadline_not_before():
    _, m, clock = make()
    clock.advance(5)
    m.fire("push")
    assert m.next_deadline == 5 + 30  # nag comes first
    clock.set(34)
    assert m.tick(clock.now_ms()) == 0 and m.state == "open"
    clock.set(35)
    assert m.tick(35) == 1  # beep re-enters open: timeouts re-armed from 35
    assert m.state == "open" and m.next_deadline == 65
    assert m.log[-1].trigger == "beep" and m.log[-1].time == 35


def test_timeouts_fire_in_deadline_order_and_once_per_visit():
    door, m, clock = make()
    door.flag_quiet = True  # beep's transition is refused: the state stays, the timeout is spent
    m.fire("push")
    clock.set(1000)
    fired = m.tick(1000)
    assert fired == 2  # beep (refused) then auto_close
    assert m.state == "cooling"
    assert [r.trigger for r in m.log] == ["push", "auto_close"]
    assert m.tick(1000) == 0


def test_deadline_of_an_earlier_visit_never_fires():
    _, m, clock = make()
    m.fire("push")  # arms beep at 30, auto_close at 100
    clock.set(10)
    m.fire("slam")  # leaves open: its deadlines are dropped
    assert m.state == "closed"  # slam -> cooling -> chained -> closed
    clock.set(20)
    m.fire("push")  # a new visit: deadlines 50 and 120
    clock.set(45)
    assert m.tick(45) == 0 and m.state == "open"
    assert m.next_deadline == 50


def test_config_and_override_durations():
    _, m, _ = make(config={"hold_ms": 7})
    assert m.durations["hold"] == 7
    _, m, _ = make(config={"hold_ms": 7}, durations={"hold": 3})
    assert m.durations["hold"] == 3

    class Cfg:
        hold_ms = 9

    _, m, _ = make(config=Cfg())
    assert m.durations["hold"] == 9


def test_bad_duration_value_names_it():
    with pytest.raises(SpecError, match="duration 'hold'.*hold_ms.*-1"):
        make(config={"hold_ms": -1})


def test_computed_duration_is_asked_on_every_entry():
    door, m, clock = make()
    door.cool = 42
    m.fire("push")
    m.fire("slam")  # enters cooling (computed 42), then chained leaves it
    assert ("cool_ms", 10.0) in door.calls
    m.fire("push")
    door.flag_quiet = True  # beep (due first) is refused, so auto_close is what fires
    clock.set(100)
    m.tick(100)  # auto_close -> cooling at 100
    assert m.state == "cooling" and m.next_deadline == 142


def test_computed_duration_must_be_a_number():
    door, m, _ = make()
    door.cool = "later"
    m.fire("push")
    with pytest.raises(SpecError, match="cool_ms returned 'later'"):
        m.fire("slam")


def test_wildcard_excludes_terminal_and_terminal_is_final():
    _, m, _ = make()
    m.fire("vanish")
    assert m.state == "gone" and m.is_terminal
    with pytest.raises(IllegalTransition):
        m.fire("vanish")


def test_log_is_bounded_and_logged_at_debug(caplog):
    door, m, clock = make(log_size=3)
    door.flag_unlocked = False
    with caplog.at_level(logging.DEBUG, logger="fsm_consumer.fsm"):
        for _ in range(5):
            m.fire("push")
    assert len(m.log) == 3
    assert all(r.machine == "door" and r.source == "closed" and r.dest == "closed" for r in m.log)
    assert sum("closed --push--> closed" in r.getMessage() for r in caplog.records) == 5


def test_observers_see_every_transition():
    seen = []
    add_observer(seen.append)
    try:
        _, m, _ = make(instance="front")
        m.fire("push")
    finally:
        remove_observer(seen.append)
    assert [(r.machine, r.instance, r.trigger, r.index) for r in seen] == [("door", "front", "push", 0)]


def test_hook_exception_propagates_and_clears_queue():
    door, m, _ = make()

    def boom():
        raise RuntimeError("hook failed")

    door.opened = boom  # rebinding after construction has no effect: hooks were bound once
    m.fire("push")
    assert m.state == "open"


def test_exception_in_bound_hook_reaches_caller():
    class Broken(DoorModel):
        def opened(self):
            raise RuntimeError("hook failed")

    door = Broken()
    m = SpecMachine(SPEC, door, clock=FakeClock())
    door.machine = m
    with pytest.raises(RuntimeError, match="hook failed"):
        m.fire("push")
    assert not m._machine._transition_queue
    m.fire("vanish")  # the machine is still usable
    assert m.state == "gone"


def test_machines_of_one_spec_share_its_compiled_graph_but_not_state_hooks_or_queue():
    """A spec is compiled once (a share consumer makes a machine per acquired batch); each machine keeps its own
    state, its model's hooks and its own queue: a hook of one machine firing another of the same spec runs that
    trigger at once (each queue is its machine's), and its own trigger stays queued."""
    a_door, a, _ = make()
    b_door, b, _ = make()
    assert a._events is b._events and a._machine is not b._machine
    assert a._machine._transition_queue is not b._machine._transition_queue
    b_door.flag_unlocked = False
    a.fire("push")
    b.fire("push")  # b's own condition (locked): closed re-entered, with b's hook only
    assert (a.state, b.state) == ("open", "closed")
    assert b_door.calls == ["left_closed"] and a_door.calls == ["before_push", "left_closed", "opened", "after_push"]

    def cross():  # a's hook fires b (not queued behind a's transition) and a itself (queued)
        b_door.flag_unlocked = True
        b.fire("push")
        a_door.calls.append(("b_during_a", b.state))
        a_door.machine.fire("chained")

    a_door.chain = cross
    a2 = SpecMachine(SPEC, a_door, clock=FakeClock())  # hooks are bound when a machine is made
    a_door.machine = a2
    a2.fire("push")
    a2.fire("slam")
    assert ("b_during_a", "open") in a_door.calls and b.state == "open"
    assert a2.state == "closed" and [r.trigger for r in a2.log][-2:] == ["slam", "chained"]


def test_a_spec_dropped_takes_its_compiled_form_with_it():
    import gc

    from fsm_consumer.machines import _machine

    spec = parse_spec(SPEC_TEXT_SMALL, "small.yaml")
    SpecMachine(spec, object())
    assert id(spec) in _machine._COMPILED
    key = id(spec)
    del spec
    gc.collect()
    assert key not in _machine._COMPILED


SPEC_TEXT_SMALL = """\
machine: tiny
initial: a
terminal: [b]
states:
  a: {}
  b: {}
transitions:
  - {trigger: go, source: a, dest: b}
"""
