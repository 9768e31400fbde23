"""History lines made typed and ordered (docs/histories.md): what the rules work on.

``Timeline.build`` takes the parsed lines of any number of consumers, orders them by ``t`` (ties keep the
order given: file by file, line by line), numbers them (``i``: a position in that order, so that lines of
equal ``t`` still compare) and keeps what the rules need: reads, skips, seeks and resets, commits expanded
per partition, every consumer's ownership intervals, handler runs, transitions. A line it cannot use
(a field missing or of the wrong type) is listed in ``malformed`` and not checked.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

TP: TypeAlias = tuple[str, int]
Event: TypeAlias = Mapping[str, Any]

#: the events a consumer writes (docs/histories.md); other names are counted and passed over
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
    }
)
#: the events that end a consumer's ownership of the partitions they name (``closed`` ends all);
#: ``abandoned`` too: the consumer gives its partitions up without the callback
ENDS_OWNERSHIP = frozenset({"revoked", "lost", "session_expired", "abandoned"})
#: the lines that make a consumer a member of the group its ``started`` line names (else it only carries it)
_IN_GROUP = ("joined", "assigned", "commit")


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


def _num(line: Event, key: str) -> float:
    value = line.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Malformed(f"{key} is not a number: {value!r}")
    return float(value)


def _int(line: Event, key: str) -> int:
    value = line.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"{key} is not an integer: {value!r}")
    return value


def _str(line: Event, key: str) -> str:
    value = line.get(key)
    if not isinstance(value, str):
        raise Malformed(f"{key} is not a string: {value!r}")
    return value


def _as_tp(value: object) -> TP:
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
    ):
        return (value[0], value[1])
    raise Malformed(f"not a [topic, partition]: {value!r}")


def _tps(line: Event) -> list[TP]:
    value = line.get("partitions")
    if not isinstance(value, list):
        raise Malformed(f"partitions is not a list: {value!r}")
    return [_as_tp(v) for v in value]


@dataclass(frozen=True, slots=True)
class Read:
    """A ``read`` line: records ``first..last`` of ``tp`` handed out, the position going ``start`` -> ``end``."""

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
    line: Event = field(compare=False, repr=False)


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

    @property
    def acked(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class Interval:
    """A consumer's ownership of a partition: lines ``start_i <= i < end_i`` (from its ``assigned`` to its
    ``revoked``/``lost``/``session_expired``/``abandoned``/``closed``, or past its last line)."""

    consumer: str
    tp: TP
    start_i: int
    start_t: float
    end_i: int
    end_t: float
    ended_by: str  # the event that ended it, or "its last line"
    generation: int

    def holds(self, i: int) -> bool:
        return self.start_i <= i < self.end_i


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


@dataclass
class ConsumerInfo:
    name: str
    client: str
    group: GroupKey
    instance_id: str | None
    first_i: int
    last_i: int
    first_t: float
    last_t: float
    closed: bool = False
    carried_group: str | None = None  # the group id of a consumer that neither joined nor committed to it
    generations: set[int] = field(default_factory=set)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # lines per event


@dataclass
class Timeline:
    """The lines of a set of consumers, ordered and typed (see the module's docstring)."""

    events: list[Event]
    consumers: dict[str, ConsumerInfo]
    reads: list[Read]
    skips: list[Skip]
    positions: list[Position]
    commits: list[Commit]
    intervals: list[Interval]
    handled: list[Handled]
    restarts: list[Restart]
    transitions: dict[str, list[Event]]
    malformed: list[tuple[str, Event]]
    unknown_events: int = 0

    @classmethod
    def build(cls, lines: Iterable[object]) -> Timeline:
        good: list[Event] = []
        malformed: list[tuple[str, Event]] = []
        sources = 0
        for line in lines:
            if not isinstance(line, Mapping):
                malformed.append(("not a JSON object", {"line": line}))
                continue
            if "consumer" not in line and isinstance(line.get("role"), str):
                sources += 1  # a source's own line (the Spark source's batches, spark/_history.py): passed over
                continue
            try:
                _num(line, "t")
                _str(line, "consumer")
                _str(line, "event")
            except Malformed as e:
                malformed.append((str(e), line))
                continue
            good.append(line)
        good.sort(key=lambda e: float(e["t"]))  # stable: equal times keep the order given
        tl = cls(good, {}, [], [], [], [], [], [], [], defaultdict(list), malformed)
        tl._index()
        tl.unknown_events += sources
        return tl

    def _index(self) -> None:
        open_: dict[tuple[str, TP], tuple[int, float, int]] = {}  # (consumer, tp) -> assigned (i, t, generation)
        unknown = 0
        for i, e in enumerate(self.events):
            name, kind, t = e["consumer"], e["event"], float(e["t"])
            info = self.consumers.get(name)
            if info is None:
                info = self.consumers[name] = ConsumerInfo(
                    name, str(e.get("client", name.partition("@")[0])), NoStart.UNKNOWN, None, i, i, t, t
                )
            info.last_i, info.last_t = i, t
            info.counts[kind] += 1
            generation = e.get("generation", -1)
            if isinstance(generation, int) and not isinstance(generation, bool) and generation >= 0:
                info.generations.add(generation)
            if kind not in KNOWN_EVENTS:
                unknown += 1
                continue
            try:
                self._one(i, t, name, kind, e, info, open_)
            except Malformed as err:
                self.malformed.append((f"{kind}: {err}", e))
        for info in self.consumers.values():
            if isinstance(info.group, str) and not any(info.counts.get(k) for k in _IN_GROUP):
                # it carries a group id (a Spark source's task consumer does, for brokers that authorize by
                # group) but never joined the group nor committed to it: a group-less reader to the rules
                info.carried_group, info.group = info.group, None
        for (name, tp), (start_i, start_t, generation) in open_.items():
            info = self.consumers[name]
            self.intervals.append(
                Interval(name, tp, start_i, start_t, info.last_i + 1, info.last_t, "its last line", generation)
            )
        self.intervals.sort(key=lambda v: (v.tp, v.start_i))
        self.unknown_events = unknown

    def _one(
        self,
        i: int,
        t: float,
        name: str,
        kind: str,
        e: Event,
        info: ConsumerInfo,
        open_: dict[tuple[str, TP], tuple[int, float, int]],
    ) -> None:
        generation = e.get("generation", -1)
        generation = generation if isinstance(generation, int) and not isinstance(generation, bool) else -1
        if kind == "started":
            if info.group is NoStart.UNKNOWN:
                group = e.get("group")
                if group is not None and not isinstance(group, str):
                    raise Malformed(f"group is not a string: {group!r}")
                config = e.get("config")
                instance = config.get("group_instance_id") if isinstance(config, Mapping) else None
                info.group, info.instance_id = group, instance if isinstance(instance, str) else None
        elif kind == "assigned":
            for tp in _tps(e):
                open_.setdefault((name, tp), (i, t, generation))
        elif kind in ENDS_OWNERSHIP:
            for tp in _tps(e):
                self._close(name, tp, i, t, kind, open_)
        elif kind == "closed":
            info.closed = True
            for key in [k for k in open_ if k[0] == name]:
                self._close(name, key[1], i, t, kind, open_)
        elif kind == "read":
            first, last = _pair(e.get("offsets"))
            t_poll_start = _num(e, "t_poll_start")
            if t_poll_start > t + 0.001:  # t is rounded to the microsecond
                raise Malformed(f"t_poll_start {t_poll_start} is after t {t}")
            self.reads.append(
                Read(
                    i,
                    t,
                    name,
                    generation,
                    _as_tp(e.get("tp")),
                    first,
                    last,
                    _int(e, "count"),
                    _int(e, "from"),
                    _int(e, "to"),
                    t_poll_start,
                    e,
                )
            )
        elif kind == "skip":
            self.skips.append(Skip(i, t, name, _as_tp(e.get("tp")), _int(e, "from"), _int(e, "to"), e))
        elif kind in ("seek", "reset"):
            to = e.get("to")
            if not (isinstance(to, str) or (isinstance(to, int) and not isinstance(to, bool))):
                raise Malformed(f"to is neither an offset nor a name: {to!r}")
            why = e.get("why")
            self.positions.append(
                Position(i, t, name, kind, _as_tp(e.get("tp")), to, why if isinstance(why, str) else None, e)
            )
        elif kind == "commit":
            offsets = e.get("offsets")
            if not isinstance(offsets, list):
                raise Malformed(f"offsets is not a list: {offsets!r}")
            error = e.get("error")
            ago = e.get("sent_ago_ms")
            if ago is not None:
                ago = _num(e, "sent_ago_ms")
            sent = t - ago if ago is not None else t  # not known: as late as it can have been
            member = e.get("member", "")
            for entry in offsets:
                if not (isinstance(entry, (list, tuple)) and len(entry) == 3):
                    raise Malformed(f"not a [topic, partition, offset]: {entry!r}")
                tp = _as_tp(entry[:2])
                offset = entry[2]
                if isinstance(offset, bool) or not isinstance(offset, int):
                    raise Malformed(f"offset is not an integer: {offset!r}")
                self.commits.append(
                    Commit(
                        i,
                        t,
                        name,
                        member if isinstance(member, str) else str(member),
                        generation,
                        tp,
                        offset,
                        sent,
                        None if error is None else str(error),
                        e,
                    )
                )
        elif kind == "transition":
            self.transitions[name].append(e)
        elif kind == "handled":
            digest = e.get("key")
            self.handled.append(
                Handled(
                    i,
                    t,
                    name,
                    _as_tp(e.get("tp")),
                    _int(e, "offset"),
                    digest if digest is None else str(digest),
                    _num(e, "t_start"),
                    str(e.get("outcome")),
                    e,
                )
            )
        elif kind == "parallel_restart":
            start = e.get("offset")
            ordering = e.get("ordering")
            self.restarts.append(
                Restart(
                    i,
                    t,
                    name,
                    _as_tp(e.get("tp")),
                    start if isinstance(start, int) else None,
                    ordering if ordering in ("key", "partition", "unordered") else "key",
                )
            )

    def _close(
        self, name: str, tp: TP, i: int, t: float, kind: str, open_: dict[tuple[str, TP], tuple[int, float, int]]
    ) -> None:
        opened = open_.pop((name, tp), None)
        if opened is not None:
            self.intervals.append(Interval(name, tp, opened[0], opened[1], i, t, kind, opened[2]))

    def restricted(self, names: set[str]) -> Timeline:
        """The same lines, of the consumers named only."""
        return Timeline(
            self.events,
            {n: c for n, c in self.consumers.items() if n in names},
            [r for r in self.reads if r.consumer in names],
            [s for s in self.skips if s.consumer in names],
            [p for p in self.positions if p.consumer in names],
            [c for c in self.commits if c.consumer in names],
            [v for v in self.intervals if v.consumer in names],
            [h for h in self.handled if h.consumer in names],
            [r for r in self.restarts if r.consumer in names],
            {n: ts for n, ts in self.transitions.items() if n in names},
            self.malformed,
            self.unknown_events,
        )

    def groups(self) -> dict[GroupKey, set[str]]:
        out: dict[GroupKey, set[str]] = defaultdict(set)
        for c in self.consumers.values():
            out[c.group].add(c.name)
        return dict(out)

    def scopes(self) -> list[tuple[GroupKey, Timeline]]:
        """One timeline per group (the rules that compare consumers compare those of one group): each holds
        that group's consumers and every consumer without a ``started`` line (it could be in any group)."""
        groups = self.groups()
        unknown = groups.pop(NoStart.UNKNOWN, set())
        if len(groups) <= 1:
            return [(next(iter(groups), NoStart.UNKNOWN), self)]
        return [(g, self.restricted(names | unknown)) for g, names in sorted(groups.items(), key=lambda kv: str(kv[0]))]


def _pair(value: object) -> tuple[int, int]:
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and value[0] <= value[1]
    ):
        return (value[0], value[1])
    raise Malformed(f"offsets is not [first, last]: {value!r}")


def as_timeline(events: Timeline | Iterable[object]) -> Timeline:
    return events if isinstance(events, Timeline) else Timeline.build(events)
