"""``fsm-consumer broker fetch --kind kafka``: fetch Apache Kafka's jars for ``KafkaBroker`` (once)."""

from __future__ import annotations

import argparse
import sys


def broker(argv: list[str]) -> int:
    from ..broker._kafka_jars import KAFKA_VERSION, KafkaNotFoundError, fetch_kafka, kafka_home

    ap = argparse.ArgumentParser(prog="fsm-consumer broker", description=__doc__)
    sub = ap.add_subparsers(dest="action", required=True)
    fetch = sub.add_parser("fetch", help="fetch a broker's files into the cache")
    fetch.add_argument(
        "--kind",
        choices=["kafka"],
        default="kafka",
        help="kafka: Apache Kafka's jars from Maven Central (Tansu comes with pip)",
    )
    fetch.add_argument("--version", default=KAFKA_VERSION)
    fetch.add_argument("--verbose", action="store_true", help="show mvn's output")
    args = ap.parse_args(argv)
    try:
        libs = fetch_kafka(args.version, quiet=not args.verbose)
    except KafkaNotFoundError as exc:
        print(f"fsm-consumer broker fetch: {exc}", file=sys.stderr)
        return 1
    jars = sorted(libs.glob("*.jar"))
    print(f"Apache Kafka {args.version}: {len(jars)} jars in {libs} (cache {kafka_home(args.version)})")
    return 0
