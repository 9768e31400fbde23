"""Mutants of a clean share-group history (``_mutants`` runs them beside the consumer kinds): each injects one
way a share group could break what its user relies on, and the rule that says so must report it.

* ``share-second-holder``: a record handed to a second member while its first holder's hold lasts (rule H);
* ``share-after-lock``: a hand-out made after its own lock ran out (rule H);
* ``share-count-back``: a redelivery counted no higher than the delivery before it (rule N);
* ``share-past-limit``: a delivery counted past the delivery limit (rule N);
* ``share-again-after-accept``: a record handed out again after its ACCEPT took effect (rule A);
* ``share-late-ack``: an acknowledgement that took effect sent after its member's lock ran out (rule A);
* ``share-unsettled``: an ACCEPT of records delivered once turned into a failure, so they end unsettled (rule
  S; only with the produced counts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ._model import fmt_range, fmt_tp
from ._rules._share import DELIVERY_LIMIT, _holds, _Records, across_restart
from ._share_lines import ShareAck, ShareHand

Events = list[dict[str, Any]]
Mutant = Any  # _mutants.Mutant (that module imports this one)

if TYPE_CHECKING:

    class Source:  # what _mutants._Source offers
        events: Events
        sources: list[str]
        tl: Any
        rng: Any
        inputs: dict[str, Any]

        def mutant(self, kind: str, what: str, change: Callable[[Events, list[str]], None], expect: str) -> Mutant: ...

        def index(self, i: int) -> int: ...


def _insert_hand(ev: Events, sources: list[str], after: int, like: dict[str, Any], **fields: Any) -> None:
    """A share_handed line, written by ``like``'s consumer (its file), put after line ``after`` of ``ev``."""
    line: dict[str, Any] = {k: like[k] for k in ("consumer", "client", "member", "generation") if k in like}
    line.update(event="share_handed", **fields)
    t = float(fields["t"])
    if isinstance(like.get("wall"), (int, float)):
        line["wall"] = round(float(like["wall"]) + (t - float(like["t"])) / 1000.0, 6)
    ev.insert(after + 1, line)
    sources.insert(after + 1, sources[after] if after < len(sources) else "")


def _lines_of(s: Source, consumer: str) -> list[int]:
    return [n for n, e in enumerate(s.events) if e.get("consumer") == consumer]


def _second_holder(s: Source) -> Iterator[Mutant]:
    records = _Records.of(s.tl)
    members = [c.name for c in s.tl.consumers.values() if c.kind == "share"]
    candidates = []
    for (group, tp, offset), steps in records.steps.items():
        for hold in _holds(s.tl, steps):
            if hold.excused_after == math.inf and hold.end - hold.start > 2.0 and hold.end != math.inf:
                candidates.append((group, tp, offset, hold, steps))
    if not candidates or len(members) < 2:
        return
    group, tp, offset, hold, steps = s.rng.choice(candidates)
    others = [m for m in members if m != hold.consumer and s.tl.group_of(m) == group]
    if not others:
        return
    thief = s.rng.choice(others)
    t = round((hold.start + hold.end) / 2.0, 3)
    count = max(step.count for step in steps if step.hand is not None) + 1
    mine = _lines_of(s, thief)
    at = max([n for n in mine if float(s.events[n]["t"]) <= t], default=mine[0])

    def change(ev: Events, sources: list[str]) -> None:
        fields = dict(t=t, tp=list(tp), records=[[offset, offset, min(count, DELIVERY_LIMIT)]], lock_until=t + 10_000)
        _insert_hand(ev, sources, at, s.events[at], **fields)

    what = f"{fmt_tp(tp)}@{offset} handed to {thief} at {t:.1f} ms while {hold.consumer} held it"
    yield s.mutant("share-second-holder", what, change, "H")


def _after_lock(s: Source) -> Iterator[Mutant]:
    hands = [h for h in s.tl.share if isinstance(h, ShareHand)]
    if not hands:
        return
    h = s.rng.choice(hands)
    n = s.index(h.i)

    def change(ev: Events, _: list[str]) -> None:
        ev[n]["lock_until"] = round(float(ev[n]["t"]) - 1.0, 3)  # the lock had run out a millisecond before

    what = f"{h.consumer}'s hand-out of {fmt_tp(h.tp)} at {h.t:.1f} ms made after its lock ran out"
    yield s.mutant("share-after-lock", what, change, "H")


def _count_back(s: Source) -> Iterator[Mutant]:
    """A record handed out before, handed out again at no higher a count than that delivery's."""
    candidates: list[tuple[int, Any, Any]] = []
    restarts = [(float(a), float(b)) for a, b in s.inputs.get("broker_restarts") or []]
    for (_, _, offset), steps in _Records.of(s.tl).steps.items():
        hands = [st for st in steps if st.hand is not None]
        candidates.extend(
            (offset, before, after)
            for before, after in zip(hands, hands[1:], strict=False)
            # not a renewed record handed out again; not across a broker restart (where rule N allows it)
            if before.count < after.count and not across_restart(restarts, before.t, after.t)
        )
    if not candidates:
        return
    offset, before, after = s.rng.choice(candidates)
    n = s.index(after.i)

    def change(ev: Events, _: list[str]) -> None:
        runs = []
        for a, b, c in ev[n]["records"]:
            if a <= offset <= b:
                runs += [[a, offset - 1, c]] if a < offset else []
                runs.append([offset, offset, before.count])
                runs += [[offset + 1, b, c]] if offset < b else []
            else:
                runs.append([a, b, c])
        ev[n]["records"] = runs

    what = (
        f"{after.consumer}'s redelivery of {fmt_tp(after.hand.tp)}@{offset} at {after.t:.1f} ms counted "
        f"{before.count}, as {before.consumer}'s delivery before it"
    )
    yield s.mutant("share-count-back", what, change, "N")


def _past_limit(s: Source) -> Iterator[Mutant]:
    hands = [h for h in s.tl.share if isinstance(h, ShareHand)]
    if not hands:
        return
    h = s.rng.choice(hands)
    n = s.index(h.i)
    limit = int(s.inputs.get("delivery_limit") or DELIVERY_LIMIT)

    def change(ev: Events, _: list[str]) -> None:
        ev[n]["records"] = [[a, b, limit + 1] for a, b, _c in ev[n]["records"]]

    what = f"{h.consumer}'s hand-out of {fmt_tp(h.tp)} at {h.t:.1f} ms counted {limit + 1}, past the limit"
    yield s.mutant("share-past-limit", what, change, "N")


def _accepted(s: Source) -> list[ShareAck]:
    return [a for a in s.tl.share if isinstance(a, ShareAck) and a.ok and any(k == "accept" for _, _, k in a.acks)]


def _again_after_accept(s: Source) -> Iterator[Mutant]:
    acks = _accepted(s)
    members = [c.name for c in s.tl.consumers.values() if c.kind == "share"]
    if not acks or not members:
        return
    ack = s.rng.choice(acks)
    first, _, _ = next(run for run in ack.acks if run[2] == "accept")
    taker = s.rng.choice(members)
    t = round(ack.t + 1.0, 3)
    mine = _lines_of(s, taker)
    at = max([n for n in mine if float(s.events[n]["t"]) <= t], default=mine[0])

    def change(ev: Events, sources: list[str]) -> None:
        fields = dict(t=t, tp=list(ack.tp), records=[[first, first, 2]], lock_until=t + 10_000)
        _insert_hand(ev, sources, at, s.events[at], **fields)

    what = f"{fmt_tp(ack.tp)}@{first} handed to {taker} at {t:.1f} ms, after {ack.consumer}'s ACCEPT of it"
    yield s.mutant("share-again-after-accept", what, change, "A")


def _late_ack(s: Source) -> Iterator[Mutant]:
    hands = {(h.consumer, h.tp): h for h in s.tl.share if isinstance(h, ShareHand)}
    acks = [a for a in _accepted(s) if a.sent is not None and (a.consumer, a.tp) in hands]
    if not acks:
        return
    ack = s.rng.choice(acks)
    n = s.index(ack.i)
    last_lock = max(
        h.lock_until for h in s.tl.share if isinstance(h, ShareHand) and h.consumer == ack.consumer and h.t <= ack.t
    )

    def change(ev: Events, _: list[str]) -> None:
        ev[n]["sent_ago_ms"] = 0.0  # sent as it was answered, after the lock: a clock read the wrong way round
        shift = max(0.0, last_lock + 1.0 - float(ev[n]["t"]))
        ev[n]["t"] = round(float(ev[n]["t"]) + shift, 3)
        if isinstance(ev[n].get("wall"), (int, float)):
            ev[n]["wall"] = round(float(ev[n]["wall"]) + shift / 1000.0, 6)

    what = f"{ack.consumer}'s ACCEPT of {fmt_tp(ack.tp)} sent after its lock ran out ({last_lock:.1f} ms)"
    yield s.mutant("share-late-ack", what, change, "A")


def _unsettled(s: Source) -> Iterator[Mutant]:
    if s.inputs.get("produced") is None:
        return
    records = _Records.of(s.tl)
    once = {
        key for key, steps in records.steps.items() if sum(1 for st in steps if st.hand is not None) == 1
    }  # delivered once: never archived
    acks = [
        a
        for a in _accepted(s)
        if any((s.tl.group_of(a.consumer), a.tp, o) in once for o, k in a.types().items() if k == "accept")
    ]
    if not acks:
        return
    ack = s.rng.choice(acks)
    n = s.index(ack.i)

    def change(ev: Events, _: list[str]) -> None:
        ev[n]["error"] = "INVALID_RECORD_STATE (121)"

    first, last = ack.acks[0][0], ack.acks[-1][1]
    what = f"{ack.consumer}'s ACCEPT of {fmt_tp(ack.tp)} {fmt_range(first, last)} refused"
    yield s.mutant("share-unsettled", what, change, "S")


#: kind -> the function that makes its mutants of a clean share-group history
SHARE_KINDS: dict[str, Callable[[Source], Iterator[Mutant]]] = {
    "share-second-holder": _second_holder,
    "share-after-lock": _after_lock,
    "share-count-back": _count_back,
    "share-past-limit": _past_limit,
    "share-again-after-accept": _again_after_accept,
    "share-late-ack": _late_ack,
    "share-unsettled": _unsettled,
}
