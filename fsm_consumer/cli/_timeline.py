"""``fsm-consumer timeline``: draw consumers' histories (docs/histories.md, "The picture") as one SVG."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._broker_word import add_options, read_options


def timeline(argv: list[str]) -> int:
    """Exit 0: the picture was written (violations or not: they are drawn on it); 2: bad input (no history,
    an unreadable file, bad options, an unwritable output)."""
    ap = argparse.ArgumentParser(
        prog="fsm-consumer timeline",
        description="Draw the histories (history_path) of consumers on one time axis as an SVG: each consumer's "
        "membership states, partitions owned, reads, commits, faults and silent stretches, and the violations "
        "of the rules of docs/histories.md.",
    )
    ap.add_argument(
        "paths",
        nargs="+",
        metavar="DIR",
        help="a directory whose *.jsonl files are histories (or history files, of any name)",
    )
    ap.add_argument("-o", "--output", metavar="FILE.svg", help="where to write the picture (default DIR/timeline.svg)")
    add_options(ap)
    ap.add_argument("--width", type=int, default=1400, metavar="PX", help="the picture's width (default 1400)")
    ap.add_argument("--title", help="the picture's title (default: the groups' names)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:  # --help, or options argparse refused (it printed why)
        return e.code if isinstance(e.code, int) else 2
    if args.width < 400:
        print("fsm-consumer timeline: --width must be at least 400", file=sys.stderr)
        return 2

    from ..history import HistoryError, Timeline, check, draw_timeline, load

    try:
        history = Timeline.build(load(args.paths).events)  # built once: for the checker and the picture
        result = check(history, **read_options(args))
    except HistoryError as e:
        print(f"fsm-consumer timeline: {e}", file=sys.stderr)
        return 2
    first = Path(args.paths[0])
    output = Path(args.output) if args.output else (first if first.is_dir() else first.parent) / "timeline.svg"
    svg = draw_timeline(history, result=result, width=args.width, title=args.title)
    try:
        output.write_text(svg, encoding="utf-8")
    except OSError as e:
        print(f"fsm-consumer timeline: {output}: {e.strerror or e}", file=sys.stderr)
        return 2
    rules = ", ".join(f"{rule} {len(vs)}" for rule, vs in result.by_rule().items() if vs)
    print(
        f"wrote {output} ({len(svg.encode()) // 1024 + 1} KiB): {len(result.summary['consumers'])} consumer(s), "
        + (f"violations: {rules}" if rules else "no violations")
    )
    return 0


__all__ = ["timeline"]
