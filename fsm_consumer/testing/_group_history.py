"""A checker over group members' logged histories (the JSON lines of ``_member_process``): proves that
no record was read by two members of one generation at once (R1), no partition was read by a member
while another held it, whatever their generations (E, compared by the clock: a member that has not
heard that its session ran out still believes in its old generation, which is the case that matters),
no commit moved backwards (R2) and no record below a completed commit was read again (R3). Pure:
events in, a ``CheckResult`` out.

Times are ``time.monotonic()`` milliseconds. On Linux that clock is system-wide, so the times of
different member processes on one machine can be compared, which R2 and R3 rely on.

Event lines (one JSON object each; ``t`` and ``member`` on every line):
  read          generation, member_id, tp [topic, p], offsets [first, last] (contiguous), count, t_poll_start
  commit        tp, offset, generation, t_start (t: when commit() returned without error)
  commit_failed error
  assigned | revoked | lost   partitions [[topic, p], ...], generation
  closed
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CheckResult",
    "Violation",
    "broker_commits_backwards",
    "check",
    "commits_backwards",
    "load_histories",
    "reads_below_commit",
    "shared_reads",
    "stale_reads",
    "summarize",
]

TP = tuple[str, int]


@dataclass(frozen=True)
class Violation:
    rule: str  # "R1", "R2" or "R3"
    message: str  # one line, for humans
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


@dataclass
class CheckResult:
    violations: list[Violation]
    summary: dict[str, Any]

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_rule(self) -> dict[str, list[Violation]]:
        out: dict[str, list[Violation]] = defaultdict(list)
        for v in self.violations:
            out[v.rule].append(v)
        return dict(out)

    def format(self, limit: int = 10) -> str:
        """The summary, then at most ``limit`` violations of each rule (and how many there were)."""
        s = self.summary
        lines = [
            f"records read {s['records_read']} (distinct {s['distinct_offsets']}, "
            f"re-reads {s['duplicates']}), commits {s['commits']} (failed {s['commits_failed']}), "
            f"reads outside a generation {s['reads_without_generation']}"
        ]
        if "held_twice" in s:
            lines.append(
                f"partitions held by two members at once {s['held_twice']} times; records the stale "
                f"member read meanwhile {s['stale_records']} (one poll under way at a freeze is allowed)"
            )
        for name, m in sorted(s["members"].items()):
            lines.append(
                f"  {name}: read {m['records_read']} in {m['read_lines']} lines, commits {m['commits']} "
                f"(failed {m['commits_failed']}), assigned/revoked/lost {m['assigned']}/{m['revoked']}/"
                f"{m['lost']}, generations {m['generations']}{'' if m['closed'] else ', not closed'}"
            )
        if "produced" in s:
            lines.append(
                f"produced {s['produced']}, never read {s['never_read']} "
                f"(lost: {s['lost']}, on partitions whose end was reached)"
            )
            for tp, p in sorted(s["partitions"].items()):
                if p["never_read"]:
                    lines.append(
                        f"  {tp}: {p['never_read']} never read, e.g. {p['never_read_sample']}"
                        f"{' (end reached: lost)' if p['end_reached'] else ''}"
                    )
        for key, value in sorted(s.get("context", {}).items()):
            lines.append(f"{key}: {value}")
        if not self.violations:
            lines.append("no violations")
        for rule, vs in sorted(self.by_rule().items()):
            lines.append(f"{rule}: {len(vs)} violation(s)")
            lines.extend(f"  {v.message}" for v in vs[:limit])
            if len(vs) > limit:
                lines.append(f"  ... and {len(vs) - limit} more")
        return "\n".join(lines)


def load_histories(paths: Iterable[str | Path]) -> tuple[list[dict], int]:
    """Every event of every file, and how many lines could not be parsed (a killed member may leave
    half a line at the end of its file)."""
    events, bad = [], 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    bad += 1
    return events, bad


def _tp(value) -> TP:
    return (value[0], int(value[1]))


def _fmt_tp(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


def _reads(events: Iterable[dict]) -> list[dict]:
    return [e for e in events if e.get("event") == "read"]


def _commits(events: Iterable[dict]) -> dict[TP, list[dict]]:
    """Successful commits per tp, ordered by completion time."""
    out: dict[TP, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("event") == "commit":
            out[_tp(e["tp"])].append(e)
    for commits in out.values():
        commits.sort(key=lambda c: c["t"])
    return out


class _CommitIndex:
    """For one tp: the largest offset committed by commits completed before a time, and that commit."""

    def __init__(self, commits: list[dict]) -> None:  # commits ordered by completion time
        self.times = [c["t"] for c in commits]
        self.best: list[dict] = []
        for c in commits:
            self.best.append(c if not self.best or c["offset"] > self.best[-1]["offset"] else self.best[-1])

    def before(self, t: float) -> dict | None:
        """The commit of the largest offset among those completed strictly before ``t``."""
        i = bisect.bisect_left(self.times, t)
        return self.best[i - 1] if i else None


def shared_reads(events: Iterable[dict]) -> list[Violation]:
    """R1: no (tp, offset) read by two different members that both logged it under one generation.

    A generation below 0 (not in the group) is no shared generation: such reads are only counted in
    the summary."""
    by_key: dict[tuple[TP, int], list[dict]] = defaultdict(list)
    for r in _reads(events):
        if r["generation"] >= 0:
            by_key[(_tp(r["tp"]), r["generation"])].append(r)
    out = []
    for (tp, generation), reads in sorted(by_key.items()):
        reads.sort(key=lambda r: r["offsets"][0])
        active: list[dict] = []  # reads whose range may still overlap the next ones
        for r in reads:
            first, last = r["offsets"]
            active = [a for a in active if a["offsets"][1] >= first]
            for a in active:
                if a["member"] == r["member"]:
                    continue
                lo, hi = first, min(last, a["offsets"][1])
                out.append(
                    Violation(
                        "R1",
                        (
                            f"{_fmt_tp(tp)} offsets {lo}..{hi} read by {a['member']} (poll {a['t_poll_start']:.0f}-"
                            f"{a['t']:.0f} ms) and by {r['member']} (poll {r['t_poll_start']:.0f}-{r['t']:.0f} ms), "
                            f"both in generation {generation}"
                        ),
                        dict(
                            tp=tp,
                            generation=generation,
                            offsets=(lo, hi),
                            members=(a["member"], r["member"]),
                            reads=(a, r),
                        ),
                    )
                )
            active.append(r)
    return out


def _ownership(events: list[dict]) -> dict[TP, list[tuple[float, float, str]]]:
    """Per tp, each member's ownership periods (start, end, member) as its own callbacks say: from
    ``assigned`` to ``revoked``/``lost`` (or ``closed``, or its last line)."""
    open_: dict[tuple[str, TP], float] = {}
    last: dict[str, float] = {}
    out: dict[TP, list[tuple[float, float, str]]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e["t"]):
        member, kind = e.get("member", "?"), e.get("event")
        last[member] = e["t"]
        if kind == "assigned":
            for tp in e["partitions"]:
                open_.setdefault((member, _tp(tp)), e["t"])
        elif kind in ("revoked", "lost"):
            for tp in e["partitions"]:
                start = open_.pop((member, _tp(tp)), None)
                if start is not None:
                    out[_tp(tp)].append((start, e["t"], member))
        elif kind == "closed":
            for (m, tp), start in list(open_.items()):
                if m == member:
                    out[tp].append((start, e["t"], member))
                    del open_[(m, tp)]
    for (member, tp), start in open_.items():
        out[tp].append((start, last[member], member))
    return out


def _stale_windows(events: list[dict]):
    """(tp, stale, fresh, start, end, reads of the stale member in [start, end]) for every time two members
    held one tp: the later was assigned it before the earlier gave it up."""
    reads: dict[tuple[str, TP], list[dict]] = defaultdict(list)
    for r in _reads(events):
        reads[(r["member"], _tp(r["tp"]))].append(r)
    for tp, periods in sorted(_ownership(events).items()):
        for a0, a1, stale in periods:
            for b0, b1, fresh in periods:
                if fresh != stale and a0 < b0 < a1:
                    end = min(a1, b1)
                    yield tp, stale, fresh, b0, end, [r for r in reads.get((stale, tp), ()) if b0 <= r["t"] <= end]


def stale_reads(events: Iterable[dict]) -> list[Violation]:
    """E: no partition is read by a member while another member holds it, whatever their generations.

    Two members hold a tp at once when the later one was assigned it before the earlier one gave it up
    (revoked, lost, closed): the earlier one is then stale (its session ran out while it was frozen or cut
    off, and it has not noticed). A stale member may return the one poll that was under way when it
    froze (its records were taken while its lease held); any further poll of the tp while the other
    holds it is a violation, and so is any poll at all that began after the other member got the tp."""
    out = []
    for tp, stale, fresh, start, end, inside in _stale_windows(list(events)):
        late = [r for r in inside if r["t_poll_start"] >= start]
        if len(inside) <= 1 and not late:
            continue
        count = sum(r["count"] for r in inside)
        out.append(
            Violation(
                "E",
                (
                    f"{_fmt_tp(tp)}: {stale} read {count} records (offsets {min(r['offsets'][0] for r in inside)}.."
                    f"{max(r['offsets'][1] for r in inside)}, {len(inside)} polls, {len(late)} begun after) "
                    f"while {fresh} "
                    f"held it ({fresh} assigned at {start:.0f} ms, {stale} gave it up at {end:.0f} ms or later)"
                ),
                dict(tp=tp, stale=stale, fresh=fresh, window=(start, end), records=count, polls=len(inside)),
            )
        )
    return out


def commits_backwards(events: Iterable[dict]) -> list[Violation]:
    """R2: per tp, a commit never lands below one that completed before it started.

    Commits whose [t_start, t] intervals overlap may complete in either order at the broker, so only a
    commit that *started* after a larger one completed is flagged."""
    out = []
    for tp, commits in sorted(_commits(events).items()):
        index = _CommitIndex(commits)
        for c in commits:
            prior = index.before(c["t_start"])
            if prior is not None and c["offset"] < prior["offset"]:
                out.append(
                    Violation(
                        "R2",
                        (
                            f"{_fmt_tp(tp)} commit of {c['offset']} by {c['member']} (gen {c.get('generation')}, "
                            f"{c['t_start']:.0f}-{c['t']:.0f} ms) after {prior['member']} committed {prior['offset']} "
                            f"(gen {prior.get('generation')}, completed {prior['t']:.0f} ms)"
                        ),
                        dict(tp=tp, commit=c, earlier=prior),
                    )
                )
    return out


def broker_commits_backwards(log: Iterable[tuple[str, int, int]]) -> list[Violation]:
    """C: in the broker's own commit log (Apache Kafka's ``__consumer_offsets``, in the order the commits
    took effect), no partition's committed offset ever goes down (no member seeks in these runs)."""
    best: dict[TP, int] = {}
    out = []
    for i, (topic, partition, offset) in enumerate(log):
        tp = (topic, partition)
        if tp in best and offset < best[tp]:
            out.append(
                Violation(
                    "C",
                    f"{_fmt_tp(tp)}: the broker's commit log goes from {best[tp]} down to {offset} (entry {i})",
                    dict(tp=tp, offset=offset, before=best[tp], entry=i),
                )
            )
        best[tp] = max(best.get(tp, offset), offset)
    return out


def reads_below_commit(events: Iterable[dict]) -> list[Violation]:
    """R3: after a commit of c on tp completed at t, no member reads an offset below c of tp in a poll
    that started after t."""
    events = list(events)
    indexes = {tp: _CommitIndex(cs) for tp, cs in _commits(events).items()}
    out = []
    for r in sorted(_reads(events), key=lambda r: r["t_poll_start"]):
        tp = _tp(r["tp"])
        index = indexes.get(tp)
        prior = index.before(r["t_poll_start"]) if index is not None else None
        first, last = r["offsets"]
        if prior is not None and first < prior["offset"]:
            hi = min(last, prior["offset"] - 1)
            out.append(
                Violation(
                    "R3",
                    (
                        f"{_fmt_tp(tp)} offsets {first}..{hi} read by {r['member']} (gen {r['generation']}, poll "
                        f"{r['t_poll_start']:.0f}-{r['t']:.0f} ms) below the commit of {prior['offset']} by "
                        f"{prior['member']} (gen {prior.get('generation')}, completed {prior['t']:.0f} ms)"
                    ),
                    dict(tp=tp, offsets=(first, hi), read=r, commit=prior),
                )
            )
    return out


def summarize(
    events: Iterable[dict], produced: Mapping[TP, int | Iterable[int]] | None = None, sample: int = 10
) -> dict[str, Any]:
    """Totals (no verdicts): reads, distinct offsets, re-reads, commits, generations per member, and
    with ``produced`` (tp -> record count from offset 0, or the offsets) what was never read."""
    members: dict[str, dict[str, Any]] = defaultdict(
        lambda: dict(
            records_read=0,
            read_lines=0,
            commits=0,
            commits_failed=0,
            assigned=0,
            revoked=0,
            lost=0,
            generations=set(),
            closed=False,
        )
    )
    seen: dict[TP, set[int]] = defaultdict(set)
    total = outside = 0
    for e in events:
        m = members[e.get("member", "?")]
        kind = e.get("event")
        if isinstance(e.get("generation"), int) and e["generation"] >= 0:
            m["generations"].add(e["generation"])
        if kind == "read":
            first, last = e["offsets"]
            m["records_read"] += last - first + 1
            m["read_lines"] += 1
            total += last - first + 1
            if e["generation"] < 0:
                outside += last - first + 1
            seen[_tp(e["tp"])].update(range(first, last + 1))
        elif kind == "commit":
            m["commits"] += 1
        elif kind == "commit_failed":
            m["commits_failed"] += 1
        elif kind in ("assigned", "revoked", "lost"):
            m[kind] += 1
        elif kind == "closed":
            m["closed"] = True
    for m in members.values():
        m["generations"] = sorted(m["generations"])
    distinct = sum(len(s) for s in seen.values())
    out: dict[str, Any] = dict(
        records_read=total,
        distinct_offsets=distinct,
        duplicates=total - distinct,
        commits=sum(m["commits"] for m in members.values()),
        commits_failed=sum(m["commits_failed"] for m in members.values()),
        reads_without_generation=outside,
        members=dict(members),
    )
    if produced is not None:
        partitions: dict[str, dict[str, Any]] = {}
        never = lost = 0
        for tp, made in produced.items():
            tp = _tp(tp)
            offsets = set(range(made)) if isinstance(made, int) else set(made)
            missing = sorted(offsets - seen[tp])
            # a gap counts as loss only if the members got past it to the end of what was produced
            end_reached = bool(offsets) and max(seen[tp], default=-1) >= max(offsets)
            partitions[_fmt_tp(tp)] = dict(
                produced=len(offsets),
                never_read=len(missing),
                never_read_sample=missing[:sample],
                end_reached=end_reached,
            )
            never += len(missing)
            lost += len(missing) if end_reached else 0
        out.update(
            produced=sum(p["produced"] for p in partitions.values()), never_read=never, lost=lost, partitions=partitions
        )
    return out


def check(
    events: Iterable[dict],
    produced: Mapping[TP, int | Iterable[int]] | None = None,
    context: Mapping[str, Any] | None = None,
) -> CheckResult:
    """All rules over the members' events; ``context`` (e.g. what the run did) is shown by format()."""
    events = list(events)
    violations = shared_reads(events) + stale_reads(events) + commits_backwards(events) + reads_below_commit(events)
    summary = summarize(events, produced)
    windows = list(_stale_windows(events))
    summary["held_twice"] = len(windows)  # times a tp was held by two members (the stale one frozen)
    summary["stale_records"] = sum(r["count"] for *_, inside in windows for r in inside)
    if context:
        summary["context"] = dict(context)
    return CheckResult(violations, summary)
