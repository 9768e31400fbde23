"""The scenario runs' pure parts, without a broker: the re-read bound (fsm_consumer.testing._rereads) on
hand-written histories, and the watch over member files (fsm_consumer.testing._processes.Watch): who owns
what, and when live members owned every partition again after one was killed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fsm_consumer.history import check
from fsm_consumer.testing._processes import Watch
from fsm_consumer.testing._rereads import reread_bound

T = "t"


def line(event: str, consumer: str, t: float, **fields: Any) -> dict[str, Any]:
    common = {"t": t, "wall": 1_700_000_000 + t / 1000, "consumer": consumer, "client": consumer[0], "member": ""}
    common["generation"] = 1
    return {**common, "event": event, **fields}


def started(c: str, t: float) -> dict[str, Any]:
    return line("started", c, t, group="g", config={})


def assigned(c: str, t: float, p: int = 0) -> dict[str, Any]:
    return line("assigned", c, t, partitions=[[T, p]])


def read(c: str, t: float, first: int, last: int, p: int = 0, poll: float | None = None) -> dict[str, Any]:
    return line(
        "read",
        c,
        t,
        tp=[T, p],
        offsets=[first, last],
        count=last - first + 1,
        t_poll_start=t - 1 if poll is None else poll,
        max_records=500,
        **{"from": first, "to": last + 1},
    )


def commit(c: str, t: float, offset: int, p: int = 0) -> dict[str, Any]:
    return line("commit", c, t, offsets=[[T, p, offset]], error=None, sent_ago_ms=1)


def test_a_new_owner_may_hand_out_again_what_lies_above_the_last_commit() -> None:
    lines = [
        started("a@1", 0),
        assigned("a@1", 1),
        read("a@1", 10, 0, 19),
        commit("a@1", 11, 10),  # 10..19 handed out, not committed: a killed a may leave them
        started("b@2", 20),
        assigned("b@2", 30),
        read("b@2", 40, 10, 29),
    ]
    assert check(lines).summary["rereads"] == 10
    assert reread_bound(lines) == 10


def test_without_a_commit_everything_handed_out_may_come_again() -> None:
    lines = [assigned("a@1", 1), read("a@1", 10, 0, 19), assigned("b@2", 30), read("b@2", 40, 0, 4)]
    assert reread_bound(lines) == 20  # the bound, not what was re-read (5)


def test_the_one_poll_of_a_stale_owner_counts_once() -> None:
    lines = [
        assigned("a@1", 1),
        read("a@1", 10, 0, 9),
        commit("a@1", 11, 10),
        assigned("b@2", 30),  # a still believes it owns the partition (frozen)
        read("a@1", 35, 10, 14, poll=20),  # its poll under way at the freeze
        read("a@1", 36, 15, 16),  # a second one: rule E's business, not the bound's
        read("b@2", 40, 10, 19),
    ]
    assert reread_bound(lines) == 5


class _Proc:
    """What Watch reads of a MemberProcess."""

    def __init__(self, key: str, out: Path) -> None:
        self.key = self.name = key
        self.out = out
        self.proc = self

    def poll(self) -> None:  # alive
        return None

    def write(self, event: str, t: float, **fields: Any) -> None:
        with open(self.out, "a") as f:
            f.write(json.dumps({"t": t, "member": self.key, "event": event, **fields}) + "\n")


def test_the_watch_notes_when_live_members_own_every_partition_again(tmp_path: Path) -> None:
    a, b = _Proc("a", tmp_path / "a.jsonl"), _Proc("b", tmp_path / "b.jsonl")
    watch = Watch([a, b], partitions=2)  # type: ignore[list-item]
    a.write("assigned", 10, partitions=[[T, 0]])
    b.write("assigned", 11, partitions=[[T, 1]])
    b.write("read", 12, tp=[T, 1], offsets=[0, 4])
    watch.update()
    assert watch.whole_since == 11 and watch.owners() == {0: ["a"], 1: ["b"]}
    assert watch.read_all({(T, 1): {0, 1, 2, 3, 4}}) and not watch.read_all({(T, 0): {0}})
    with open(b.out, "a") as f:
        f.write('{"t": 13, "member": "b", "ev')  # what a kill leaves: half a line, never read
    watch.retire(b, 20)  # b killed at 20: partition 1 is nobody's
    assert watch.whole_since is None and watch.live_owned() == {(T, 0)}
    c = _Proc("b-r1", tmp_path / "b-r1.jsonl")
    watch.add(c)  # type: ignore[arg-type]
    c.write("assigned", 25, partitions=[[T, 1]])
    c.write("leader", 26, leader=True)
    watch.update()
    assert watch.whole_since == 25 and [t for t, _ in watch.wholes] == [11, 25]
    assert watch.wholes[-1][1] == {0: ["a"], 1: ["b-r1"]} and watch.leader == {"b-r1": True}
    assert watch.all_assigned(2) and watch.ever_owned == {"a", "b", "b-r1"}
