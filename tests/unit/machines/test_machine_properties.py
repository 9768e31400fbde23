"""Random trigger sequences and clock advances against each compiled machine.

Every step is a legal transition or IllegalTransition (state unchanged); the state is always one
of the spec's; no timeout fires before its deadline, nor twice in one visit of its state.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_consumer.machines import FakeClock, IllegalTransition, SpecMachine, shipped_spec
from fsm_consumer.machines.testing import SpecDouble

from .test_shipped_specs import MACHINES


class Recorder(SpecDouble):
    """Conditions answer from a hypothesis-drawn stream; computed durations are drawn too."""

    def __init__(self, spec, answers, durations):
        super().__init__(spec)
        self._answers = answers
        self._durations = durations
        for c in {c for t in spec.transitions for c in (*t.conditions, *t.unless)}:
            setattr(self, c, self._next_answer)
        for d in spec.durations.values():
            if d.computed_by:
                setattr(self, d.computed_by, self._next_duration)

    def _next_answer(self):
        return self._answers.pop() if self._answers else False

    def _next_duration(self, configured):
        return self._durations.pop() if self._durations else configured


def actions(spec):
    trig = st.sampled_from(list(spec.triggers) + ["not_a_trigger"]).map(lambda t: ("fire", t))
    adv = st.integers(min_value=0, max_value=400).map(lambda ms: ("advance", ms))
    return st.lists(st.one_of(trig, adv), max_size=60)


@pytest.mark.parametrize("name", MACHINES)
def test_random_walks(name):
    spec = shipped_spec(name)
    durations = {d: v.default for d, v in spec.durations.items()}
    # short durations so timeouts actually come due within a walk
    small = {d: (i * 37) % 300 + 1 for i, d in enumerate(sorted(durations))}

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        steps=actions(spec),
        answers=st.lists(st.booleans(), max_size=80),
        computed=st.lists(st.integers(min_value=0, max_value=500), max_size=20),
    )
    def walk(steps, answers, computed):
        clock = FakeClock(0)
        model = Recorder(spec, list(answers), list(computed))
        m = model.machine = SpecMachine(spec, model, clock=clock, durations=small)
        entered_at = clock.now_ms()  # the current visit began then
        fired_this_visit: set[str] = set()
        timeout_ms = {(s.name, t.trigger): t.after for s in spec.states.values() for t in s.timeouts}

        real_fire = m.fire
        ticking = [False]

        def fire(trigger):  # observe the timeout fires that tick() makes
            nonlocal entered_at, fired_this_visit
            if ticking[0]:
                key = (m.state, trigger)
                timer = any(t.trigger == trigger and m.state in t.states for t in spec.timers.values())
                assert key in timeout_ms or timer, f"tick fired {trigger} which is no timeout or timer of {m.state}"
                assert timer or trigger not in fired_this_visit, f"{trigger} fired twice in one visit of {m.state}"
                fired_this_visit.add(trigger)
                # a computed duration may differ from the configured one: check against the armed deadline
                assert clock.now_ms() >= entered_at, "timeout before the visit began"
            n = len(m.log)
            result = real_fire(trigger)
            if len(m.log) != n and not spec.transitions[m.log[-1].index].internal:  # internal: the visit goes on
                entered_at = m.log[-1].time
                fired_this_visit = set()
            return result

        m.fire = fire
        for kind, arg in steps:
            before = m.state
            if kind == "advance":
                clock.advance(arg)
                pending = list(m._pending)
                visit = m._visit
                ticking[0] = True
                try:
                    m.tick(clock.now_ms())
                finally:
                    ticking[0] = False
                for deadline, _, trig in pending:
                    # every deadline of the visit that was current when tick began and is not yet due stays unfired
                    if deadline > clock.now_ms() and m._visit == visit:
                        assert (deadline, trig) in {(p[0], p[2]) for p in m._pending}
            else:
                n = len(m.log)
                try:
                    m.fire(arg)
                except IllegalTransition as exc:
                    assert m.state == before and len(m.log) == n
                    assert exc.trigger == arg
                    assert not m.may(arg)
                else:
                    # taken, refused by a condition, or declared ignorable in this state by the spec
                    assert m.handles(arg) or m.state != before or len(m.log) > n
            assert m.state in spec.states
            for deadline, _, trig in m._pending:
                assert (m.state, trig) in timeout_ms
                assert deadline >= entered_at

    walk()


@pytest.mark.parametrize("name", MACHINES)
def test_timeouts_never_early(name):
    """Each timeout that fires does so at or after entered_at + its duration."""
    spec = shipped_spec(name)

    @settings(max_examples=100, deadline=None)
    @given(
        steps=actions(spec),
        seed_durations=st.lists(st.integers(1, 300), min_size=len(spec.durations), max_size=len(spec.durations)),
    )
    def walk(steps, seed_durations):
        clock = FakeClock(0)
        durs = dict(zip(sorted(spec.durations), seed_durations, strict=False))
        model = SpecDouble(spec)  # computed durations return the configured value
        m = SpecMachine(spec, model, clock=clock, durations=durs)
        model.machine = m
        timeout_ms = {(s.name, t.trigger): durs[t.after] for s in spec.states.values() for t in s.timeouts}
        entered = 0.0
        timers = {t.trigger: t for t in spec.timers.values()}
        started = {t.name: 0.0 for t in spec.timers.values() if spec.initial in t.states}  # timer -> armed at
        seen = 0

        def note_timers():  # a timer is armed when its states are entered from elsewhere
            nonlocal seen
            for rec in list(m.log)[seen:]:
                for t in spec.timers.values():
                    if rec.dest in t.states and rec.source not in t.states:
                        started[t.name] = rec.time
            seen = len(m.log)

        for kind, arg in steps:
            if kind == "advance":
                state = m.state
                n = len(m.log)
                clock.advance(arg)
                m.tick(clock.now_ms())
                if len(m.log) > n:
                    rec = m.log[n]
                    assert rec.source == state
                    if (state, rec.trigger) in timeout_ms:
                        assert rec.time >= entered + timeout_ms[(state, rec.trigger)]
                    else:  # a timer (no restart_timer in this walk): due from when its states were entered
                        timer = timers[rec.trigger]
                        assert state in timer.states
                        assert rec.time >= started[timer.name] + durs[timer.after]
            else:
                try:
                    m.fire(arg)
                except IllegalTransition:
                    pass
            note_timers()
            if m.log and not spec.transitions[m.log[-1].index].internal:  # an internal one: the visit goes on
                entered = m.log[-1].time

    walk()
