"""The share-group rules (docs/histories.md, "Share groups"): H, N, A and S, judged from share consumers'
``share_handed``, ``share_ack`` and ``share_lost`` lines, per share group, per record.

A member holds a record from a hand-out until the earliest of: its lock's deadline (as the member counted it,
from the ShareFetch's sending: never later than the broker's), the sending of its acknowledgement of it (but a
RENEW, which keeps it: the renewed record comes back in the member's next hand-out), its ``closed`` line. A
``share_lost`` line before the deadline says the broker let the records go earlier (the session ended, the
connection was cut), at a moment the member learnt only then: such a hold binds no one else, and so does a
killed member's after its last line. What the member may claim stays bound to what it held: an
acknowledgement that took effect must have been sent while its member held the record and no one else had
been given it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._model import TP, GroupKey, Timeline, fmt_group, fmt_range, fmt_t, fmt_tp
from .._share_lines import FINAL, ShareAck, ShareHand, ShareLost
from .._violation import Violation
from ._lost import Produced, normalize_produced

#: the broker's group.share.delivery.count.limit default (Apache Kafka 4.x)
DELIVERY_LIMIT = 5

Key = tuple[GroupKey, TP, int]  # (share group, partition, offset)


@dataclass
class _Step:
    """One line's word on one record."""

    t: float
    i: int
    consumer: str
    hand: ShareHand | None = None
    count: int = 0
    ack: ShareAck | None = None
    kind: str = ""
    lost: ShareLost | None = None


@dataclass
class _Hold:
    consumer: str
    start: float
    end: float  # the earliest moment it is known to have ended
    excused_after: float  # from then on another member may have it (a lost session, a killed member)
    hand: ShareHand
    chain: list[ShareHand] = field(default_factory=list)  # its hand-outs again after each RENEW done: one hold

    @property
    def lock_until(self) -> float:
        return (self.chain[-1] if self.chain else self.hand).lock_until


@dataclass
class _Records:
    """Per share group and record, every share line's word on it, in line order."""

    steps: dict[Key, list[_Step]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, tl: Timeline) -> _Records:
        out = cls()
        for line in tl.share:
            group = tl.group_of(line.consumer)
            if isinstance(line, ShareHand):
                for offset, count in line.counts().items():
                    out.steps[(group, line.tp, offset)].append(
                        _Step(line.t, line.i, line.consumer, hand=line, count=count)
                    )
            elif isinstance(line, ShareAck):
                for offset, kind in line.types().items():
                    if kind != "gap":
                        out.steps[(group, line.tp, offset)].append(
                            _Step(line.t, line.i, line.consumer, ack=line, kind=kind)
                        )
            else:
                for offset in line.all():
                    out.steps[(group, line.tp, offset)].append(_Step(line.t, line.i, line.consumer, lost=line))
        return out


def share_consumers(tl: Timeline) -> list[str]:
    return [c.name for c in tl.consumers.values() if c.kind == "share"]


def _holds(tl: Timeline, steps: list[_Step]) -> list[_Hold]:
    """Each hand-out's hold of the record (a renewal's next hand-out continues the one before)."""
    out: list[_Hold] = []
    continued: set[int] = set()  # line numbers of hand-outs that continue a renewed hold
    for n, step in enumerate(steps):
        if step.hand is None or step.i in continued:
            continue
        info = tl.consumers[step.consumer]
        hold = _Hold(step.consumer, step.t, step.hand.lock_until, math.inf, step.hand)
        deadline = step.hand.lock_until
        for later in steps[n + 1 :]:
            if later.consumer != step.consumer:
                continue
            if later.hand is not None:
                if deadline == math.inf:  # renewed: the hold goes on under the new lock
                    hold.chain.append(later.hand)
                    continued.add(later.i)
                    deadline = hold.end = later.hand.lock_until
                    continue
                hold.end = min(hold.end, later.t)
                break
            if later.ack is not None:
                ack = later.ack
                if later.kind == "renew":
                    if ack.ok and ack.sent is not None and ack.sent < deadline:
                        deadline = hold.end = math.inf  # until the renewed record is handed out again
                    continue
                if not ack.ok:  # the broker refused it, or it failed here: it may have let the record go before
                    hold.excused_after = min(hold.excused_after, ack.sent if ack.sent is not None else later.t)
                    hold.end = min(hold.end, deadline, later.t)
                    break
                if ack.sent is not None:
                    hold.end = min(hold.end, ack.sent, deadline)
                    break
                continue
            if later.lost is not None:
                if later.t < deadline:  # earlier than the lock: the broker let it go, some time before
                    hold.excused_after = hold.start
                    hold.end = min(hold.end, later.t)
                else:
                    hold.end = min(hold.end, deadline)
                break
        if info.closed:
            hold.end = min(hold.end, info.last_t)
        elif info.last_t < hold.end:
            hold.excused_after = min(hold.excused_after, info.last_t)  # killed: its connection dropped after
        out.append(hold)
    return out


class _Found:
    """Violations of one rule, merged per (what, lines, consumers, partition): one per batch, not per record."""

    def __init__(self, rule: str) -> None:
        self.rule = rule
        self._by: dict[tuple[Any, ...], tuple[list[int], str, float, tuple[str, ...], TP]] = {}

    def add(self, key: tuple[Any, ...], offset: int, message: str, t: float, consumers: Iterable[str], tp: TP) -> None:
        got = self._by.get(key)
        if got is None:
            self._by[key] = ([offset], message, t, tuple(dict.fromkeys(consumers)), tp)
        else:
            got[0].append(offset)

    def violations(self) -> list[Violation]:
        out = []
        for offsets, message, t, consumers, tp in self._by.values():
            first, last = min(offsets), max(offsets)
            where = f"{fmt_tp(tp)} offset {fmt_range(first, last)}" + (
                f" ({len(offsets)} records)" if len(offsets) > 1 else ""
            )
            out.append(Violation(self.rule, f"{where}: {message}", t, consumers, tp, (first, last)))
        return out


def rule_h(tl: Timeline, records: _Records | None = None) -> list[Violation]:
    """H: one holder at a time: no member is handed a record while another member's (or its own) hold on it
    lasts, nor after its own lock on it ran out."""
    found = _Found("H")
    for line in tl.share:
        if isinstance(line, ShareHand) and line.t >= line.lock_until:
            first, last = line.records[0][0], line.records[-1][1]
            found.add(
                ("H-late", line.i),
                first,
                f"handed to {line.consumer} at {fmt_t(line.t)}, after its lock ran out at {fmt_t(line.lock_until)} "
                f"(records {fmt_range(first, last)})",
                line.t,
                (line.consumer,),
                line.tp,
            )
    for (group, tp, offset), steps in (records or _Records.of(tl)).steps.items():
        holds = _holds(tl, steps)
        renewals = {hand.i for h in holds for hand in h.chain}
        for step in steps:
            if step.hand is None or step.i in renewals:
                continue
            for hold in holds:
                if hold.hand is step.hand or not hold.start < step.t < hold.end or step.t > hold.excused_after:
                    continue
                found.add(
                    ("H", hold.hand.i, step.i),
                    offset,
                    f"handed to {step.consumer} (delivery {step.count}) at {fmt_t(step.t)} while {hold.consumer} "
                    f"held it (handed out at {fmt_t(hold.start)}, its lock until {fmt_t(hold.lock_until)}, "
                    f"held until {fmt_t(hold.end)}) in {fmt_group(group)}",
                    step.t,
                    (step.consumer, hold.consumer),
                    tp,
                )
    return found.violations()


def across_restart(restarts: Iterable[tuple[float, float]], before: float, after: float) -> bool:
    """Whether a broker restart (down from ``a``, up again at ``b``) ended between two hand-outs: the earlier
    one may fall within the shutdown (the broker serves until it stops), the later one came after its state
    was loaded again."""
    return any(before < b < after for _, b in restarts)


def rule_n(
    tl: Timeline,
    records: _Records | None = None,
    delivery_limit: int = DELIVERY_LIMIT,
    restarts: Iterable[tuple[float, float]] = (),
) -> list[Violation]:
    """N: each delivery of a record counts more than the last (but a renewed record handed out again to the
    same member), and none counts past the delivery limit. The broker's word may allow one more: ``restarts``,
    when it was restarted (in the lines' clock); Apache Kafka writes a delivery count with the record's
    acknowledgement or release, so a record acquired but not acknowledged when its leader restarted comes back
    at the count last written (KIP-932): such a redelivery at no higher a count is allowed, and counted."""
    return _counts(tl, records or _Records.of(tl), delivery_limit, list(restarts))[0]


def _counts(
    tl: Timeline, records: _Records, delivery_limit: int, restarts: list[tuple[float, float]]
) -> tuple[list[Violation], int]:
    found = _Found("N")
    allowed = 0
    for (group, tp, offset), steps in records.steps.items():
        last: _Step | None = None
        renewed: set[str] = set()  # members whose RENEW of it took effect since their last hand-out
        for step in steps:
            if step.ack is not None and step.kind == "renew" and step.ack.ok:
                renewed.add(step.consumer)
            if step.hand is None:
                continue
            if step.count > delivery_limit:
                found.add(
                    ("N-limit", step.i),
                    offset,
                    f"handed to {step.consumer} at {fmt_t(step.t)} at delivery {step.count}, past the delivery "
                    f"limit {delivery_limit} in {fmt_group(group)}",
                    step.t,
                    (step.consumer,),
                    tp,
                )
            if last is not None and step.count <= last.count:
                again = step.count == last.count and step.consumer == last.consumer and step.consumer in renewed
                if not again and across_restart(restarts, last.t, step.t):
                    again = True
                    allowed += 1
                if not again:
                    found.add(
                        ("N-count", last.i, step.i),
                        offset,
                        f"handed to {step.consumer} at {fmt_t(step.t)} at delivery {step.count}, after {last.consumer}"
                        f" had it at delivery {last.count} (at {fmt_t(last.t)}) in {fmt_group(group)}",
                        step.t,
                        (step.consumer, last.consumer),
                        tp,
                    )
            renewed.discard(step.consumer)
            last = step
    return found.violations(), allowed


def rule_a(tl: Timeline, records: _Records | None = None) -> list[Violation]:
    """A: an acknowledgement that took effect was sent by the record's holder while it held it, before anyone
    else was given it; after an ACCEPT or REJECT that took effect the record is never handed out again; one
    such per record."""
    found = _Found("A")
    for (group, tp, offset), steps in (records or _Records.of(tl)).steps.items():
        holds = _holds(tl, steps)
        finals = [s for s in steps if s.ack is not None and s.ack.ok and s.kind in FINAL]
        for step in steps:
            if step.hand is not None:
                for final in finals:
                    assert final.ack is not None
                    sent = final.ack.sent if final.ack.sent is not None else final.t
                    if step.t > sent:
                        found.add(
                            ("A-again", final.i, step.i),
                            offset,
                            f"handed to {step.consumer} at {fmt_t(step.t)} after {final.consumer}'s "
                            f"{final.kind.upper()} of it took effect (sent at {fmt_t(sent)}) in {fmt_group(group)}",
                            step.t,
                            (step.consumer, final.consumer),
                            tp,
                        )
                        break
            if step.ack is None or not step.ack.ok:
                continue
            why = _not_held(step, steps, holds)
            if why:
                found.add(
                    ("A-held", step.i),
                    offset,
                    f"{step.consumer}'s {step.kind.upper()} answered at {fmt_t(step.t)} took effect, but {why} "
                    f"in {fmt_group(group)}",
                    step.t,
                    (step.consumer,),
                    tp,
                )
        for first, again in zip(finals, finals[1:], strict=False):
            found.add(
                ("A-twice", first.i, again.i),
                offset,
                f"{again.consumer}'s {again.kind.upper()} at {fmt_t(again.t)} took effect after {first.consumer}'s "
                f"{first.kind.upper()} at {fmt_t(first.t)} had (a record settles once) in {fmt_group(group)}",
                again.t,
                (again.consumer, first.consumer),
                tp,
            )
    return found.violations()


def _not_held(step: _Step, steps: list[_Step], holds: list[_Hold]) -> str:
    """Why ``step``'s acknowledgement could not have been its member's to send ("" when it could)."""
    ack = step.ack
    assert ack is not None
    if ack.sent is None:
        return "it was never sent"
    mine = [h for h in holds if h.consumer == step.consumer and h.start <= ack.sent]
    if not mine:
        return f"{step.consumer} was never handed it before sending it at {fmt_t(ack.sent)}"
    hold = mine[-1]
    lock = _lock_at(hold, ack.sent)
    latest = max([hold.start, *(h.t for h in hold.chain if h.t <= ack.sent)])
    if any(
        o.ack is not None
        and o.kind == "renew"
        and o.ack.ok
        and o.consumer == step.consumer
        and o.ack.sent is not None
        and latest <= o.ack.sent < ack.sent
        for o in steps
    ):
        lock = math.inf  # renewed and not handed out again since: the renewed lock's deadline is not known
    if ack.sent > lock:
        return f"it was sent at {fmt_t(ack.sent)}, after {step.consumer}'s lock ran out at {fmt_t(lock)}"
    for other in steps:
        if other.lost is not None and other.consumer == step.consumer and hold.start <= other.t <= ack.sent:
            return f"{step.consumer} had lost it at {fmt_t(other.t)}, before sending it at {fmt_t(ack.sent)}"
        if other.hand is not None and other.consumer != step.consumer and hold.start < other.t < ack.sent:
            return (
                f"{other.consumer} was handed it at {fmt_t(other.t)}, after {step.consumer}'s hand-out at "
                f"{fmt_t(hold.start)} and before its sending at {fmt_t(ack.sent)}"
            )
    return ""


def _lock_at(hold: _Hold, t: float) -> float:
    """The deadline of the lock ``hold`` was under at ``t`` (the latest hand-out of its chain before then)."""
    lock = hold.hand.lock_until
    for hand in hold.chain:
        if hand.t <= t:
            lock = hand.lock_until
    return lock


def rule_s(
    tl: Timeline,
    produced: Mapping[Any, Any] | None,
    records: _Records | None = None,
    delivery_limit: int = DELIVERY_LIMIT,
    broker_settled: Mapping[TP, int] | None = None,
) -> list[Violation]:
    """S: every record produced to a topic a share group read is settled in it: accepted or rejected (taken
    effect), or handed out at the delivery limit (the broker archives it then). One allowance, on the broker's
    word only (``broker_settled``: per partition, the offset below which the broker holds every record settled
    after the run): a record whose last member's ACCEPT or REJECT may have taken effect with no answer read -
    the member killed with it in hand, or the answer lost with its connection (``_outcome_unknown``)."""
    return _settle(tl, produced, records or _Records.of(tl), delivery_limit, broker_settled or {})[0]


def _outcome_unknown(tl: Timeline, steps: list[_Step]) -> bool:
    """Whether the last member handed a record may have settled it with no answer to show: its history ends
    after the hand-out, no ``closed``, nothing said of the record (killed); or what it said is only that an
    ACCEPT or REJECT it sent failed unanswered (its connection or session ended: a broker restart, a cut)."""
    hands = [n for n, st in enumerate(steps) if st.hand is not None]
    if not hands:
        return False
    holder = steps[hands[-1]].consumer
    after = [st for st in steps[hands[-1] + 1 :] if st.consumer == holder]
    if not after:
        return not tl.consumers[holder].closed
    unanswered = [st for st in after if st.ack is not None and st.ack.unknown and st.kind in FINAL]
    return bool(unanswered) and all(st.lost is not None or st in unanswered for st in after)


def _settle(
    tl: Timeline,
    produced: Mapping[Any, Any] | None,
    recs: _Records,
    delivery_limit: int,
    broker: Mapping[TP, int],
) -> tuple[list[Violation], int]:
    if produced is None:
        return [], 0
    wanted: dict[TP, Produced] = normalize_produced(produced)
    settled: dict[Key, bool] = {}
    topics: dict[GroupKey, set[str]] = defaultdict(set)
    allowed = 0
    for (group, tp, offset), steps in recs.steps.items():
        topics[group].add(tp[0])
        last_count = max((s.count for s in steps if s.hand is not None), default=0)
        final = any(s.ack is not None and s.ack.ok and s.kind in FINAL for s in steps)
        done = final or last_count >= delivery_limit
        if not done and offset < broker.get(tp, -1) and _outcome_unknown(tl, steps):
            done = True  # killed with it in hand, settled by the broker's word
            allowed += 1
        settled[(group, tp, offset)] = done
    found = _Found("S")
    for group, names in topics.items():
        for tp, what in wanted.items():
            if tp[0] not in names:
                continue
            ranges = [(0, what - 1)] if isinstance(what, int) else what
            for first, last_offset in ranges:
                for offset in range(first, last_offset + 1):
                    if settled.get((group, tp, offset)):
                        continue
                    seen = (group, tp, offset) in settled
                    found.add(
                        ("S", group, tp, seen),
                        offset,
                        (
                            "handed out, never accepted or rejected nor delivered up to the limit"
                            if seen
                            else "never handed out"
                        )
                        + f" in {fmt_group(group)}",
                        tl.events[-1]["t"] if tl.events else 0.0,
                        (),
                        tp,
                    )
    return found.violations(), allowed


__all__ = [
    "DELIVERY_LIMIT",
    "across_restart",
    "rule_a",
    "rule_h",
    "rule_n",
    "rule_s",
    "share_consumers",
]
