"""A ``CheckResult`` as text: the summary, each rule's verdict, then the violations with the transitions
of their consumers around them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ._model import Event, fmt_t

if TYPE_CHECKING:
    from ._violation import Violation


class _Result(Protocol):
    """What the report reads of a CheckResult (a protocol: _check imports this module, not back)."""

    violations: list[Violation]
    summary: dict[str, Any]

    @property
    def ok(self) -> bool: ...
    def by_rule(self) -> dict[str, list[Violation]]: ...


def _runs(numbers: list[int]) -> str:
    """1,2,3,5 -> "1..3,5"."""
    out: list[str] = []
    for n in numbers:
        if out and out[-1].split("..")[-1] == str(n - 1):
            out[-1] = f"{out[-1].split('..')[0]}..{n}"
        else:
            out.append(str(n))
    return ",".join(out)


def _consumer_line(name: str, c: Mapping[str, Any]) -> str:
    group = f"group {c['group']!r}" if c["started"] and c["group"] is not None else "no group"
    if not c["started"]:
        group = "no started line"
    gens = _runs(c["generations"]) or "none"
    return (
        f"  {name} (client {c['client']}, {group}): read {c['records_read']} records in {c['reads']} reads, "
        f"commits {c['commits']} (failed {c['commits_failed']}), assigned/revoked/lost/expired "
        f"{c['assigned']}/{c['revoked']}/{c['lost']}/{c['session_expired']}, generations {gens}"
        f"{', handled ' + str(c['handled']) if c['handled'] else ''}{'' if c['closed'] else ', not closed'}"
    )


def _transition(e: Event) -> str:
    return (
        f"{fmt_t(float(e['t']))} {e.get('consumer')} {e.get('machine')}: {e.get('source')} "
        f"--{e.get('trigger')}--> {e.get('dest')}"
    )


def _violation(v: Violation, transitions: int) -> list[str]:
    lines = [f"  {v.message}"]
    if v.t is None or not v.consumers:
        return lines
    if not v.transitions:
        lines.append(f"    (no transition of {', '.join(v.consumers)} near {fmt_t(v.t)})")
        return lines
    t = v.t
    near = sorted(v.transitions, key=lambda e: abs(float(e["t"]) - t))[:transitions]
    near.sort(key=lambda e: float(e["t"]))
    more = len(v.transitions) - len(near)
    lines.append(
        f"    transitions of {', '.join(v.consumers)} around {fmt_t(v.t)}"
        f"{f' (the {len(near)} nearest of {len(v.transitions)})' if more else ''}:"
    )
    lines.extend(f"      {_transition(e)}" for e in near)
    return lines


def format_result(result: _Result, limit: int = 10, transitions: int = 10) -> str:
    s = result.summary
    out: list[str] = []
    if "files" in s:
        line = f"histories: {s['files']} file(s), {s['file_lines']} lines"
        if s["torn"]:
            line += f"; {s['torn']} torn last line(s) passed over (what a process killed while writing leaves)"
        out.append(line)
        if s["damaged"]:
            out.append(
                f"WARNING: {s['damaged']} line(s) inside a file did not parse: the history is not whole, and the "
                "rules cannot vouch for what those lines held"
            )
        out.extend(f"  {u}" for u in s["unparseable_sample"])
    if not s["lines"]:
        out.append("WARNING: no line has the fields of a history line (t, consumer, event): nothing was checked")
    if s["malformed"]:
        out.append(f"WARNING: {s['malformed']} line(s) lack fields their event needs and were not checked:")
        out.extend(f"  {m}" for m in s["malformed_sample"])
    if s["unknown_events"]:
        shown = ", ".join(f"{name} ({n})" for name, n in list(s["unknown"].items())[:10])
        out.append(f"{s['unknown_events']} line(s) of unknown events, passed over: {shown}")
    if s.get("source_lines"):
        out.append(f"{s['source_lines']} line(s) of a data source (the Spark source's own), passed over")
    groups = ", ".join(s["groups"]) or "none named"
    out.append(f"consumers: {len(s['consumers'])} (groups: {groups})")
    out.extend(_consumer_line(name, c) for name, c in sorted(s["consumers"].items()))
    out.append(
        f"records read {s['records_read']} (distinct offsets {s['distinct_offsets']}, re-reads {s['rereads']}) "
        f"on {len(s['partitions_read'])} partition(s); commits {s['commits']} answered, {s['commits_failed']} failed "
        f"({s['committed_offsets']} partition offsets committed); handler calls {s['handled']}"
    )
    out.append("rules:")
    for rule, r in s["rules"].items():
        count = f"{r['violations']} violation(s)" if r["status"] != "not checked" else "-"
        out.append(f"  {rule}  {r['status'].upper():<11} {count:<15} {r['title']}")
        if r["note"]:
            out.append(f"      {r['note']}")
    if not result.violations:
        out.append("no violations" if result.ok else "no violations, but the history was not checked whole (above)")
    for rule, vs in result.by_rule().items():
        if not vs:
            continue
        out.append(f"{rule}: {len(vs)} violation(s)")
        for v in vs[:limit]:
            out.extend(_violation(v, transitions))
        if len(vs) > limit:
            out.append(f"  ... and {len(vs) - limit} more")
    return "\n".join(out)
