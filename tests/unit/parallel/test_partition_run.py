"""PartitionRun: the parallel spec's transitions, driven by hand with an owner that records effects."""

from __future__ import annotations

import random

import pytest

from fsm_consumer.fetch import TopicPartition
from fsm_consumer.parallel._partition import PartitionRun
from fsm_consumer.parallel._progress import PartitionProgress

TP = TopicPartition("t", 0)
# offset 0 and a random third of the rest wait: an irregular pattern zlib cannot fold
WAITING = {0} | set(random.Random(5).sample(range(1, 3000), 1000))
DONE = [o for o in range(3000) if o not in WAITING]


class Owner:
    def __init__(self, queued: int = 0) -> None:
        self.effects: list = []
        self.queued = queued

    def hold(self, tp, below=None):
        self.effects.append(("hold", below))

    def unhold(self, tp):
        self.effects.append(("unhold",))

    def drop_queued(self, tp):
        dropped, self.queued = self.queued, 0
        self.effects.append(("drop", dropped))
        return dropped

    def final_commit(self, tp, offset, metadata):
        self.effects.append(("commit", offset, metadata))


class Settings:
    revoke_timeout_ms = 1000


def run_with(received: int, done: list[int], owner: Owner, limit: int = 4096) -> PartitionRun:
    run = PartitionRun(TP, None, owner, Settings(), now=0.0, limit=limit)
    for o in range(received):
        assert run.receive(o)
    for o in done:
        run.complete(o)
    return run


def test_overflow_blocks_then_the_closing_gap_unblocks():
    owner = Owner()
    run = run_with(3000, DONE, owner, limit=512)
    run.check_size(now=1.0)
    assert run.state == "blocked"
    assert owner.effects == [("hold", run.progress.committable + 1)]  # only the lowest unfinished record may run
    for o in sorted(WAITING):
        run.complete(o)
    run.check_size(now=2.0)
    assert run.state == "active" and owner.effects[-1] == ("unhold",)
    assert run.to_commit() == (3000, "")


def test_a_revoked_partition_commits_once_drained():
    owner = Owner()
    run = run_with(5, [0, 1, 3], owner)
    run.machine.fire("revoke", 1.0)
    assert run.state == "draining" and run.out == 2
    run.complete(2)
    run.complete(4)
    run.machine.fire("drained", 2.0)
    assert run.state == "released" and not run.live
    assert owner.effects == [("commit", 5, "")]


def test_a_drain_that_runs_out_of_time_drops_the_queued_and_commits_what_is_done():
    owner = Owner(queued=1)
    run = run_with(4, [0, 2], owner)
    run.machine.fire("revoke", 0.0)
    assert run.machine.tick(999.0) == 0 and run.state == "draining"
    assert run.machine.tick(1000.0) == 1
    assert run.state == "released"
    assert owner.effects[0] == ("hold", None) and owner.effects[1] == ("drop", 1)
    assert owner.effects[2][:2] == ("commit", 1)
    assert PartitionProgress.restore(1, owner.effects[2][2]).receive(2) is False  # 2 travels in the metadata
    assert run.out == 1  # offset 1 (or 3) still runs: not this member's any more


@pytest.mark.parametrize("state", ["active", "blocked", "draining"])
def test_a_lost_partition_commits_nothing(state):
    owner = Owner(queued=2)
    run = run_with(3000, DONE, owner, limit=512)
    if state != "active":
        run.check_size(now=1.0)
    if state == "draining":
        run.machine.fire("revoke", 1.0)
    assert run.state == state
    run.machine.fire("lose", 2.0)
    assert run.state == "released"
    assert not [e for e in owner.effects if e[0] == "commit"]
    assert ("drop", 2) in owner.effects
    assert run.machine.fire("lose", 3.0) is False and run.machine.fire("revoke", 3.0) is False  # declared ignores


def test_a_restored_partition_skips_what_was_done_and_counts_it_out():
    owner = Owner()
    progress = PartitionProgress.restore(10, PartitionProgress(10).metadata())
    run = PartitionRun(TP, PartitionProgress(10, done=[11, 13]), owner, Settings(), now=0.0, limit=4096)
    assert progress.committable == 10
    assert [run.receive(o) for o in range(10, 15)] == [True, False, True, False, True]
    assert run.out == 3
    assert run.metrics()["gap"] == 3 and run.metrics()["state"] == "active"


@pytest.mark.parametrize("state", ["active", "blocked"])
def test_a_sought_back_partition_is_released_without_a_commit(state):
    owner = Owner(queued=2)
    run = run_with(3000, DONE, owner, limit=512)
    if state == "blocked":
        run.check_size(now=1.0)
    assert run.state == state
    assert not run.sought_back(3000) and run.sought_back(2999) and run.sought_back(0)
    run.machine.fire("seek", 2.0)
    assert run.state == "released" and not run.live
    assert ("drop", 2) in owner.effects and not [e for e in owner.effects if e[0] == "commit"]


def test_before_any_record_a_seek_below_the_restored_offset_is_seen():
    run = PartitionRun(TP, PartitionProgress(10, done=[11]), Owner(), Settings(), now=0.0, limit=4096)
    assert run.sought_back(9) and not run.sought_back(10) and not run.sought_back(12)
    fresh = PartitionRun(TP, None, Owner(), Settings(), now=0.0, limit=4096)
    assert not fresh.sought_back(0)  # nothing committed, nothing received: any offset is a start


def test_a_failed_record_counts_out_but_is_never_done():
    run = run_with(3, [0, 2], Owner())
    run.fail(1)
    assert run.out == 0 and run.to_commit() == (1, run.progress.metadata())
