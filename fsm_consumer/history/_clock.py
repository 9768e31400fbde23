"""Whether the histories can be judged together: one member per name, one clock for all.

The rules order every line by ``t`` (``time.monotonic()`` ms). Lines of two processes compare only if their
monotonic clocks are one: the same machine and boot, and no time namespace between them (a container may
have its own). Each line also carries ``wall`` (Unix time of the same instant), so a history says its own
clock base: ``wall * 1000 - t`` is the same on every line of one clock, up to the wall clock's slewing. Lines
whose bases differ (another host, a container with its own clock, a file whose ``t`` was shifted) or whose
``started`` lines name different boots are refused, never ordered as if they shared a clock. So are two
processes under one consumer name (two containers, both ``worker@1#1``): the name is a member's identity.
"""

from __future__ import annotations

from ._load import HistoryError
from ._model import Timeline, fmt_t

#: how far two readings of one clock base may differ: the jitter between reading the two clocks, plus the
#: wall clock's slewing (NTP moves it at most 500 parts per million; 1 ms per s allowed)
SLACK_MS = 100.0
SLEW = 0.001


class IncomparableHistories(HistoryError):
    """Histories the checker will not judge together: a consumer name shared by two processes, or lines
    whose ``t`` are not of one clock. The message names each problem."""


def _slack(dt_ms: float) -> float:
    return SLACK_MS + SLEW * abs(dt_ms)


def comparable(tl: Timeline) -> None:
    """Raise ``IncomparableHistories`` unless every consumer is one process and every line one clock."""
    problems: list[str] = []
    for c in tl.consumers.values():
        if len(c.files) > 1:
            problems.append(
                f"{c.name}: its lines are in {len(c.files)} files ({', '.join(sorted(c.files))}): two processes "
                "under one consumer name (or a copied file)"
            )
        if len(c.started_at) > 1:
            shown = ", ".join(fmt_t(t) for t in c.started_at[:3])
            problems.append(f"{c.name}: started {len(c.started_at)} times ({shown}): two consumers under one name")
    base: dict[str, tuple[float, float]] = {}  # consumer -> (t, wall ms - t) of its first line with a wall time
    no_wall: dict[str, int] = {}
    for e in tl.events:
        name, t, wall = e["consumer"], float(e["t"]), e.get("wall")
        if isinstance(wall, bool) or not isinstance(wall, (int, float)):
            no_wall[name] = no_wall.get(name, 0) + 1
            continue
        offset = float(wall) * 1000.0 - t
        first = base.setdefault(name, (t, offset))
        if abs(offset - first[1]) > _slack(t - first[0]) and not any(name in p for p in problems):
            problems.append(
                f"{name}: at {fmt_t(t)} its t and wall disagree by {offset - first[1]:+.0f} ms against its line at "
                f"{fmt_t(first[0])}: its t is not one clock (shifted lines, or the wall clock stepped)"
            )
    if len(tl.consumers) > 1:
        for name, n in sorted(no_wall.items()):
            problems.append(f"{name}: {n} line(s) without a wall time: whether its t is the others' clock is unknown")
    boots = {c.name: c.clock.get("boot_id") for c in tl.consumers.values() if c.clock.get("boot_id")}
    if len(set(boots.values())) > 1:
        shown = "; ".join(f"{n}: {b}" for n, b in sorted(boots.items())[:4])
        problems.append(f"the histories were written under different boots or machines (boot ids {shown})")
    if base:
        ref_name, (ref_t, ref_offset) = min(base.items(), key=lambda kv: kv[1][0])
        for name, (t, offset) in sorted(base.items()):
            if abs(offset - ref_offset) > _slack(t - ref_t):
                problems.append(
                    f"{name}: its clock base differs from {ref_name}'s by {(offset - ref_offset) / 1000.0:+.3f} s: its "
                    "t is another clock's (another host, a container's own clock, or shifted)"
                )
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise IncomparableHistories("the histories cannot be judged together: " + "; ".join(problems[:5]) + more)
