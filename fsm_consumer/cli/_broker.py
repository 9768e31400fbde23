"""``fsm-consumer broker fetch --kind kafka|spark-kafka``: fetch Apache Kafka's jars for ``KafkaBroker``, or
Spark's own Kafka connector (the peer ``fsm_kafka`` is compared with), into the cache (once)."""

from __future__ import annotations

import argparse
import sys

from ._help import plain


def broker(argv: list[str]) -> int:
    from ..broker import _kafka_jars as jars

    ap = argparse.ArgumentParser(prog="fsm-consumer broker", description=plain(__doc__))
    sub = ap.add_subparsers(dest="action", required=True)
    fetch = sub.add_parser("fetch", help="fetch a broker's files (or Spark's Kafka connector) into the cache")
    fetch.add_argument(
        "--kind",
        choices=["kafka", "spark-kafka"],
        default="kafka",
        help="kafka: Apache Kafka's jars from Maven Central (Tansu comes with pip); spark-kafka: Spark's own "
        "Kafka source (spark-sql-kafka-0-10), for the tests that compare fsm_kafka with it",
    )
    fetch.add_argument(
        "--version", default=None, help=f"default: Kafka {jars.KAFKA_VERSION}, Spark {jars.SPARK_KAFKA_VERSION}"
    )
    fetch.add_argument("--verbose", action="store_true", help="show mvn's output")
    args = ap.parse_args(argv)
    spark = args.kind == "spark-kafka"
    version = args.version or (jars.SPARK_KAFKA_VERSION if spark else jars.KAFKA_VERSION)
    try:
        libs = (jars.fetch_spark_kafka if spark else jars.fetch_kafka)(version, quiet=not args.verbose)
    except jars.KafkaNotFoundError as exc:
        print(f"fsm-consumer broker fetch: {exc}", file=sys.stderr)
        return 1
    found = sorted(libs.glob("*.jar"))
    what = f"Spark's Kafka connector {version}" if spark else f"Apache Kafka {version}"
    print(f"{what}: {len(found)} jars in {libs}")
    return 0
