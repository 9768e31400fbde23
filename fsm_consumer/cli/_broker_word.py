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
        "--share-settled",
        metavar="FILE.json",
        help='{"topic": {"partition": offset}}: share groups: below these offsets the broker holds every record '
        "settled after the run (its share-partition start offset, or the end when it counts no lag): rule S takes "
        "its word for records whose last member's acknowledgement went unanswered (killed, or cut off)",
    )
    ap.add_argument(
        "--broker-restarts",
        metavar="FILE.json",
        help="[[down_from, up_at], ...]: when the broker was restarted, in the histories' clock (ms): rule N allows a "
        "record acquired but not acknowledged then to come back at its count last written (Kafka writes it with "
        "the acknowledgement)",
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
    from ..history import read_broker_commits, read_produced

    held = _offsets(args.broker_committed, "--broker-committed") if args.broker_committed else None
    return dict(
        produced=read_produced(args.produced) if args.produced else None,
        broker_commits=read_broker_commits(args.broker_commits) if args.broker_commits else None,
        broker_committed=held,
        share_settled=_offsets(args.share_settled, "--share-settled") if getattr(args, "share_settled", None) else None,
        broker_restarts=_windows(args.broker_restarts) if getattr(args, "broker_restarts", None) else None,
        **({} if getattr(args, "delivery_limit", None) is None else {"delivery_limit": args.delivery_limit}),
    )


def _offsets(path: str, flag: str) -> dict[Any, int]:
    """A ``{"topic": {"partition": offset}}`` file; HistoryError naming it otherwise."""
    from ..history import HistoryError, read_produced

    held = read_produced(path)  # the same {"topic": {"partition": number}} shape
    offsets = {tp: offset for tp, offset in held.items() if isinstance(offset, int)}
    if len(offsets) != len(held):
        raise HistoryError(f'{path} ({flag}): expected {{"topic": {{"partition": offset}}}}')
    return offsets


def _windows(path: str) -> list[tuple[float, float]]:
    """A ``[[down_from, up_at], ...]`` file; HistoryError naming it otherwise."""
    import json

    from ..history import HistoryError

    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        windows = [(float(a), float(b)) for a, b in value]
    except (OSError, ValueError, TypeError) as exc:
        raise HistoryError(f"{path} (--broker-restarts): expected [[down_from, up_at], ...] ms: {exc}") from None
    return windows
