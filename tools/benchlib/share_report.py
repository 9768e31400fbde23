"""tools/bench share's report: ratios between its rows, the markdown table, and the project's acceptance checks
(each with the figures it compared, pass or fail)."""

from __future__ import annotations

from .share import CLIENTS, GROUP_MODE


def _key(r: dict) -> tuple:
    return r["client"], r["mode"], r["members"], r["work_ms"]


def _rate(rows: list[dict], client: str, mode: str, n: int, work: int) -> float | None:
    return next(
        (r["records_per_s"] for r in rows if r["bench"] == "share" and _key(r) == (client, mode, n, work)), None
    )


def add_ratios(rows: list[dict]) -> None:
    """Each drain row's records/s over: fsm's one member (same mode and W), Java's and confluent-kafka's (same
    mode, N and W). The consumer group's rows compare with the implicit mode's."""
    for r in rows:
        if r["bench"] != "share":
            continue
        mode = "implicit" if r["mode"] == GROUP_MODE else r["mode"]
        refs = {
            "vs_one_fsm": ("fsm", mode, 1, r["work_ms"]),
            "vs_java": ("java", mode, r["members"], r["work_ms"]),
            "vs_confluent": ("confluent", mode, r["members"], r["work_ms"]),
        }
        for name, ref in refs.items():
            base = _rate(rows, *ref)
            r[name] = round(r["records_per_s"] / base, 2) if r.get("records_per_s") and base else None


def table(rows: list[dict]) -> str:
    """One line per (client, mode, N, W): the drain's records/s (the median run's, and each run's), when the first
    records were processed after the go, the CPU the members (together) and the broker used from the go to the
    drain's end (medians), and p50/p99 where a latency run had the same."""
    lat = {_key(r): r for r in rows if r["bench"] == "share-latency"}
    lines = [
        "| client | mode | N | W ms | records | max poll | records/s | first records ms | CPU ms members / broker "
        "| active members | p50 ms | p99 ms | vs 1 fsm member | vs Java | vs confluent |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    done = set()

    def cell(x) -> str:
        return "-" if x is None else f"{x:,}" if isinstance(x, int) else f"{x}"

    for r in rows:
        key = _key(r)
        if key in done:
            continue
        done.add(key)
        d = r if r["bench"] == "share" else {}
        q = lat.get(key, {})
        rate = "FAILED" if d.get("error") else cell(d.get("records_per_s"))
        if d.get("per_run"):  # the median of several runs: each run's too
            rate += " (" + " / ".join(cell(x) for x in d["per_run"]) + ")"
        cpu = f"{cell(d.get('members_cpu_ms'))} / {cell(d.get('broker_cpu_ms'))}"
        latency = [cell(q.get("p50_ms")), cell(q.get("p99_ms"))] if not q.get("error") else ["FAILED", "FAILED"]
        lines.append(
            f"| {CLIENTS[r['client']]} | {r['mode']} | {r['members']} | {r['work_ms']} | {cell(d.get('records'))} "
            f"| {r['max_poll_records']} | {rate} | {cell(d.get('first_ms'))} | {cpu} | {cell(d.get('active_members'))} "
            f"| {latency[0]} | {latency[1]} "
            f"| {cell(d.get('vs_one_fsm'))} | {cell(d.get('vs_java'))} | {cell(d.get('vs_confluent'))} |"
        )
    failed = [r for r in rows if r.get("error")]
    if failed:
        lines += ["", "failed runs:"] + [
            f"- {r['bench']} {r['client']} {r['mode']} N={r['members']} W={r['work_ms']}: {r['error']}" for r in failed
        ]
    if lat:
        lines += [
            "",
            "p50/p99: produce-to-processed (end of the record's work minus its CreateTime) at "
            f"{next(iter(lat.values())).get('rate')} records/s for {next(iter(lat.values())).get('seconds')} s",
        ]
    return "\n".join(lines)


def acceptance(rows: list[dict]) -> str:
    """The project's targets, each with what was measured: 8 fsm members at 1 ms of work >= 6x one; fsm >= Java
    and confluent-kafka at every N (every W and mode measured); one fsm member's drain at W=0 >= both."""
    out = []
    modes = sorted({r["mode"] for r in rows if r["bench"] == "share" and r["client"] == "fsm"})

    def verdict(ok: bool | None) -> str:
        return "n/a (not measured)" if ok is None else "PASS" if ok else "FAIL"

    for mode in modes:
        one, eight = _rate(rows, "fsm", mode, 1, 1), _rate(rows, "fsm", mode, 8, 1)
        ok = None if not (one and eight) else eight >= 6 * one
        got = f"{eight / one:.2f}x ({eight:,} vs {one:,} records/s)" if one and eight else "-"
        out.append(f"- {verdict(ok)}: 8 fsm members, W=1 ms, {mode}: >= 6x one member: {got}")
    for other in ("java", "confluent"):
        short = []
        compared = 0
        for r in rows:
            if r["bench"] != "share" or r["client"] != "fsm":
                continue
            theirs = _rate(rows, other, r["mode"], r["members"], r["work_ms"])
            if theirs is None:
                continue
            compared += 1
            ours = r.get("records_per_s") or 0
            if ours < theirs:
                short.append(
                    f"{r['mode']} N={r['members']} W={r['work_ms']}: {ours:,} vs {theirs:,} ({ours / theirs:.2f}x)"
                )
        ok = None if not compared else not short
        out.append(
            f"- {verdict(ok)}: fsm >= {CLIENTS[other]} at every N ({compared} compared)"
            + (f"; short: {'; '.join(short)}" if short else "")
        )
        for mode in modes:
            ours, theirs = _rate(rows, "fsm", mode, 1, 0), _rate(rows, other, mode, 1, 0)
            ok = None if not (ours and theirs) else ours >= theirs
            got = f"{ours:,} vs {theirs:,} records/s ({ours / theirs:.2f}x)" if ours and theirs else "-"
            out.append(f"- {verdict(ok)}: one fsm member's drain, W=0, {mode} >= {CLIENTS[other]}: {got}")
    return "\n".join(out)
