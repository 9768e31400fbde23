"""Commands over the specs: check them, render their diagrams, report their test coverage."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..spec import SpecError, all_spec_paths, load_spec, specs_dir
from ..spec._coverage import coverage, merge_records
from ..spec._diagram import have_dot, render_all


def _load_all(directory: str | None):
    specs, failed = [], False
    for path in all_spec_paths(directory):
        try:
            specs.append(load_spec(path))
        except SpecError as exc:
            print(f"ERROR {exc}", file=sys.stderr)
            failed = True
    return specs, failed


def check_specs(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="check-specs", description="Check every spec; one line per machine.")
    ap.add_argument("--specs", help="specs directory (default: the project's)")
    args = ap.parse_args(argv)
    specs, failed = _load_all(args.specs)
    for s in specs:
        timeouts = sum(len(st.timeouts) for st in s.states.values())
        print(f"{s.machine}: {len(s.states)} states, {len(s.transitions)} transitions, {timeouts} timeouts, "
              f"{len(s.durations)} durations  ({s.file})")
    if not specs and not failed:
        print("no specs found", file=sys.stderr)
        return 1
    return 1 if failed else 0


def render_diagrams(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="render-diagrams",
                                 description="Write diagrams/<machine>.dot, .svg and .mmd from the specs.")
    ap.add_argument("--specs", help="specs directory (default: the project's)")
    ap.add_argument("--out", help="diagrams directory (default: diagrams/ beside specs/)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming stale or missing files")
    args = ap.parse_args(argv)
    specs, failed = _load_all(args.specs)
    if failed:
        return 1
    out = Path(args.out) if args.out else Path(args.specs or specs_dir()).resolve().parent / "diagrams"
    svg = have_dot()
    if not svg:
        print("note: Graphviz's dot program is not installed (Debian/Ubuntu: apt-get install graphviz; "
              "macOS: brew install graphviz): " + ("checking .dot and .mmd only, not .svg" if args.check
                                                   else "writing .dot and .mmd, no .svg"), file=sys.stderr)
    stale = []
    for s in specs:
        for suffix, content in render_all(s, svg=svg).items():
            target = out / f"{s.machine}{suffix}"
            current = target.read_text(encoding="utf-8") if target.is_file() else None
            if current == content:
                continue
            if args.check:
                stale.append(f"{target} ({'missing' if current is None else 'differs from its spec'})")
            else:
                out.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
                print(f"wrote {target}")
    if stale:
        print("stale diagrams (run tools/render-diagrams):\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    if args.check:
        print(f"diagrams up to date ({len(specs)} machines)")
    return 0


def spec_coverage(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="spec-coverage",
                                 description="Which spec transitions the last pytest run never fired.")
    ap.add_argument("--records", default=".fsm-coverage", help="directory the pytest plugin wrote")
    ap.add_argument("--kind", help="count only tests of this kind (unit, integration, spark)")
    ap.add_argument("--machines", help="comma-separated machines (default: all shipped specs)")
    ap.add_argument("--fail-under", type=float, default=None, help="exit 1 if any machine is below this percent")
    args = ap.parse_args(argv)
    if not Path(args.records).is_dir():
        print(f"no records in {args.records}: run pytest first (the tests' plugin writes them)", file=sys.stderr)
        return 1
    records = merge_records(Path(args.records))
    specs, failed = _load_all(None)
    wanted = set(args.machines.split(",")) if args.machines else None
    below = False
    for s in specs:
        if wanted and s.machine not in wanted:
            continue
        covered, missing = coverage(s, records, args.kind)
        pct = 100.0 * len(covered) / len(s.transitions)
        print(f"{s.machine}: {len(covered)}/{len(s.transitions)} transitions exercised ({pct:.1f}%)"
              + (f" by {args.kind} tests" if args.kind else ""))
        for i in missing:
            t = s.transitions[i]
            print(f"  never fired: {t.label}  ({s.file}:{t.line})")
        if args.fail_under is not None and pct < args.fail_under:
            below = True
    return 1 if (failed or below) else 0
