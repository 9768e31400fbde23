"""``fsm-consumer check-history``: check consumers' histories (docs/histories.md) by the rules L E D M C K."""

from __future__ import annotations

import argparse
import sys

from ._broker_word import add_options, read_options


def check_history(argv: list[str]) -> int:
    """Exit 0: no violation; 1: violations; 2: bad input (no history, an unreadable file, bad options, history
    lines without the fields their event needs)."""
    ap = argparse.ArgumentParser(
        prog="fsm-consumer check-history",
        description="Check the histories (history_path) of consumers by the rules of docs/histories.md.",
    )
    ap.add_argument("dir", metavar="DIR", help="a directory whose *.jsonl files are histories (or one history file)")
    add_options(ap)
    ap.add_argument("--limit", type=int, default=10, metavar="N", help="violations shown per rule (default 10)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:  # --help, or options argparse refused (it printed why)
        return e.code if isinstance(e.code, int) else 2
    if args.limit < 0:
        print("fsm-consumer check-history: --limit must be 0 or more", file=sys.stderr)
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
        print(
            f"fsm-consumer check-history: {result.summary['malformed']} line(s) lack fields their event needs: "
            "the history was not checked whole",
            file=sys.stderr,
        )
        return 2
    return 0


__all__ = ["check_history"]
