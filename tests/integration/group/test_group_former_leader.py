"""A leader that goes stale while the group rebalances (its application stopped polling past
max_poll_interval_ms, so it leaves) and comes back: on Tansu the group kept it as its leader though it left,
so nobody could assign and the group never settled (all members waiting in SyncGroup for ever); the member
now takes its former id back when a JoinGroup answer names it leader (the spec's leader_is_former_self), leads,
and the group settles. On Apache Kafka a leader is always a current member: the path is never taken."""

from __future__ import annotations

import time
import uuid

import pytest
from group_harness import Member, describe, stop_all, wait_until

from fsm_consumer.history import check, load

pytestmark = pytest.mark.integration

SETTINGS = dict(
    session_timeout_ms=6000,  # Tansu holds each JoinGroup half of it: 3 s
    heartbeat_interval_ms=500,
    max_poll_interval_ms=4000,
    partition_assignment_strategy=["cooperative-sticky"],
    follower_sync_delay_ms=500,
)


@pytest.mark.timeout(240)
def test_a_leader_that_left_during_a_rebalance_leads_again_and_the_group_settles(broker, make_topic, produce, tmp_path):
    topic = make_topic(partitions=4)
    produced = produce(topic, 400)
    group = f"former-leader-{uuid.uuid4().hex[:8]}"
    members: list[Member] = []
    try:
        a = Member(broker.bootstrap_servers, group, topic, "A", history_path=str(tmp_path / "A.jsonl"), **SETTINGS)
        members.append(a)
        wait_until(lambda: a.owned() == {0, 1, 2, 3}, 60, "A, alone, owns every partition")
        b = Member(broker.bootstrap_servers, group, topic, "B", history_path=str(tmp_path / "B.jsonl"), **SETTINGS)
        members.append(b)
        wait_until(lambda: a.owned() and b.owned(), 90, "A and B share the partitions", lambda: describe(members))
        first_leader = a.consumer._group.membership.member_id
        a.paused_polling.set()  # A's application stops: its poll timer runs out 4 s on and it leaves the group
        time.sleep(3.0)
        # C joins: the group rebalances while A's poll timer runs out
        c = Member(broker.bootstrap_servers, group, topic, "C", history_path=str(tmp_path / "C.jsonl"), **SETTINGS)
        members.append(c)
        time.sleep(3.0)
        assert a.state in ("stale", "fenced", "joining") or "poll_timer_expired" in a.triggers(), describe(members)
        a.paused_polling.clear()  # back: on_partitions_lost, then it joins again with a new id
        wait_until(
            lambda: b.owned() and c.owned() and sorted(p for m in members for p in m.owned()) == [0, 1, 2, 3],
            120,
            "the group settles with every partition owned once",
            lambda: describe(members),
        )
        took_back = "leader_is_former_self" in a.triggers()
        if broker.kind == "tansu":  # the group's leader was A's former id; A took it back and led
            assert took_back, (first_leader, a.triggers())
        else:
            assert not took_back, a.triggers()
    finally:
        stop_all(members)
    # one owner at a time, nothing lost or skipped, commits only by owners: judged from the members' histories
    ends = {str(p): 1 + max(o for q, o in produced if q == p) for p in {q for q, _ in produced}}
    result = check(load(tmp_path), produced={topic: ends})
    assert result.ok, result.format()
