"""Commands over the specs: check them, render their diagrams, report their test coverage."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..machines import Spec, SpecError, all_spec_paths, load_spec, schema_path, specs_dir
from ..machines._checked_record import record_is_current, write_record
from ..machines._coverage import broker_gaps, coverage, merge_records
from ..machines._diagram import have_dot, render_all
from ..machines._paths import specs_are_the_users
from ..machines._schema import check_schema_file


def _load_all(directory: str | None, *, validate_always: bool = False) -> tuple[list[Spec], bool]:
    specs: list[Spec] = []
    failed = False
    for path in all_spec_paths(directory):
        try:
            specs.append(load_spec(path, validate_always=validate_always))
        except SpecError as exc:
            print(f"ERROR {exc}", file=sys.stderr)
            failed = True
    return specs, failed


def check_specs(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="fsm-consumer check-specs", description="Check every spec; one line per machine.")
    ap.add_argument("--specs", help="specs directory (default: the project's)")
    ap.add_argument(
        "--record",
        action="store_true",
        help="after checking the project's specs, record their digests (machines/_checked.py): a Consumer "
        "then skips the schema check of those texts",
    )
    ap.add_argument(
        "--explore",
        action="store_true",
        help="also walk every reachable state of each machine (every trigger arriving anywhere, every timer and "
        "timeout firing, every condition either way) and check totality, that a terminal state stays reachable, "
        "and the spec's invariants; a violation is printed with the shortest trigger sequence to it (exit 1)",
    )
    ap.add_argument(
        "--draw",
        metavar="DIR",
        help="with --explore: write each counterexample as a diagram of its machine with the path in red "
        "(DIR/<machine>.<property>.<name>.dot, and .svg when Graphviz's dot is installed)",
    )
    ap.add_argument(
        "--mutants",
        action="store_true",
        help="break each spec in small ways (drop a transition, a timeout, a timer's state or restart; move a "
        "state to another attribute value) and report how many of each kind the checks and the exploration "
        "find; exit 1 when a kind is never found",
    )
    ap.add_argument(
        "files",
        nargs="*",
        help="spec files to check instead of a directory's (yours, anywhere: each named like its machine)",
    )
    args = ap.parse_args(argv)
    if args.files:
        return _check_files(args)
    try:
        check_schema_file()  # the schema itself: a Consumer trusts the shipped one (see machines/_schema.py)
    except SpecError as exc:
        print(f"ERROR {exc}", file=sys.stderr)
        return 1
    specs, failed = _load_all(args.specs, validate_always=True)
    the_projects = args.specs is None and not specs_are_the_users()
    if args.record and not the_projects:
        print(
            "ERROR --record records the project's own specs only (no --specs, no FSM_CONSUMER_SPECS)", file=sys.stderr
        )
        return 1
    if the_projects and not failed:
        paths = [schema_path(), *all_spec_paths()]
        if args.record:
            print(f"recorded {write_record(paths)}")
        elif not record_is_current(paths):
            print(
                "ERROR the record of checked specs (fsm_consumer/machines/_checked.py) does not match the specs: "
                "run tools/check-specs --record",
                file=sys.stderr,
            )
            failed = True
    for s in specs:
        timeouts = sum(len(st.timeouts) for st in s.states.values())
        print(
            f"{s.machine}: {len(s.states)} states, {len(s.transitions)} transitions, {timeouts} timeouts, "
            f"{len(s.durations)} durations  ({s.file})"
        )
    if not specs and not failed:
        print("no specs found", file=sys.stderr)
        return 1
    compositions = sorted((Path(args.specs or specs_dir()) / "compositions").glob("*.yaml"))
    by_name = {s.machine: s for s in specs}
    if args.explore and not failed:
        failed = not _explore(specs, args.draw, validators=the_projects)
        failed = not _explore_compositions(compositions, by_name, args.draw) or failed
    if args.mutants and not failed:
        failed = not _mutants([Path(s.file) for s in specs], compositions, by_name)
    return 1 if failed else 0


def _check_files(args: argparse.Namespace) -> int:
    if args.specs or args.record:
        print("ERROR give spec files, or --specs DIR (and --record), not both", file=sys.stderr)
        return 1
    from ..machines._composition import is_composition

    specs: list[Spec] = []
    failed = False
    compositions = [Path(name) for name in args.files if is_composition(name)]
    spec_files = [name for name in args.files if Path(name) not in compositions]
    for name in spec_files:
        try:
            specs.append(load_spec(name, validate_always=True))
        except (SpecError, OSError) as exc:
            print(f"ERROR {exc}", file=sys.stderr)
            failed = True
    for s in specs:
        print(f"{s.machine}: {len(s.states)} states, {len(s.transitions)} transitions  ({s.file})")
    by_name = {s.machine: s for s in specs}  # a composition's machines: these, else the shipped specs
    if args.explore:
        if specs:
            failed = not _explore(specs, args.draw) or failed
        failed = not _explore_compositions(compositions, by_name, args.draw) or failed
    elif compositions:
        failed = not _load_compositions(compositions, by_name) or failed
    if args.mutants and not failed:
        failed = not _mutants([Path(name) for name in spec_files], compositions, by_name)
    return 1 if failed else 0


def _load_compositions(paths: list[Path], by_name: dict[str, Spec]) -> bool:
    from ..machines._composition import load_composition

    ok = True
    for path in paths:
        try:
            c = load_composition(path, by_name)
        except SpecError as exc:
            print(f"ERROR {exc}", file=sys.stderr)
            ok = False
            continue
        print(f"composition {c.name}: {len(c.roles)} machines, {len(c.links)} links  ({c.file})")
    return ok


def _explore_compositions(paths: list[Path], by_name: dict[str, Spec], draw: str | None = None) -> bool:
    """Each composition's machines explored together under its links (machines/_product.py); with ``draw``, each
    counterexample drawn on every machine's diagram (its part of the path in red)."""
    from ..machines._composition import load_composition
    from ..machines._product import explore_composition

    ok = True
    for path in paths:
        try:
            result = explore_composition(load_composition(path, by_name))
        except SpecError as exc:
            print(f"ERROR {exc}", file=sys.stderr)
            ok = False
            continue
        print(result.report())
        ok = ok and result.ok
        if draw is None:
            continue
        for v in result.violations:
            for role, dot in v.drawn(result.composition, result.initial).items():
                _write_drawing(Path(draw) / f"{result.composition.name}.{role}.{v.prop}.{v.name}.dot", dot)
    return ok


def _write_drawing(target: Path, dot: str) -> None:
    from ..machines._diagram import render_svg

    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dot, encoding="utf-8")
    if have_dot():
        target.with_suffix(".svg").write_text(render_svg(dot), encoding="utf-8")
    print(f"  drawn: {target}")


def _validator(spec: Spec):
    """The config validator the durations of one of the project's specs are configured through: the share
    consumer's for the share machines, the consumer's for the others (a relation that a configuration breaks
    must be refused by it)."""
    from .._config import ConsumerConfig
    from ..share._config import share_config

    if spec.machine.startswith("share_"):
        return lambda config: share_config(group_id="check-specs", **config)
    return lambda config: ConsumerConfig.from_kwargs(**config)


def _explore(specs: list[Spec], draw: str | None = None, *, validators: bool = False) -> bool:
    from ..machines._explore import explore

    ok = True
    for s in specs:
        result = explore(s, _validator(s) if validators else None)
        print(result.report())
        ok = ok and result.ok
        if draw is None:
            continue
        for v in result.violations:
            _write_drawing(Path(draw) / f"{s.machine}.{v.prop}.{v.name}.dot", v.drawn(s, result.initial))
    return ok


def _mutants(paths: list[Path], compositions: list[Path] = (), by_name: dict[str, Spec] | None = None) -> bool:  # type: ignore[assignment]
    import time

    from ..machines._mutants import COMPOSITION_KINDS, KINDS, run_composition_mutants, run_mutants

    started = time.perf_counter()
    kinds = KINDS + (COMPOSITION_KINDS if compositions else ())
    made = dict.fromkeys(kinds, 0)
    found = dict.fromkeys(kinds, 0)
    results = [r for path in paths for r in run_mutants(path)]
    results += [r for path in compositions for r in run_composition_mutants(path, dict(by_name or {}))]
    for r in results:
        made[r.mutant.kind] += 1
        found[r.mutant.kind] += r.found
    what = f"{len(paths)} spec(s)" + (f" and {len(compositions)} composition(s)" if compositions else "")
    print(f"mutants of {what}, {time.perf_counter() - started:.1f} s:")
    never = []
    for kind in kinds:
        share = f"{found[kind] / made[kind]:.0%}" if made[kind] else "-"
        print(f"  {kind}: {found[kind]} of {made[kind]} found ({share})")
        if made[kind] and not found[kind]:
            never.append(kind)
    if never:
        print(
            f"ERROR no mutant of kind {', '.join(never)} was found: nothing checks that kind of slip", file=sys.stderr
        )
    return not never


def render_diagrams(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="fsm-consumer diagrams", description="Write diagrams/<machine>.dot, .svg and .mmd from the specs."
    )
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
        print(
            "note: Graphviz's dot program is not installed (Debian/Ubuntu: apt-get install graphviz; "
            "macOS: brew install graphviz): "
            + ("checking .dot and .mmd only, not .svg" if args.check else "writing .dot and .mmd, no .svg"),
            file=sys.stderr,
        )
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
    ap = argparse.ArgumentParser(
        prog="fsm-consumer spec-coverage", description="Which spec transitions the last pytest run never fired."
    )
    ap.add_argument("--records", default=".fsm-coverage", help="directory the pytest plugin wrote")
    ap.add_argument("--kind", help="count only tests of this kind (unit, integration, spark)")
    ap.add_argument("--broker", help="count only tests run on this broker (tansu, kafka)")
    ap.add_argument(
        "--compare-brokers",
        metavar="A,B",
        help="per machine, what each broker's tests fired, and "
        "the transitions fired on one broker but never on another; exit 1 if there is any",
    )
    ap.add_argument(
        "--allow-gap",
        action="append",
        default=[],
        metavar="MACHINE:TRIGGER[:DEST]",
        help="with --compare-brokers: a transition only some brokers can reach (or that only a chance timing "
        "reaches), reported, not failed; DEST picks one of the trigger's transitions",
    )
    ap.add_argument(
        "--only-on",
        action="append",
        default=[],
        metavar="MACHINE:BROKER",
        help="with --compare-brokers: a machine only BROKER can run (the consumer protocol on Apache Kafka): "
        "what it fires elsewhere is not compared, and what it never fires on BROKER is a gap",
    )
    ap.add_argument("--machines", help="comma-separated machines (default: all shipped specs)")
    ap.add_argument("--fail-under", type=float, default=None, help="exit 1 if any machine is below this percent")
    args = ap.parse_args(argv)
    if not Path(args.records).is_dir():
        print(f"no records in {args.records}: run pytest first (the tests' plugin writes them)", file=sys.stderr)
        return 1
    if args.kind and args.broker:
        ap.error("give --kind or --broker, not both")
    records = merge_records(Path(args.records))
    specs, failed = _load_all(None)
    wanted = set(args.machines.split(",")) if args.machines else None
    specs = [s for s in specs if not wanted or s.machine in wanted]
    if args.compare_brokers:
        only_on = dict(item.split(":", 1) for item in args.only_on)
        gaps = _compare_brokers(specs, records, args.compare_brokers.split(","), set(args.allow_gap), only_on)
        return 1 if (failed or gaps) else 0
    kind = f"broker:{args.broker}" if args.broker else args.kind
    below = False
    for s in specs:
        covered, missing = coverage(s, records, kind)
        pct = 100.0 * len(covered) / len(s.transitions)
        print(
            f"{s.machine}: {len(covered)}/{len(s.transitions)} transitions exercised ({pct:.1f}%)"
            + (f" by {args.kind} tests" if args.kind else "")
            + (f" on {args.broker}" if args.broker else "")
        )
        for i in missing:
            t = s.transitions[i]
            print(f"  never fired: {t.label}  ({s.file}:{t.line})")
        if args.fail_under is not None and pct < args.fail_under:
            below = True
    return 1 if (failed or below) else 0


def _compare_brokers(
    specs: list[Spec],
    records: dict[str, dict[int, dict[str, int]]],
    brokers: list[str],
    allowed: set[str],
    only_on: dict[str, str] | None = None,
) -> bool:
    """Print each broker's share per machine and the gaps between them; True if a gap is not allowed. A
    machine in ``only_on`` is judged on its broker alone: every transition must fire there."""
    any_gap = False
    for s in specs:
        shares = ", ".join(f"{b} {len(coverage(s, records, f'broker:{b}')[0])}" for b in brokers)
        print(f"{s.machine}: {len(s.transitions)} transitions; fired by broker tests on {shares}")
        only = (only_on or {}).get(s.machine)
        if only is not None:
            for i in coverage(s, records, f"broker:{only}")[1]:
                t = s.transitions[i]
                ok = f"{s.machine}:{t.trigger}" in allowed or f"{s.machine}:{t.trigger}:{t.dest}" in allowed
                print(f"  never fired on {only}{' [allowed]' if ok else ''}: {t.label}  ({s.file}:{t.line})")
                any_gap |= not ok
            continue
        for b, missing in broker_gaps(s, records, brokers).items():
            for i in missing:
                t = s.transitions[i]
                ok = f"{s.machine}:{t.trigger}" in allowed or f"{s.machine}:{t.trigger}:{t.dest}" in allowed
                print(
                    f"  never fired on {b} (fired on another broker){' [allowed]' if ok else ''}: "
                    f"{t.label}  ({s.file}:{t.line})"
                )
                any_gap |= not ok
    return any_gap
