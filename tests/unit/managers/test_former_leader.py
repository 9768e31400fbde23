"""A group whose leader is this member's former id (the spec's leader_is_former_self): Tansu keeps as leader a
member that left while the group rebalanced, so nobody assigns and the group never settles; the member that
gave that id up takes it back (and leaves the id just given), so it leads and the group settles."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from kafka.protocol.consumer import JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the helpers beside this file
from test_membership_rounds import _assigned, answer, make, polled  # noqa: E402


def _join_answer(join, clock, *, member_id, leader, generation=5, members=()):
    answer(
        join,
        clock,
        error_code=0,
        member_id=member_id,
        generation_id=generation,
        protocol_name="cooperative-sticky",
        leader=leader,
        members=list(members),
    )


def test_a_dropped_membership_remembers_the_id_it_gave_up():
    manager, clock = make(0)
    manager.member_id = "me-1"
    manager.drop_membership()
    assert manager.member_id == "" and manager.former_member_id == "me-1"


def test_the_leader_named_is_this_members_former_id_so_it_joins_again_under_it(caplog):
    from fsm_consumer.assignors import Subscription, encode_subscription

    caplog.set_level(logging.WARNING, "fsm_consumer.membership")
    manager, clock = make(0)
    manager.former_member_id = "me-1"  # given up when it went stale (its LeaveGroup went out)
    manager.on_subscription_changed(clock.now_ms())
    (join,) = [o for o in polled(manager, clock)[1] if isinstance(o.request, JoinGroupRequest)]
    visit = manager.machine.visit
    _join_answer(join, clock, member_id="me-2", leader="me-1")

    assert manager.machine.state == "joining" and manager.machine.visit == visit + 1  # not joined: again
    assert manager.member_id == "me-1" and manager.former_member_id is None
    assert any("former id me-1" in r.getMessage() and "leaving me-2" in r.getMessage() for r in caplog.records)
    out = polled(manager, clock)[1]
    (leave,) = [o for o in out if isinstance(o.request, LeaveGroupRequest)]
    assert leave.request.member_id == "me-2"  # the stand-in id, left so that nobody waits on it
    (again,) = [o for o in out if isinstance(o.request, JoinGroupRequest)]
    assert again.request.member_id == "me-1"

    # the coordinator now names it the leader, with the members to assign to: the round completes
    me = type("M", (), {"member_id": "me-1", "group_instance_id": None})()
    me.metadata = encode_subscription(Subscription(topics=("t",)))
    _join_answer(again, clock, member_id="me-1", leader="me-1", generation=6, members=[me])
    assert manager.machine.state == "syncing" and manager.leader_id == manager.member_id == "me-1"
    (sync,) = [o for o in polled(manager, clock)[1] if isinstance(o.request, SyncGroupRequest)]
    assert len(_assigned(sync)) == 2


def test_a_leader_that_is_someone_else_is_followed():
    manager, clock = make(0)
    manager.former_member_id = "me-1"
    manager.on_subscription_changed(clock.now_ms())
    (join,) = [o for o in polled(manager, clock)[1] if isinstance(o.request, JoinGroupRequest)]
    _join_answer(join, clock, member_id="me-2", leader="other")
    assert manager.machine.state == "syncing" and manager.member_id == "me-2"
    assert not any(isinstance(o.request, LeaveGroupRequest) for o in polled(manager, clock)[1])
