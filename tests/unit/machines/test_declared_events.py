"""The triggers models fire whatever the state (io_error, close, crash) are declared events of their
specs: handled in every state they can arrive in, by a transition or an ignore entry with its reason.
The ignored states are exactly those the models used to skip with ``machine.may(...)``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fsm_consumer.engine._lifecycle import BackgroundLifecycle
from fsm_consumer.engine._network_thread import NetworkThread
from fsm_consumer.engine._processor import ApplicationEventProcessor
from fsm_consumer.errors import BackgroundThreadError
from fsm_consumer.events import CloseEvent, ErrorEvent
from fsm_consumer.machines import FakeClock, SpecError, SpecMachine, load_spec, shipped_spec, specs_dir
from fsm_consumer.machines.testing import SpecDouble, cover_plan

# machine, trigger, the states where it is a declared no-op
DECLARED = [
    ("connection", "io_error", {"disconnected", "backoff", "closed"}),
    ("background", "close", {"closing", "closed", "failed"}),
    ("background", "crash", {"closed", "failed"}),
]


def routes(spec):
    """state -> the steps of cover_plan that end in it (the initial state: no steps)."""
    out = {spec.initial: []}
    for index, steps in sorted(cover_plan(spec).items(), key=lambda kv: len(kv[1])):
        t = spec.transitions[index]
        for source in t.sources:
            out.setdefault(t.dest_from(source), steps)
    return out


def reach(spec, state):
    double = SpecDouble(spec)
    m = SpecMachine(spec, double, clock=FakeClock(1000))
    double.machine = m
    for trigger, flags in routes(spec)[state]:
        double.flags.clear()
        double.flags.update(flags)
        if trigger in {to.trigger for to in spec.states[m.state].timeouts}:
            m.tick(m.next_deadline)
        else:
            m.fire(trigger)
    assert m.state == state
    return double, m


@pytest.mark.parametrize("name, trigger, ignored", DECLARED)
def test_declared_everywhere_and_ignored_exactly_where_it_has_no_transition(name, trigger, ignored):
    spec = shipped_spec(name)
    assert set(spec.events[trigger].arrives_in) == set(spec.states)
    assert spec.ignored()[trigger] == ignored
    legal = {s for t in spec.transitions if t.trigger == trigger for s in t.sources}
    assert legal | ignored == set(spec.states) and not legal & ignored
    assert all(ig.description for ig in spec.ignores if ig.trigger == trigger)


@pytest.mark.parametrize("name, trigger, ignored", DECLARED)
def test_firing_it_in_every_state_never_raises(name, trigger, ignored):
    spec = shipped_spec(name)
    for state in spec.states:
        double, m = reach(spec, state)
        calls, log = list(double.calls), len(m.log)
        taken = m.fire(trigger)
        if state in ignored:
            assert taken is False and m.state == state and len(m.log) == log and double.calls == calls
        else:
            assert taken is True and m.log[-1].trigger == trigger


def test_the_checker_names_the_state_an_ignore_entry_no_longer_covers(tmp_path):
    text = (specs_dir() / "connection.yaml").read_text()
    entry = "  - trigger: io_error\n    source: backoff\n"
    assert text.count(entry) == 1
    start = text.index(entry)
    end = text.index("  - trigger:", start + 1)
    path = tmp_path / "connection.yaml"
    path.write_text(text[:start] + text[end:])
    with pytest.raises(SpecError) as info:
        load_spec(path)
    line = text[: text.index("  io_error:\n    arrives_in:")].count("\n") + 1
    assert info.value.line == line
    assert f"connection.yaml:{line}: event 'io_error' can arrive in state 'backoff'" in str(info.value)


# -- the background machine's real model -----------------------------------------------------------


def background(clock):
    lifecycle = BackgroundLifecycle()
    machine = SpecMachine(shipped_spec("background"), lifecycle, clock=clock)
    lifecycle.machine = machine
    processor = ApplicationEventProcessor(
        metadata=None, offsets=None, lifecycle=lifecycle, machine=machine, subscription=None
    )
    return lifecycle, machine, processor


def test_a_close_while_closing_completes_at_once_and_the_first_goes_on():
    clock = FakeClock(1000)
    lifecycle, machine, processor = background(clock)
    machine.fire("start")
    lifecycle.closers.append(SimpleNamespace(begin_close=lambda autocommit: None, close_done=False))
    first, second = CloseEvent(deadline_ms=5000), CloseEvent(deadline_ms=5000)
    processor.process(first, clock.now_ms())
    assert machine.state == "closing" and not first.future.done
    processor.process(second, clock.now_ms())
    assert machine.state == "closing" and second.future.done and not first.future.done
    clock.advance(4000)
    machine.tick(clock.now_ms())  # the close budget runs out
    third = CloseEvent(deadline_ms=9000)
    processor.process(third, clock.now_ms())
    assert machine.state == "closed" and third.future.done


class _Queue:
    def __init__(self, events=()):
        self.events, self.closed_with, self.put_ = list(events), None, []

    def drain(self):
        out, self.events = self.events, []
        return out

    def close(self, error):
        self.closed_with = error

    def put(self, event):
        self.put_.append(event)


class _Exploding:
    """Raises from its third tick: a pass ticks the machines before its events (timers due after a
    stall come first), again as of the time the events were drained, and after them; the third is the
    one after the close was handled."""

    next_deadline = None
    timers_running = False
    ticks = 0

    def tick(self, now):
        self.ticks += 1
        if self.ticks > 2:
            raise RuntimeError("boom")


def test_a_crash_in_the_pass_that_closed_the_loop_is_reported_and_the_machine_stays_closed():
    clock = FakeClock(1000)
    lifecycle, machine, processor = background(clock)
    close = CloseEvent(deadline_ms=clock.now_ms())  # no budget left: close_timed_out in this pass's tick
    app, bg = _Queue([close]), _Queue()
    transport = SimpleNamespace(closed=False)
    transport.close = lambda: setattr(transport, "closed", True)
    thread = NetworkThread(
        name="t",
        clock=clock,
        transport=transport,
        managers=[],
        processor=processor,
        machine=machine,
        lifecycle=lifecycle,
        app_queue=app,
        background_queue=bg,
        metadata=SimpleNamespace(brokers={}, version=0),
        metrics=SimpleNamespace(loop_iterations=0),
        extra_machines=[_Exploding()],
    )
    thread._run()  # on this thread: the background machine closes, then the next machine's tick raises
    assert machine.state == "closed" and [r.trigger for r in machine.log][-1] == "close_timed_out"
    assert isinstance(lifecycle.failure, BackgroundThreadError) and "boom" in str(lifecycle.failure)
    assert [type(e) for e in bg.put_] == [ErrorEvent] and app.closed_with is lifecycle.failure
    assert transport.closed and close.future.done
