"""A commit asked for right after a freeze (issue 23): one pass of the background loop sees the session
that ran out while the process was stopped before it judges the commit by the membership's state, so
the commit is refused instead of passing as "stable" and going out under generation -1 (application events used to be
handled before the timers in a pass)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fsm_consumer._metrics import Metrics
from fsm_consumer.engine._network_thread import NetworkThread
from fsm_consumer.errors import RebalanceInProgressError
from fsm_consumer.events import CommitEvent
from fsm_consumer.fetch import OffsetAndMetadata
from fsm_consumer.managers import CommitManager
from fsm_consumer.state import HeldErrors

from .test_membership_rounds import T0, T1, join_round, make


class _Queue:
    def __init__(self, events=()):
        self.events = list(events)

    def drain(self):
        out, self.events = self.events, []
        return out


class _Transport:
    auth_failure = None

    def __init__(self):
        self.sent = []
        self.waits = []

    def update_brokers(self, brokers):
        pass

    def send(self, request, node, **kw):
        self.sent.append(request)

    def poll(self, wait):
        self.waits.append(wait)
        return []


def commit_manager(membership) -> CommitManager:
    """The member's commit manager, wired to it as the consumer wires it."""
    commits = CommitManager(
        membership._config,
        subscription=membership._subs,
        coordinator=membership._coordinator,
        background_events=SimpleNamespace(put=lambda e: None),
        metrics=Metrics(),
        held=HeldErrors(),
    )
    commits.membership = membership
    return commits


def test_a_commit_asked_right_after_a_freeze_is_refused_not_sent():
    membership, clock = make(0)
    membership.on_subscription_changed(clock.now_ms())
    join_round(membership, clock, 1, [T0, T1], 0)
    assert membership.machine.state == "stable"
    commits = commit_manager(membership)

    clock.advance(2 * 3000)  # frozen past its session (3000 ms) with no heartbeat
    event = CommitEvent(offsets={T0: OffsetAndMetadata(5, "", -1)}, sync=True, deadline_ms=clock.now_ms() + 60_000)
    processor = SimpleNamespace(process=lambda ev, now: commits.on_commit_event(ev, now))
    transport = _Transport()
    background = SimpleNamespace(
        state="running", next_deadline=None, timers_running=False, tick=lambda now: 0, fire=lambda t: None
    )
    thread = NetworkThread(
        name="t",
        clock=clock,
        transport=transport,
        managers=[commits],
        processor=processor,
        machine=background,
        lifecycle=SimpleNamespace(stopped=False, closers_done=False),
        app_queue=_Queue([event]),
        background_queue=None,
        metadata=SimpleNamespace(brokers={}, version=0),
        metrics=SimpleNamespace(loop_iterations=0),
        extra_machines=[membership.machine],
    )
    thread.run_once()
    assert membership.session_expiries == 1
    assert not [r for r in transport.sent if type(r).__name__ == "OffsetCommitRequest"]
    # the partitions were lost and the member rejoins at once (no listener to wait for): refused as the
    # Java client refuses a commit while a rebalance is in progress
    with pytest.raises(RebalanceInProgressError, match="rejoining"):
        event.future.result()


def test_while_a_lease_runs_the_loop_never_waits_long_enough_to_hide_a_freeze():
    """A freeze inside a 5 s wait would look like an answer that came late in it: while the membership's
    lease runs, a pass waits at most _STALL_MS, so any longer freeze is seen as a stall."""
    from fsm_consumer.engine._network_thread import _STALL_MS

    membership, clock = make(0)
    membership.on_subscription_changed(clock.now_ms())
    join_round(membership, clock, 1, [T0, T1], 0)
    transport = _Transport()
    background = SimpleNamespace(
        state="running", next_deadline=None, timers_running=False, tick=lambda now: 0, fire=lambda t: None
    )
    thread = NetworkThread(
        name="t",
        clock=clock,
        transport=transport,
        managers=[],
        processor=None,
        machine=background,
        lifecycle=SimpleNamespace(stopped=False, closers_done=False),
        app_queue=_Queue(),
        background_queue=None,
        metadata=SimpleNamespace(brokers={}, version=0),
        metrics=SimpleNamespace(loop_iterations=0),
        extra_machines=[membership.machine],
    )
    assert membership.machine.timers_running
    thread.run_once()
    assert transport.waits == [_STALL_MS]


def test_a_commit_line_is_stamped_when_its_answer_was_read_not_when_it_was_written(tmp_path):
    """A freeze between reading a commit's answer and writing its history line (found in a freeze-rotate
    long run on Kafka): the line said the commit went out after the freeze, 6 s after the broker had taken
    it, and the checker blamed a commit that was the owner's. The line carries the answer's time."""
    import json

    from fsm_consumer._history_writer import HistoryWriter

    membership, clock = make(0)
    membership.on_subscription_changed(clock.now_ms())
    join_round(membership, clock, 1, [T0, T1], 0)
    membership.history_file = HistoryWriter(tmp_path / "h.jsonl", "c")
    commits = commit_manager(membership)
    event = CommitEvent(offsets={T0: OffsetAndMetadata(5, "", -1)}, sync=True, deadline_ms=clock.now_ms() + 60_000)
    commits.on_commit_event(event, clock.now_ms())
    sent_at = clock.now_ms()
    _, out = commits.poll(sent_at)
    [commit] = [o for o in out if type(o.request).__name__ == "OffsetCommitRequest"]
    answered_at = clock.advance(20)
    partition = SimpleNamespace(partition_index=T0.partition, error_code=0)
    answer = SimpleNamespace(
        error=None, response=SimpleNamespace(topics=[SimpleNamespace(name=T0.topic, partitions=[partition])])
    )
    commit.handler(answer, answered_at)  # the writer's own clock (time.monotonic) is hours past this FakeClock
    membership.history_file.close()
    [line] = [json.loads(x) for x in (tmp_path / "h.jsonl").read_text().splitlines() if '"commit"' in x]
    assert line["t"] == answered_at and line["t"] - line["sent_ago_ms"] == sent_at
    assert line["error"] is None and line["offsets"] == [["t", 0, 5]]
    assert event.future.result() is None
