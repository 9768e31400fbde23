"""``fsm-consumer check-history``: check consumers' histories (docs/histories.md) by the rules L E D M C K."""

from __future__ import annotations

import argparse
import sys


def check_history(argv: list[str]) -> int:
    """Exit 0: no violation; 1: violations; 2: bad input (no history, an unreadable file, bad options, history
    lines without the fields their event needs)."""
    ap = argparse.ArgumentParser(
        prog="fsm-consumer check-history",
        description="Check the histories (history_path) of consumers by the rules of docs/histories.md.",
    )
    ap.add_argument("dir", metavar="DIR", help="a directory whose *.jsonl files are histories (or one history file)")
    ap.add_argument(
        "--produced",
        metavar="FILE.json",
        help='{"topic": {"partition": count}}: records produced at offsets 0..count-1 (rule L; without it L is '
        "not checked)",
    )
    ap.add_argument(
        "--broker-commits",
        metavar="FILE.jsonl",
        help="JSON lines [topic, partition, offset]: the broker's commit log in the order the commits took effect "
        "(rule C judges 'backwards' from it)",
    )
    ap.add_argument("--limit", type=int, default=10, metavar="N", help="violations shown per rule (default 10)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:  # --help, or options argparse refused (it printed why)
        return e.code if isinstance(e.code, int) else 2
    if args.limit < 0:
        print("fsm-consumer check-history: --limit must be 0 or more", file=sys.stderr)
        return 2

    from ..history import HistoryError, check, load, read_broker_commits, read_produced

    try:
        history = load(args.dir)
        produced = read_produced(args.produced) if args.produced else None
        broker = read_broker_commits(args.broker_commits) if args.broker_commits else None
        result = check(history, produced=produced, broker_commits=broker)
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
