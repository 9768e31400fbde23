"""History lines made typed and ordered (docs/histories.md): what the rules work on.

``Timeline.build`` takes the parsed lines of any number of consumers, orders them by ``t`` (ties keep the
order given: file by file, line by line), numbers them (``i``: a position in that order, so that lines of
equal ``t`` still compare) and keeps what the rules need: reads, skips, seeks and resets, commits expanded
per partition, every consumer's ownership intervals, handler runs, transitions. A line it cannot use
(a field missing or of the wrong type) is listed in ``malformed`` and not checked; an event it does not
know is counted by name in ``unknown``.

Who owns what, and when a read was legitimate, is not decided here but in ``_ownership`` (one model for
every rule and for the picture).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._lines import (
    ASSIGN,
    ENDS_OWNERSHIP,
    GROUP,
    KNOWN_EVENTS,
    SUBSCRIBE,
    TP,
    Commit,
    Event,
    GroupKey,
    Handled,
    Interval,
    Malformed,
    NoStart,
    Position,
    Read,
    Restart,
    Skip,
    as_tp,
    commit_lines,
    fmt_group,
    fmt_range,
    fmt_t,
    fmt_tp,
    integer,
    is_int,
    num,
    read_line,
    string,
    tps_of,
)
from ._share_lines import SHARE_EVENTS, ShareAck, ShareHand, ShareLost, share_line


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
    config: Mapping[str, Any] = field(default_factory=dict)  # its started line's
    files: set[str] = field(default_factory=set)  # the files its lines came from (load()'s)
    started_at: list[float] = field(default_factory=list)  # the t of each of its started lines
    clock: Mapping[str, Any] = field(default_factory=dict)  # its started line's clock base (boot id, host)
    pid: int | None = None
    kind: str = "consumer"  # its started line's: "share" for a share group's member


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
    unknown: Counter[str] = field(default_factory=Counter)  # events this checker does not know, by name
    sources: int = 0  # lines of a data source (the Spark source's own), passed over
    files: list[str | None] = field(default_factory=list)  # per event: the file it came from (None: not known)
    share: list[ShareHand | ShareAck | ShareLost] = field(default_factory=list)  # share consumers' lines, in order

    @property
    def unknown_events(self) -> int:
        return sum(self.unknown.values())

    @classmethod
    def build(cls, lines: Iterable[object], files: Sequence[str | None] | None = None) -> Timeline:
        """``files``: per line, the file it came from (``History.sources``), so that one consumer name in two
        files is seen as two processes, not one."""
        good: list[tuple[Event, str | None]] = []
        malformed: list[tuple[str, Event]] = []
        sources = 0
        for n, line in enumerate(lines):
            if not isinstance(line, Mapping):
                malformed.append(("not a JSON object", {"line": line}))
                continue
            if "consumer" not in line and isinstance(line.get("role"), str):
                sources += 1  # a source's own line (the Spark source's batches, spark/_history.py): passed over
                continue
            try:
                num(line, "t")
                string(line, "consumer")
                string(line, "event")
            except Malformed as e:
                malformed.append((str(e), line))
                continue
            good.append((line, files[n] if files is not None and n < len(files) else None))
        good.sort(key=lambda ef: float(ef[0]["t"]))  # stable: equal times keep the order given
        tl = cls([e for e, _ in good], {}, [], [], [], [], [], [], [], defaultdict(list), malformed)
        tl.files = [f for _, f in good]
        tl.sources = sources
        tl._index()
        return tl

    def _index(self) -> None:
        open_: dict[tuple[str, TP], tuple[int, float, int, str]] = {}  # (consumer, tp) -> assigned (i, t, gen, by)
        in_group: set[str] = set()  # consumers with a line that makes them members of their group
        for i, e in enumerate(self.events):
            name, kind, t = e["consumer"], e["event"], float(e["t"])
            info = self.consumers.get(name)
            if info is None:
                info = self.consumers[name] = ConsumerInfo(
                    name, str(e.get("client", name.partition("@")[0])), NoStart.UNKNOWN, None, i, i, t, t
                )
            if self.files[i] is not None:
                info.files.add(str(self.files[i]))
            info.last_i, info.last_t = i, t
            info.counts[kind] += 1
            generation = e.get("generation", -1)
            if is_int(generation) and generation >= 0:
                info.generations.add(generation)
            if kind not in KNOWN_EVENTS and kind not in SHARE_EVENTS:
                self.unknown[kind] += 1
                continue
            if kind in ("joined", "commit", *SHARE_EVENTS) or (kind == "assigned" and e.get("by", GROUP) == GROUP):
                in_group.add(name)  # a share consumer is its share group's member from its first line
            try:
                self._one(i, t, name, kind, e, info, open_)
            except Malformed as err:
                self.malformed.append((f"{kind}: {err}", e))
        for info in self.consumers.values():
            if isinstance(info.group, str) and info.name not in in_group and info.kind != "share":
                # it carries a group id (a Spark source's task consumer does, for brokers that authorize by
                # group) but never joined the group nor committed to it: a group-less reader to the rules
                info.carried_group, info.group = info.group, None
        for (name, tp), (start_i, start_t, generation, by) in open_.items():
            info = self.consumers[name]
            self.intervals.append(
                Interval(name, tp, start_i, start_t, info.last_i + 1, info.last_t, "its last line", generation, by)
            )
        self.intervals.sort(key=lambda v: (v.tp, v.start_i))

    def _one(
        self,
        i: int,
        t: float,
        name: str,
        kind: str,
        e: Event,
        info: ConsumerInfo,
        open_: dict[tuple[str, TP], tuple[int, float, int, str]],
    ) -> None:
        generation = e.get("generation", -1)
        generation = generation if is_int(generation) else -1
        if kind == "started":
            info.started_at.append(t)
            if len(info.started_at) == 1:
                group = e.get("group")
                if group is not None and not isinstance(group, str):
                    raise Malformed(f"group is not a string: {group!r}")
                config = e.get("config")
                info.config = config if isinstance(config, Mapping) else {}
                instance = info.config.get("group_instance_id")
                info.group, info.instance_id = group, instance if isinstance(instance, str) else None
                clock = e.get("clock")
                info.clock = clock if isinstance(clock, Mapping) else {}
                pid = e.get("pid")
                info.pid = pid if is_int(pid) else None
                info.kind = "share" if e.get("kind") == "share" else "consumer"
        elif kind == "assigned":
            by = e.get("by", GROUP)
            if by not in (GROUP, ASSIGN, SUBSCRIBE):
                raise Malformed(f"by is not group, assign or subscribe: {by!r}")
            for tp in tps_of(e):
                open_.setdefault((name, tp), (i, t, generation, by))
        elif kind in ENDS_OWNERSHIP:
            for tp in tps_of(e):
                self._close(name, tp, i, t, kind, open_)
        elif kind == "closed":
            info.closed = True
            for key in [k for k in open_ if k[0] == name]:
                self._close(name, key[1], i, t, kind, open_)
        elif kind == "read":
            self.reads.append(read_line(i, t, name, generation, e))
        elif kind == "skip":
            self.skips.append(Skip(i, t, name, as_tp(e.get("tp")), integer(e, "from"), integer(e, "to"), e))
        elif kind in ("seek", "reset"):
            to = e.get("to")
            if not isinstance(to, (str, int)) or isinstance(to, bool):
                raise Malformed(f"to is neither an offset nor a name: {to!r}")
            why = e.get("why")
            self.positions.append(
                Position(i, t, name, kind, as_tp(e.get("tp")), to, why if isinstance(why, str) else None, e)
            )
        elif kind == "commit":
            self.commits.extend(commit_lines(i, t, name, generation, e))
        elif kind == "transition":
            self.transitions[name].append(e)
        elif kind in SHARE_EVENTS:
            self.share.append(share_line(i, t, name, kind, e))
        elif kind == "handled":
            digest = e.get("key")
            self.handled.append(
                Handled(
                    i,
                    t,
                    name,
                    as_tp(e.get("tp")),
                    integer(e, "offset"),
                    digest if digest is None else str(digest),
                    num(e, "t_start"),
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
                    as_tp(e.get("tp")),
                    start if isinstance(start, int) else None,
                    ordering if ordering in ("key", "partition", "unordered") else "key",
                )
            )

    def _close(
        self,
        name: str,
        tp: TP,
        i: int,
        t: float,
        kind: str,
        open_: dict[tuple[str, TP], tuple[int, float, int, str]],
    ) -> None:
        opened = open_.pop((name, tp), None)
        if opened is not None:
            self.intervals.append(Interval(name, tp, opened[0], opened[1], i, t, kind, opened[2], opened[3]))

    def group_of(self, name: str) -> GroupKey:
        return self.consumers[name].group

    def same_group(self, a: str, b: str) -> bool:
        """Whether two consumers' lines are compared (one group; a consumer without a started line could be
        in any)."""
        ga, gb = self.group_of(a), self.group_of(b)
        if ga is NoStart.UNKNOWN or gb is NoStart.UNKNOWN:
            return True
        return ga == gb and ga is not None

    def groups(self) -> dict[GroupKey, set[str]]:
        out: dict[GroupKey, set[str]] = defaultdict(set)
        for c in self.consumers.values():
            out[c.group].add(c.name)
        return dict(out)


class Loaded(Protocol):
    """What a Timeline is built of a loaded ``History`` (``_load``, which imports this module)."""

    events: list[dict[str, Any]]
    sources: list[str]


def as_timeline(events: Timeline | Loaded | Iterable[object]) -> Timeline:
    """A Timeline of the lines, or of a loaded ``History`` (its lines with the file of each), or itself."""
    if isinstance(events, Timeline):
        return events
    if not isinstance(events, Iterable):
        return Timeline.build(events.events, events.sources)
    return Timeline.build(events)


__all__ = [
    "ASSIGN",
    "ENDS_OWNERSHIP",
    "GROUP",
    "KNOWN_EVENTS",
    "SUBSCRIBE",
    "TP",
    "Commit",
    "ConsumerInfo",
    "Event",
    "GroupKey",
    "Handled",
    "Interval",
    "Malformed",
    "NoStart",
    "Position",
    "Read",
    "Restart",
    "Skip",
    "Timeline",
    "as_timeline",
    "fmt_group",
    "fmt_range",
    "fmt_t",
    "fmt_tp",
]
