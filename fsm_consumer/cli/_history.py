"""``fsm-consumer check-history``: check consumers' histories (docs/histories.md) by the rules L E D M C K, and
share consumers' by H N A S."""

from __future__ import annotations

import argparse
import sys

from ._broker_word import add_options, read_options


def check_history(argv: list[str]) -> int:
    """Exit 0: no violation; 1: violations; 2: bad input (no history, an unreadable file, bad options, history
    lines without the fields their event needs or inside a file that do not parse, histories that cannot be
    judged together: one consumer name in two processes, lines of different clocks)."""
    ap = argparse.ArgumentParser(
        prog="fsm-consumer check-history",
        description="Check the histories (history_path) of consumers by the rules of docs/histories.md.",
    )
    ap.add_argument("dir", metavar="DIR", help="a directory whose *.jsonl files are histories (or one history file)")
    add_options(ap)
    ap.add_argument("--limit", type=int, default=10, metavar="N", help="violations shown per rule (default 10)")
    ap.add_argument(
        "--mutants",
        type=int,
        default=0,
        metavar="N",
        help="after a clean check, prove the checker on this history: inject N violations of each kind into copies "
        "of it (a read moved into another member's ownership, records dropped, a commit moved backwards, a member "
        "renamed, a file's clock skewed, a stale poll stretched, an ownership line deleted) and report which it "
        "caught; exit 1 if it missed one",
    )
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:  # --help, or options argparse refused (it printed why)
        return e.code if isinstance(e.code, int) else 2
    if args.limit < 0 or args.mutants < 0:
        print("fsm-consumer check-history: --limit and --mutants must be 0 or more", file=sys.stderr)
        return 2

    from ..history import HistoryError, check, load

    try:
        history = load(args.dir)
        result = check(history, **read_options(args))
    except HistoryError as e:
        print(f"fsm-consumer check-history: {e}", file=sys.stderr)
        return 2
    print(result.format(limit=args.limit))
    if result.violations:
        return 1
    if not result.ok:
        s = result.summary
        print(
            f"fsm-consumer check-history: the history was not checked whole: {s['malformed']} line(s) lack fields "
            f"their event needs, {s.get('damaged', 0)} line(s) inside a file do not parse",
            file=sys.stderr,
        )
        return 2
    if args.mutants:
        from ..history import mutation_report

        report = mutation_report(result, rounds=args.mutants)
        print(report.format())
        if not report.all_caught:
            print(
                f"fsm-consumer check-history: the checker passed {len(report.missed)} history(ies) with a violation "
                "injected: a defect of the checker (please report it with this history)",
                file=sys.stderr,
            )
            return 1
    return 0


__all__ = ["check_history"]
