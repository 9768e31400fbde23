"""``fsm-consumer share-group``: look at and manage a share group (KIP-932, Apache Kafka 4.2+).

``describe GROUP``: its state, members and their assignments, and each partition's start offset, end
offset and lag (``--json`` for machines). ``config GROUP``: its share settings (``share.*``), with
``--set KEY=VALUE`` to change them (``--delete KEY`` to go back to the broker's default).
``reset-offsets GROUP --topic T --to-earliest|--to-latest|--to-offset N`` and ``delete-offsets GROUP
--topic T``: move or forget the group's start offsets; the group must have no members.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._help import plain

if TYPE_CHECKING:
    from ..share._admin import GroupConfigEntry, ShareGroupDescription, SharePartitionOffsets
    from ..structs import TopicPartition

PROG = "fsm-consumer share-group"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG, description=plain(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        "--bootstrap-servers",
        "-b",
        dest="bootstrap",
        default="localhost:9092",
        metavar="HOST:PORT",
        help="a broker of the cluster (host:port[,host:port]; default localhost:9092)",
    )
    common.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="per call (default 30)")
    common.add_argument(
        "-X",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a connection setting of the consumer's, e.g. -X security_protocol=SSL -X ssl_cafile=ca.pem",
    )
    describe = sub.add_parser("describe", parents=[common], help="members, assignments, start offsets and lag")
    describe.add_argument("group", metavar="GROUP")
    describe.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    config = sub.add_parser("config", parents=[common], help="show the group's share settings, or --set them")
    config.add_argument("group", metavar="GROUP")
    config.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    config.add_argument("--delete", action="append", default=[], metavar="KEY", help="back to the broker's default")
    config.add_argument("--json", action="store_true", help="the settings as one JSON object")
    reset = sub.add_parser("reset-offsets", parents=[common], help="move the start offsets of an empty group")
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", "-t", required=True)
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    delete = sub.add_parser("delete-offsets", parents=[common], help="forget an empty group's state in topics")
    delete.add_argument("group", metavar="GROUP")
    delete.add_argument("--topic", "-t", action="append", required=True, help="repeatable")
    return ap


def parse_settings(items: Sequence[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` as a dict; ValueError naming an item without ``=`` or a key."""
    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{item!r} is not KEY=VALUE")
        settings[key.strip()] = value.strip()
    return settings


def _extra(items: Sequence[str]) -> dict[str, Any]:
    return {k: int(v) if v.lstrip("-").isdigit() else v for k, v in parse_settings(items).items()}


def share_group(argv: list[str]) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    try:
        extra = _extra(args.extra)
        settings: dict[str, str | None] = dict(parse_settings(getattr(args, "set", [])))
    except ValueError as exc:
        ap.error(str(exc))
    settings.update(dict.fromkeys(getattr(args, "delete", [])))
    import kafka.errors as ke

    from ..errors import ConfigError
    from ..share._admin import ShareGroupAdmin

    # a broker that cannot be reached is said once, in the error below, not also by the transport's warnings
    quiet = logging.NullHandler()
    transport_log = logging.getLogger("fsm_consumer.transport")
    if not logging.getLogger().handlers:
        transport_log.addHandler(quiet)
    try:
        with ShareGroupAdmin(args.bootstrap, timeout_ms=args.timeout * 1000, **extra) as admin:
            return _act(admin, args, settings)
    except ConfigError as exc:
        print(f"{PROG} {args.action}: {_line(exc)}", file=sys.stderr)
        return 2
    except (ke.KafkaError, ValueError) as exc:
        print(f"{PROG} {args.action}: {_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        transport_log.removeHandler(quiet)


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _act(admin: Any, args: argparse.Namespace, settings: dict[str, str | None]) -> int:
    if args.action == "describe":
        description = admin.describe_group(args.group)
        offsets = admin.describe_offsets(args.group)
        if args.json:
            print(json.dumps(description_json(description, offsets), indent=2))
        else:
            print(render_description(description, offsets))
    elif args.action == "config":
        if settings:
            admin.set_group_config(args.group, settings)
        entries = admin.group_config_entries(args.group)
        if args.json:
            print(json.dumps({e.name: e.value for e in entries}, indent=2))
        else:
            print(render_config(entries))
    elif args.action == "reset-offsets":
        to = "earliest" if args.to_earliest else "latest" if args.to_latest else args.to_offset
        done = admin.reset_offsets(args.group, args.topic, to)
        print(
            table(["TOPIC", "PARTITION", "NEW-START-OFFSET"], [[tp.topic, tp.partition, o] for tp, o in done.items()])
        )
    else:  # delete-offsets
        admin.delete_offsets(args.group, args.topic)
        print(f"deleted the offsets of share group {args.group!r} in {', '.join(sorted(set(args.topic)))}")
    return 0


# -- rendering (no broker needed) --------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns left-aligned, two spaces apart; None shows as "-"."""
    cells = [list(headers)] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def assignment_text(partitions: Sequence[TopicPartition]) -> str:
    """``orders:0,1 payments:3``; ``-`` for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic.items()) or "-"


def render_description(
    description: ShareGroupDescription, offsets: Mapping[TopicPartition, SharePartitionOffsets]
) -> str:
    d = description
    head = (
        f"share group {d.group_id}: state {d.state}, group epoch {d.group_epoch}, assignment epoch "
        f"{d.assignment_epoch}, assignor {d.assignor or '-'}, {len(d.members)} member(s)"
    )
    parts = [head]
    if d.members:
        rows = [[m.member_id, m.client_id, m.host, m.epoch, assignment_text(m.assignment)] for m in d.members]
        parts.append(table(["MEMBER-ID", "CLIENT-ID", "HOST", "EPOCH", "ASSIGNMENT"], rows))
    if offsets:
        rows = [[o.topic, o.partition, o.start_offset, o.end_offset, o.lag] for o in offsets.values()]
        parts.append(table(["TOPIC", "PARTITION", "START-OFFSET", "END-OFFSET", "LAG"], rows))
    else:
        parts.append("no partitions: the group has no state and its members subscribe to nothing")
    return "\n\n".join(parts)


def description_json(
    description: ShareGroupDescription, offsets: Mapping[TopicPartition, SharePartitionOffsets]
) -> dict[str, Any]:
    d = description
    return {
        "group_id": d.group_id,
        "state": d.state,
        "group_epoch": d.group_epoch,
        "assignment_epoch": d.assignment_epoch,
        "assignor": d.assignor,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "epoch": m.epoch,
                "rack_id": m.rack_id,
                "subscribed_topics": list(m.subscribed_topics),
                "assignment": [{"topic": tp.topic, "partition": tp.partition} for tp in m.assignment],
            }
            for m in d.members
        ],
        "offsets": [
            {
                "topic": o.topic,
                "partition": o.partition,
                "start_offset": o.start_offset,
                "end_offset": o.end_offset,
                "lag": o.lag,
            }
            for o in offsets.values()
        ],
    }


def render_config(entries: Sequence[GroupConfigEntry]) -> str:
    rows = [[e.name, e.value, e.source] for e in entries]  # group: the group's own; else where the default is from
    return table(["KEY", "VALUE", "SOURCE"], rows)
