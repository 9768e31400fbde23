"""The inputs ``check-history`` and ``timeline`` share beside the histories: what was produced and what the
broker says was committed (rules L and C), and the share groups' delivery limit (rules N and S)."""

from __future__ import annotations

import argparse
from typing import Any


def add_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--produced",
        metavar="FILE.json",
        help='{"topic": {"partition": count}}: records produced at offsets 0..count-1 (rules L and S; without it '
        "they are not checked)",
    )
    ap.add_argument(
        "--broker-commits",
        metavar="FILE.jsonl",
        help="JSON lines [topic, partition, offset]: the broker's commit log in the order the commits took effect "
        "(rule C judges 'backwards' from it, and looks every acknowledged commit up in it)",
    )
    ap.add_argument(
        "--broker-committed",
        metavar="FILE.json",
        help='{"topic": {"partition": offset}}: the offsets the broker holds after the run, for a broker whose '
        "commit log cannot be read (rule C: no acknowledged commit above them)",
    )
    ap.add_argument(
        "--delivery-limit",
        type=_limit,
        default=None,
        metavar="N",
        help="share groups: the broker's group.share.delivery.count.limit (default 5, Apache Kafka's): no record "
        "is delivered past it (rule N), and one delivered up to it counts as settled, archived (rule S)",
    )


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--delivery-limit takes a count >= 1, got {text!r}")
    return value


def read_options(args: argparse.Namespace) -> dict[str, Any]:
    """``check()``'s keyword arguments from the options; HistoryError for an unreadable file."""
    from ..history import HistoryError, read_broker_commits, read_produced

    held = None
    if args.broker_committed:
        held = read_produced(args.broker_committed)  # the same {"topic": {"partition": number}} shape
        if not all(isinstance(offset, int) for offset in held.values()):
            raise HistoryError(f'{args.broker_committed}: expected {{"topic": {{"partition": offset}}}}')
    return dict(
        produced=read_produced(args.produced) if args.produced else None,
        broker_commits=read_broker_commits(args.broker_commits) if args.broker_commits else None,
        broker_committed=held,
        **({} if getattr(args, "delivery_limit", None) is None else {"delivery_limit": args.delivery_limit}),
    )
