"""The commit-backwards mutant's search for where to lower a commit is linear (a running best per group),
where it was a scan of every earlier commit per commit (tens of seconds over a fault test's history). It
must pick the very pairs the plain scan by the definition picks, on histories with several groups,
consumers of no known group, failed commits and consumers that moved their own positions; and never pair
a commit with one of another group, which the scan it replaced did when the commit had none of its own."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_consumer.history._model import Commit, Timeline
from fsm_consumer.history._mutants import _backwards_candidates

T = "events"
#: consumer -> its group (None: a started line without one; absent: no started line, so any group)
GROUPS: dict[str, str | None] = {"a@1#1": "g", "b@2#1": "g", "c@3#1": "h", "d@4#1": None}
CONSUMERS = [*GROUPS, "e@5#1"]


def _line(event: str, consumer: str, t: float, **fields: Any) -> dict[str, Any]:
    return {
        "t": t,
        "consumer": consumer,
        "client": consumer[0],
        "member": "",
        "generation": 1,
        "event": event,
        **fields,
    }


def _plain_scan(tl: Timeline) -> list[tuple[Commit, Commit]]:
    """The search by its definition: for each commit, every commit of its partition answered before it was
    sent, in its group; the highest of them."""
    acked: dict[Any, list[Commit]] = {}
    for c in tl.commits:
        if c.acked:
            acked.setdefault(c.tp, []).append(c)
    movers = {(p.consumer, p.tp) for p in tl.positions if p.kind == "seek" or p.why != "committed"}
    out = []
    for tp, commits in acked.items():
        commits.sort(key=lambda c: (c.t, c.i))
        for y in commits:
            earlier = [x for x in commits if x.t < y.sent and tl.same_group(x.consumer, y.consumer)]
            best = max(earlier, key=lambda x: x.offset) if earlier else None
            if best is not None and best.offset >= 1 and (y.consumer, tp) not in movers:
                out.append((y, best))
    return out


commit_lines = st.lists(
    st.tuples(
        st.sampled_from(CONSUMERS),
        st.integers(1, 400),  # answered at
        st.integers(0, 60),  # sent this long before
        st.integers(0, 1),  # partition
        st.integers(0, 30),  # offset
        st.booleans(),  # failed
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(commit_lines, st.lists(st.tuples(st.sampled_from(CONSUMERS), st.integers(0, 1)), max_size=3))
def test_the_running_best_picks_what_the_plain_scan_picks(commits, moved) -> None:
    lines = [_line("started", c, 0.0, group=g, config={}) for c, g in GROUPS.items()]
    for c, p in moved:
        lines.append(_line("reset", c, 0.5, tp=[T, p], to=0, why="earliest"))
    for c, t, ago, p, offset, failed in commits:
        lines.append(
            _line(
                "commit", c, float(t), offsets=[[T, p, offset]], error="REBALANCE" if failed else None, sent_ago_ms=ago
            )
        )
    tl = Timeline.build(lines)
    assert _backwards_candidates(tl) == _plain_scan(tl)


def test_the_search_finds_a_pair_in_each_group_and_not_across_groups() -> None:
    """a's 20 was answered before b (same group) sent; c (another group) sees none of them."""
    lines = [_line("started", c, 0.0, group=g, config={}) for c, g in GROUPS.items()]
    lines += [
        _line("commit", "a@1#1", 10.0, offsets=[[T, 0, 20]], error=None, sent_ago_ms=2),
        _line("commit", "b@2#1", 30.0, offsets=[[T, 0, 25]], error=None, sent_ago_ms=5),
        _line("commit", "c@3#1", 40.0, offsets=[[T, 0, 3]], error=None, sent_ago_ms=5),
    ]
    pairs = [(y.consumer, x.consumer, x.offset) for y, x in _backwards_candidates(Timeline.build(lines))]
    assert ("b@2#1", "a@1#1", 20) in pairs
    assert not any(y == "c@3#1" and x != "c@3#1" for y, x, _ in pairs)
