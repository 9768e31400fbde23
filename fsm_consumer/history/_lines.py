"""The lines of a history, typed: what each event's fields say, checked as they are read (``Malformed``
names what a line lacks). ``_model`` orders them into a ``Timeline``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

TP: TypeAlias = tuple[str, int]
Event: TypeAlias = Mapping[str, Any]

#: the events a consumer writes (docs/histories.md); other names are counted by name and passed over
KNOWN_EVENTS = frozenset(
    {
        "started",
        "assigned",
        "revoked",
        "lost",
        "session_expired",
        "abandoned",
        "read",
        "skip",
        "seek",
        "reset",
        "commit",
        "callback",
        "held",
        "transition",
        "handled",
        "parallel_restart",
        "closed",
        "joined",
        "assign_done",
        "revoke_done",
        "lost_done",
    }
)
#: the events that end a consumer's ownership of the partitions they name (``closed`` ends all);
#: ``abandoned`` too: the consumer gives its partitions up without the callback
ENDS_OWNERSHIP = frozenset({"revoked", "lost", "session_expired", "abandoned"})
#: how a consumer came to own a partition: its group gave it (``group``: one owner at a time, in that group),
#: or it took it itself, ``assign()`` or a subscription without a group (no one else's business)
GROUP, ASSIGN, SUBSCRIBE = "group", "assign", "subscribe"


class NoStart(enum.Enum):
    """The group of a consumer whose history has no ``started`` line: it could be any."""

    UNKNOWN = "unknown"


GroupKey: TypeAlias = str | None | NoStart


def fmt_tp(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


def fmt_t(t: float) -> str:
    return f"{t:.1f} ms"


def fmt_range(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


def fmt_group(group: GroupKey) -> str:
    if group is NoStart.UNKNOWN:
        return "consumers without a started line"
    return "no group" if group is None else f"group {group!r}"


class Malformed(ValueError):
    """A line that does not have the fields its event needs."""


def num(line: Event, key: str) -> float:
    value = line.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Malformed(f"{key} is not a number: {value!r}")
    return float(value)


def integer(line: Event, key: str) -> int:
    value = line.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"{key} is not an integer: {value!r}")
    return value


def string(line: Event, key: str) -> str:
    value = line.get(key)
    if not isinstance(value, str):
        raise Malformed(f"{key} is not a string: {value!r}")
    return value


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_tp(value: object) -> TP:
    if isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], str) and is_int(value[1]):
        return (value[0], value[1])
    raise Malformed(f"not a [topic, partition]: {value!r}")


def tps_of(line: Event) -> list[TP]:
    value = line.get("partitions")
    if not isinstance(value, list):
        raise Malformed(f"partitions is not a list: {value!r}")
    return [as_tp(v) for v in value]


@dataclass(frozen=True, slots=True)
class Read:
    """A ``read`` line: records ``first..last`` of ``tp`` handed out (but the ``gaps``: offsets between them
    that hold no record), the position going ``start`` -> ``end`` (``end == start``: handed out without
    moving it, ``poll(update_offsets=False)``), in the poll begun at ``t_poll_start`` that could hand out at
    most ``max_records`` (None: the line does not say)."""

    i: int
    t: float
    consumer: str
    generation: int
    tp: TP
    first: int
    last: int
    count: int
    start: int  # the line's "from"
    end: int  # the line's "to"
    t_poll_start: float
    max_records: int | None = None
    gaps: tuple[tuple[int, int], ...] = ()
    line: Event = field(default_factory=dict, compare=False, repr=False)

    @property
    def moved(self) -> bool:
        return self.end != self.start

    @property
    def poll(self) -> tuple[str, float]:
        """The call that handed it out: its consumer and when it began."""
        return (self.consumer, self.t_poll_start)

    def fault(self) -> str:
        """Why the line does not hold together ("" when it does): ``from <= first <= last``, ``to`` above
        ``last`` (or ``from``: not moved), gaps inside ``first..last`` in order, ``count`` the offsets handed out.
        Such a line vouches for no offset."""
        if not self.start <= self.first:
            return f"from {self.start} is above the first offset {self.first}"
        if self.moved and not self.last < self.end:
            return f"to {self.end} is not above the last offset {self.last}"
        previous = self.first
        for lo, hi in self.gaps:
            if not previous < lo or not hi < self.last:
                return f"gap {fmt_range(lo, hi)} is not inside {fmt_range(self.first, self.last)}, in order"
            previous = hi + 1
        offsets = self.last - self.first + 1 - sum(hi - lo + 1 for lo, hi in self.gaps)
        if self.count != offsets:
            named = f"{len(self.gaps)} gaps named" if self.gaps else "no gaps named"
            return f"count {self.count} is not the {offsets} offsets of {fmt_range(self.first, self.last)} ({named})"
        return ""

    def ranges(self) -> list[tuple[int, int]]:
        """The ``[first, last]`` runs of offsets handed out: ``first..last`` without the gaps."""
        out, lo = [], self.first
        for g_lo, g_hi in self.gaps:
            if g_lo > lo:
                out.append((lo, g_lo - 1))
            lo = g_hi + 1
        if lo <= self.last:
            out.append((lo, self.last))
        return out


@dataclass(frozen=True, slots=True)
class Skip:
    i: int
    t: float
    consumer: str
    tp: TP
    start: int
    end: int
    line: Event = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Position:
    """A ``seek`` (the application's) or ``reset`` (the background's) of a partition's position."""

    i: int
    t: float
    consumer: str
    kind: str  # "seek" or "reset"
    tp: TP
    to: int | str  # an offset, or "earliest" / "latest" (seeks)
    why: str | None  # resets: the reset strategy, or "committed"
    line: Event = field(compare=False, repr=False)

    @property
    def offset(self) -> int | None:
        return self.to if isinstance(self.to, int) else None


@dataclass(frozen=True, slots=True)
class Commit:
    """One partition's offset of a ``commit`` line: sent at ``sent``, answered at ``t``."""

    i: int
    t: float
    consumer: str
    member: str
    generation: int
    tp: TP
    offset: int
    sent: float
    error: str | None
    line: Event = field(compare=False, repr=False)
    asked: float | None = None  # when it was asked for (None: not written)
    explicit: bool = False  # offsets the application gave, not its positions

    @property
    def acked(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class Interval:
    """A consumer's ownership of a partition as its own lines tell it: lines ``start_i <= i < end_i`` (from
    its ``assigned`` to its ``revoked``/``lost``/``session_expired``/``abandoned``/``closed``, or past its last
    line). ``by``: ``group`` (its group gave it, in ``generation``; -1: not known), ``assign`` or
    ``subscribe`` (it took the partition itself). Whether the group still meant it to own the partition all
    that time is ``_ownership``'s question."""

    consumer: str
    tp: TP
    start_i: int
    start_t: float
    end_i: int
    end_t: float
    ended_by: str  # the event that ended it, or "its last line"
    generation: int
    by: str = GROUP

    def holds(self, i: int) -> bool:
        return self.start_i <= i < self.end_i

    @property
    def exclusive(self) -> bool:
        """Given by a group: no other member of that group may own the partition meanwhile."""
        return self.by == GROUP


@dataclass(frozen=True, slots=True)
class Handled:
    i: int
    t: float
    consumer: str
    tp: TP
    offset: int
    key: str | None
    t_start: float
    outcome: str
    line: Event = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Restart:
    i: int
    t: float
    consumer: str
    tp: TP
    offset: int | None
    ordering: str = "key"  # the ParallelConsumer's: key, partition or unordered


def read_line(i: int, t: float, name: str, generation: int, e: Event) -> Read:
    first, last = pair(e.get("offsets"))
    t_poll_start = num(e, "t_poll_start")
    if t_poll_start > t + 0.001:  # t is rounded to the microsecond
        raise Malformed(f"t_poll_start {t_poll_start} is after t {t}")
    most = e.get("max_records")
    if most is not None and not (is_int(most) and most >= 1):
        raise Malformed(f"max_records is not a count: {most!r}")
    gaps_value = e.get("gaps", [])
    if not isinstance(gaps_value, list):
        raise Malformed(f"gaps is not a list: {gaps_value!r}")
    gaps = tuple(pair(g, "a gap") for g in gaps_value)
    return Read(
        i,
        t,
        name,
        generation,
        as_tp(e.get("tp")),
        first,
        last,
        integer(e, "count"),
        integer(e, "from"),
        integer(e, "to"),
        t_poll_start,
        most,
        gaps,
        e,
    )


def commit_lines(i: int, t: float, name: str, generation: int, e: Event) -> list[Commit]:
    offsets = e.get("offsets")
    if not isinstance(offsets, list):
        raise Malformed(f"offsets is not a list: {offsets!r}")
    error = e.get("error")
    ago = e.get("sent_ago_ms")
    if ago is not None:
        ago = num(e, "sent_ago_ms")
    sent = t - ago if ago is not None else t  # not known: as late as it can have been
    asked_ago = e.get("asked_ago_ms")
    asked = t - num(e, "asked_ago_ms") if asked_ago is not None else None
    explicit = e.get("explicit") is True
    member = e.get("member", "")
    out = []
    for entry in offsets:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 3):
            raise Malformed(f"not a [topic, partition, offset]: {entry!r}")
        offset = entry[2]
        if not is_int(offset):
            raise Malformed(f"offset is not an integer: {offset!r}")
        out.append(
            Commit(
                i,
                t,
                name,
                member if isinstance(member, str) else str(member),
                generation,
                as_tp(entry[:2]),
                offset,
                sent,
                None if error is None else str(error),
                e,
                asked,
                explicit,
            )
        )
    return out


def pair(value: object, what: str = "offsets") -> tuple[int, int]:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(is_int(v) for v in value) and value[0] <= value[1]:
        return (value[0], value[1])
    raise Malformed(f"{what} is not [first, last]: {value!r}")
