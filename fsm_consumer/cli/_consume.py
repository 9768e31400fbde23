"""``fsm-consumer consume``: print records of a topic, kcat-style or as JSON lines."""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from typing import TYPE_CHECKING

from ._help import plain

if TYPE_CHECKING:
    from ..structs import ConsumerRecord


def _text(data: bytes | None, encoding: str) -> str | None:
    if data is None:
        return None
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    return data.decode("utf-8", errors="replace")


def _format(fmt: str, rec: ConsumerRecord, encoding: str) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "topic": rec.topic,
                "partition": rec.partition,
                "offset": rec.offset,
                "timestamp": rec.timestamp,
                "key": _text(rec.key, encoding),
                "value": _text(rec.value, encoding),
                "headers": [[k, _text(v, encoding)] for k, v in (rec.headers or [])],
            }
        )
    # kcat-like: %t %p %o %k %s %T %h escapes
    out = fmt.replace("\\n", "\n").replace("\\t", "\t")
    for code, value in (
        ("%t", rec.topic),
        ("%p", rec.partition),
        ("%o", rec.offset),
        ("%T", rec.timestamp),
        ("%k", _text(rec.key, encoding) or ""),
        ("%s", _text(rec.value, encoding) or ""),
        ("%h", ",".join(f"{k}={_text(v, encoding)}" for k, v in (rec.headers or []))),
    ):
        out = out.replace(code, str(value))
    return out


def consume(argv: list[str]) -> int:
    # the usage written out: argparse would show --bootstrap-servers in brackets, whose absence this words itself
    ap = argparse.ArgumentParser(
        prog="fsm-consumer consume", usage="%(prog)s -b HOST:PORT -t TOPIC [options]", description=plain(__doc__)
    )
    ap.add_argument("--bootstrap-servers", "-b", help="host:port[,host:port] (required)")
    ap.add_argument("--topic", "-t", required=True)
    ap.add_argument("--partition", "-p", type=int, action="append", help="partition (repeatable); default all")
    ap.add_argument(
        "--from", dest="start", default="earliest", help="earliest, latest, or an offset (default earliest)"
    )
    ap.add_argument("--max", type=int, default=None, help="stop after this many records")
    ap.add_argument("--idle-exit-ms", type=int, default=2000, help="stop when no record came for this long (0: never)")
    ap.add_argument(
        "--format",
        "-f",
        default="%s",
        help="'json' for JSON lines, or a kcat format: %%t %%p %%o %%k %%s %%T %%h (default %%s)",
    )
    ap.add_argument("--encoding", choices=["utf8", "base64"], default="utf8", help="how keys and values print")
    ap.add_argument(
        "-X",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any consumer config key, e.g. -X isolation_level=read_committed",
    )
    args = ap.parse_args(argv)
    if not args.bootstrap_servers:
        print(
            "fsm-consumer consume: --bootstrap-servers is required (there is no default broker; "
            "`fsm-consumer demo` starts an embedded one)",
            file=sys.stderr,
        )
        return 2
    from ..consumer import Consumer
    from ..errors import ConfigError, KafkaTimeoutError
    from ..fetch import TopicPartition

    extra = {}
    for item in args.extra:
        key, _, value = item.partition("=")
        extra[key] = int(value) if value.lstrip("-").isdigit() else value
    try:
        # a mistyped topic must not be created by the lookup below (-X allow_auto_create_topics=1 to allow)
        settings = {"auto_offset_reset": "earliest", "allow_auto_create_topics": False, **extra}
        consumer = Consumer(bootstrap_servers=args.bootstrap_servers, **settings)
    except ConfigError as exc:
        print(f"fsm-consumer consume: {exc}", file=sys.stderr)
        return 2
    except KafkaTimeoutError as exc:  # no broker answered within bootstrap_timeout_ms: which, and why
        print(f"fsm-consumer consume: {exc}", file=sys.stderr)
        return 1
    printed = 0
    try:
        partitions = args.partition or sorted(consumer.partitions_for_topic(args.topic, timeout_ms=10_000) or [])
        if not partitions:
            print(f"fsm-consumer consume: topic {args.topic!r} not found", file=sys.stderr)
            return 1
        tps = [TopicPartition(args.topic, p) for p in partitions]
        consumer.assign(tps)
        if args.start == "latest":
            consumer.seek_to_end(*tps)
        elif args.start != "earliest":
            for tp in tps:
                consumer.seek(tp, int(args.start))
        last = time.monotonic()
        while args.max is None or printed < args.max:
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                if args.idle_exit_ms and (time.monotonic() - last) * 1000 >= args.idle_exit_ms:
                    break
                continue
            last = time.monotonic()
            for records in batch.values():
                for rec in records:
                    print(_format(args.format, rec, args.encoding))
                    printed += 1
                    if args.max is not None and printed >= args.max:
                        break
                if args.max is not None and printed >= args.max:
                    break
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    print(f"% {printed} records", file=sys.stderr)
    return 0
