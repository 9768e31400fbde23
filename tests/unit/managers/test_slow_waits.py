"""No silent waits (issue 49): a JoinGroup or SyncGroup the coordinator holds for seconds is said in the log,
with what the member waits for and why a broker holds it; once after 5 s, then every 30 s, never for a
quick answer, and the background loop is told to wake for the notice."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from kafka.protocol.consumer import JoinGroupRequest, SyncGroupRequest

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the helpers beside this file
from test_membership_rounds import answer_join, make, polled, sent  # noqa: E402

LOGGER = "fsm_consumer.membership"


def _notices(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_a_held_join_group_is_said_once_after_five_seconds_then_every_thirty(caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    manager, clock = make(0, session_timeout_ms=45000, heartbeat_interval_ms=3000)
    manager.on_subscription_changed(clock.now_ms())
    sent(manager, clock, JoinGroupRequest)
    wait, _ = polled(manager, clock)
    assert wait <= 5000  # the loop wakes for the notice, however long the other deadlines
    clock.advance(4999)
    polled(manager, clock)
    assert _notices(caplog) == []  # a join answered within Kafka's 3 s delay and then some: quiet
    clock.advance(1)
    polled(manager, clock)
    (first,) = _notices(caplog)
    assert "waiting 5 s for the coordinator at 127.0.0.1:9092 to answer JoinGroup" in first
    assert "group.initial.rebalance.delay.ms" in first and "22.5 s here" in first
    clock.advance(10_000)
    polled(manager, clock)
    assert len(_notices(caplog)) == 1  # not again within 30 s
    clock.advance(20_000)
    polled(manager, clock)
    assert _notices(caplog)[1:] == ["group g: still waiting for the coordinator to answer JoinGroup (35 s)"]


def test_a_quick_round_says_nothing_and_a_held_sync_group_names_the_leader(caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    manager, clock = make(0, session_timeout_ms=45000, heartbeat_interval_ms=3000)
    manager.on_subscription_changed(clock.now_ms())
    join = sent(manager, clock, JoinGroupRequest)
    clock.advance(3000)
    answer_join(join, clock, 1)  # answered after 3 s: no notice, and none later for it
    sent(manager, clock, SyncGroupRequest)
    clock.advance(3000)
    polled(manager, clock)
    assert _notices(caplog) == []
    clock.advance(2500)
    polled(manager, clock)
    (notice,) = _notices(caplog)
    assert "waiting 6 s for the coordinator at 127.0.0.1:9092 to answer SyncGroup" in notice
    assert "the leader (other)" in notice and "without close()" in notice


def test_a_member_that_stops_joining_says_nothing_more(caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    manager, clock = make(0, session_timeout_ms=45000, heartbeat_interval_ms=3000)
    manager.on_subscription_changed(clock.now_ms())
    sent(manager, clock, JoinGroupRequest)
    manager.on_unsubscribe(clock.now_ms())  # leaves while its JoinGroup is still held
    clock.advance(60_000)
    polled(manager, clock)
    assert _notices(caplog) == []
