"""Who owned which partition when: the one model of ownership every rule and the picture use.

A consumer's own lines say when it believed it owned a partition (``Interval``: ``assigned`` to
``revoked``/``lost``/``session_expired``/``abandoned``/``closed``). What its group meant is narrower, and
this module decides it, per member process (its unique name), whatever its generation, epoch or clock:

* An ownership its group gave (``by == "group"``) ends, for the rules, at the first ``assigned`` of the
  partition to another member of the group while it lasts, when that assignment is of the same or a newer
  generation (the group has moved the partition on: a frozen or cut-off member may not know it yet); it is
  void from its start when it began while another member held the partition under a newer generation (a
  late ``assigned`` of an older round). So at any moment at most one member of a group owns a partition.
* An ownership a consumer took itself (``assign()``, a subscription without a group) is its own, shared
  with no one.

Each read is then one of: handed out within its member's ownership (``OWNED``); after that ownership ended
but by the one poll under way when it did, within that poll's ``max_records``, while the member still
believed it owned the partition (``ALLOWED``: a member frozen mid-poll returns it on waking; rule C sees that
it is never committed); or a violation of rule E
(``STALE``: after the ownership ended, beyond the allowance; ``VOID``: in an ownership the group had
already given to a newer round; ``UNOWNED``: by a consumer that never owned the partition).
"""

from __future__ import annotations

import bisect
import enum
from collections import defaultdict
from dataclasses import dataclass

from ._model import TP, Interval, Read, Timeline, fmt_t


class Kind(enum.Enum):
    OWNED = "owned"
    ALLOWED = "allowed"  # the one poll under way when the ownership ended
    STALE = "stale"
    VOID = "void"
    UNOWNED = "unowned"

    @property
    def violates(self) -> bool:
        return self in (Kind.STALE, Kind.VOID, Kind.UNOWNED)


@dataclass(frozen=True)
class Owned:
    """An ``Interval`` and the part of it its group meant: lines ``start_i <= i < end_i`` (``end_i ==
    interval.start_i``: none)."""

    interval: Interval
    end_i: int
    end_t: float
    cut_by: Interval | None = None  # another member's assignment that moved the partition on
    void_by: Interval | None = None  # the newer round's ownership this one began under

    @property
    def consumer(self) -> str:
        return self.interval.consumer

    @property
    def start_t(self) -> float:
        return self.interval.start_t

    def holds_t(self, t: float) -> bool:
        return self.interval.start_t <= t < self.end_t and self.void_by is None

    def ended(self) -> str:
        """How it ended, in words."""
        v = self.interval
        if self.void_by is not None:
            w = self.void_by
            return (
                f"void: assigned in generation {v.generation} at {fmt_t(v.start_t)} while {w.consumer} owned it in "
                f"generation {w.generation} (assigned at {fmt_t(w.start_t)}), a newer round"
            )
        if self.cut_by is not None:
            w = self.cut_by
            return (
                f"its ownership (generation {v.generation}, from {fmt_t(v.start_t)}) ended at {fmt_t(self.end_t)}, "
                f"when {w.consumer} was assigned the partition (generation {w.generation})"
            )
        return (
            f"its ownership (generation {v.generation}, from {fmt_t(v.start_t)}) ended at {fmt_t(self.end_t)} "
            f"({v.ended_by})"
        )


@dataclass(frozen=True)
class Verdict:
    """What the model says of one read: its kind, the ownership it fell in or after (None: it never owned
    the partition before), and, for a stale read, why the allowance does not cover it."""

    read: Read
    kind: Kind
    owned: Owned | None
    why: str = ""


#: why a read after its member's own end of the ownership is never the allowance: the member knew
_KNEW = "it handed them out after its own lines had ended the ownership (it knew the partition was no longer its)"


class Model:
    """The ownership of every member of a ``Timeline`` and a verdict on every read (see the module)."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.owned: dict[Interval, Owned] = _legitimate(tl)
        self.of: dict[tuple[str, TP], list[Owned]] = defaultdict(list)  # by start
        for o in sorted(self.owned.values(), key=lambda o: o.interval.start_i):
            self.of[(o.consumer, o.interval.tp)].append(o)
        self._starts = {key: [o.interval.start_i for o in os_] for key, os_ in self.of.items()}
        self.verdicts: dict[int, Verdict] = {}  # by the read's line
        self.allowed_polls: dict[tuple[str, float], int] = {}  # poll -> its records
        self._judge_reads()

    # -- ownership ---------------------------------------------------------------------------------------
    def at_line(self, consumer: str, tp: TP, i: int) -> Owned | None:
        """The ownership (as its own lines tell it) holding line ``i``, or None."""
        key = (consumer, tp)
        n = bisect.bisect_right(self._starts.get(key, []), i)
        if n and self.of[key][n - 1].interval.holds(i):
            return self.of[key][n - 1]
        return None

    def before_line(self, consumer: str, tp: TP, i: int) -> Owned | None:
        """The last ownership that began at or before line ``i``."""
        key = (consumer, tp)
        n = bisect.bisect_right(self._starts.get(key, []), i)
        return self.of[key][n - 1] if n else None

    def owner_at(self, consumer: str, tp: TP, t: float) -> Owned | None:
        """The ownership of ``consumer`` its group meant at time ``t`` (for a commit's sending), or None."""
        for o in self.of.get((consumer, tp), ()):
            if o.holds_t(t):
                return o
        return None

    def verdict(self, r: Read) -> Verdict:
        return self.verdicts[r.i]

    def violations(self) -> list[Verdict]:
        return [v for v in self.verdicts.values() if v.kind.violates]

    # -- reads ---------------------------------------------------------------------------------------------
    def _judge_reads(self) -> None:
        stale: dict[tuple[str, float], list[Verdict]] = defaultdict(list)
        polls: dict[tuple[str, float], list[Read]] = defaultdict(list)
        for r in self.tl.reads:
            polls[r.poll].append(r)
            v = self._place(r)
            self.verdicts[r.i] = v
            if v.kind is Kind.STALE:
                stale[r.poll].append(v)
        for poll, verdicts in stale.items():
            why = self._not_allowed(poll, verdicts, polls[poll])
            kind = Kind.STALE if why else Kind.ALLOWED
            if kind is Kind.ALLOWED:
                self.allowed_polls[poll] = sum(r.count for r in polls[poll])
            for v in verdicts:
                self.verdicts[v.read.i] = Verdict(v.read, kind, v.owned, why)

    def _place(self, r: Read) -> Verdict:
        o = self.at_line(r.consumer, r.tp, r.i)
        if o is not None:
            if not o.interval.exclusive:
                return Verdict(r, Kind.OWNED, o)
            if o.void_by is not None:
                return Verdict(r, Kind.VOID, o, o.ended())
            if r.i < o.end_i:
                return Verdict(r, Kind.OWNED, o)
            return Verdict(r, Kind.STALE, o)
        before = self.before_line(r.consumer, r.tp, r.i)
        if before is None:
            return Verdict(r, Kind.UNOWNED, None)
        if before.void_by is not None:
            return Verdict(r, Kind.VOID, before, before.ended())
        return Verdict(r, Kind.STALE, before, _KNEW)

    def _not_allowed(self, poll: tuple[str, float], verdicts: list[Verdict], reads: list[Read]) -> str:
        """Why a poll's stale reads are not the one poll under way when the ownership ended ("" if they are)."""
        start = poll[1]
        for v in verdicts:
            assert v.owned is not None  # a stale read fell in or after an ownership
            if v.why:  # after its own lines had ended the ownership: it knew
                return v.why
            if start >= v.owned.end_t:
                return f"its poll began at {fmt_t(start)}, after that"
        bound = max((r.max_records for r in reads if r.max_records is not None), default=None)
        if bound is None:
            config = self.tl.consumers[poll[0]].config.get("max_poll_records")
            bound = config if isinstance(config, int) and not isinstance(config, bool) else None
        records = sum(r.count for r in reads)
        if bound is None:
            return f"its poll handed out {records} records, and its max_records is not recorded"
        if records > bound:
            return f"its poll (begun {fmt_t(start)}) handed out {records} records, more than its max_records {bound}"
        return ""


def _legitimate(tl: Timeline) -> dict[Interval, Owned]:
    """Each interval's part its group meant (see the module): cut where another member of the group was
    assigned the partition in the same or a newer generation, void when begun under a newer round."""
    by_tp: dict[TP, list[Interval]] = defaultdict(list)
    for v in tl.intervals:
        if v.exclusive:
            by_tp[v.tp].append(v)
    end: dict[Interval, tuple[int, float, Interval | None]] = {}
    void: dict[Interval, Interval] = {}
    for intervals in by_tp.values():
        intervals.sort(key=lambda v: v.start_i)
        starts = [v.start_i for v in intervals]
        for n, x in enumerate(intervals):
            # the intervals of other members that began while x lasted (by its own lines)
            for y in intervals[n + 1 : bisect.bisect_left(starts, x.end_i)]:
                if y.consumer == x.consumer or not tl.same_group(x.consumer, y.consumer):
                    continue
                if x.generation >= 0 and y.generation >= 0 and y.generation < x.generation:
                    void.setdefault(y, x)
                elif x not in end or y.start_i < end[x][0]:
                    end[x] = (y.start_i, y.start_t, y)
    out = {}
    for v in tl.intervals:
        if v in void:
            out[v] = Owned(v, v.start_i, v.start_t, void_by=void[v])
        elif v in end:
            i, t, by = end[v]
            out[v] = Owned(v, i, t, cut_by=by)
        else:
            out[v] = Owned(v, v.end_i, v.end_t)
    return out
