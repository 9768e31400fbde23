"""``fsm-consumer broker start``: a broker for development (the embedded Tansu, or Apache Kafka) on loopback
until Ctrl-C, its topics created, its bootstrap address printed. ``fsm-consumer broker fetch --kind
kafka|spark-kafka|registry``: fetch Apache Kafka's jars for ``KafkaBroker``, Spark's own Kafka connector (the
peer ``fsm_kafka`` is compared with), or Apicurio Registry for ``SchemaRegistry``, into the cache (once)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from ._help import plain


def broker(argv: list[str]) -> int:
    from ..broker import _kafka_jars as jars
    from ..broker._registry import REGISTRY_VERSION

    ap = argparse.ArgumentParser(prog="fsm-consumer broker", description=plain(__doc__))
    sub = ap.add_subparsers(dest="action", required=True)
    fetch = sub.add_parser("fetch", help="fetch a broker's files (or Spark's Kafka connector) into the cache")
    fetch.add_argument(
        "--kind",
        choices=["kafka", "spark-kafka", "registry"],
        default="kafka",
        help="kafka: Apache Kafka's jars from Maven Central (Tansu comes with pip); spark-kafka: Spark's own "
        "Kafka source (spark-sql-kafka-0-10), for the tests that compare fsm_kafka with it; registry: Apicurio "
        "Registry, a Confluent-compatible schema registry (runs on Java 21+)",
    )
    fetch.add_argument(
        "--version",
        default=None,
        help=f"default: Kafka {jars.KAFKA_VERSION}; Spark's connector {jars.SPARK_KAFKA_VERSION}, the newest Maven "
        f"Central has (it runs on the PySpark pip installs, also 4.3); Apicurio Registry {REGISTRY_VERSION}",
    )
    fetch.add_argument("--verbose", action="store_true", help="show mvn's output")
    start = sub.add_parser("start", help="run a broker on loopback until Ctrl-C, printing its bootstrap address")
    start.add_argument("--kind", choices=["tansu", "kafka"], default="tansu", help="default: tansu (pip installed it)")
    start.add_argument("--port", type=int, default=9092, help="default: 9092")
    start.add_argument(
        "--topic", action="append", default=[], metavar="NAME[:PARTITIONS]", help="a topic to create (repeatable)"
    )
    args = ap.parse_args(argv)
    if args.action == "start":
        return _run(args.kind, args.port, args.topic)
    if args.kind == "registry":
        return _fetch_registry(args.version or REGISTRY_VERSION, args.verbose)
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


def _fetch_registry(version: str, verbose: bool) -> int:
    from ..broker import BrokerError, fetch_registry

    try:
        home = fetch_registry(version, quiet=not verbose)
    except BrokerError as exc:
        print(f"fsm-consumer broker fetch: {exc}", file=sys.stderr)
        return 1
    print(f"Apicurio Registry {version}: {home / 'quarkus-run.jar'}")
    return 0


def _run(kind: str, port: int, topics: list[str]) -> int:
    """Start the broker, create the topics, say where it is, wait for Ctrl-C (or SIGTERM), stop it."""
    from ..broker import BrokerError, KafkaNotFoundError, start_broker
    from ..broker._kinds import describe
    from ..broker._ports import port_in_use

    try:
        wanted = [_topic(spec) for spec in topics]
    except ValueError as exc:
        print(f"fsm-consumer broker start: {exc}", file=sys.stderr)
        return 2
    if port_in_use(port):
        print(
            f"fsm-consumer broker start: port {port} is taken (a broker already there?); --port picks another",
            file=sys.stderr,
        )
        return 1
    try:
        broker = start_broker(kind, port=port)
    except (BrokerError, KafkaNotFoundError) as exc:
        print(f"fsm-consumer broker start: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        for name, partitions in wanted:
            broker.create_topic(name, partitions)
        made = "".join(f"\n  topic {name}: {partitions} partition(s)" for name, partitions in wanted)
        print(f"{describe(broker)}{made}\nbootstrap_servers={broker.bootstrap_servers}\nCtrl-C stops it.", flush=True)
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    except BrokerError as exc:
        print(f"fsm-consumer broker start: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
        try:
            broker.stop()
        finally:
            signal.signal(signal.SIGINT, interrupt)
    print("stopped", flush=True)
    return 0


def _topic(spec: str) -> tuple[str, int]:
    """NAME or NAME:PARTITIONS."""
    name, _, partitions = spec.partition(":")
    if not name or (partitions and not partitions.isdigit()) or partitions == "0":
        raise ValueError(f"--topic {spec!r}: NAME or NAME:PARTITIONS (a whole number above 0)")
    return name, int(partitions or 1)
