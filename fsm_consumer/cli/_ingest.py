"""``fsm-consumer ingest``: the main job. A Spark structured-streaming ingestion of a Kafka topic into
parquet (or Delta) files with a checkpoint, read with the ``fsm_kafka`` data source.

Without ``--bootstrap-servers`` it starts the embedded broker (Tansu) on loopback and fills the topic
with demo data first, so it runs on a fresh machine; ``--master`` goes to Spark (``local[*]`` by
default, or ``spark://host:port`` for a standalone cluster). It shows records/s, batches and the lag per
partition while it runs, and ends with a summary: records written, files, time, how to read them back.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..broker import BROKER_KINDS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

_TRIGGERS = ("available-now", "once")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="fsm-consumer ingest", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--topic", default="fsm-ingest-demo", help="topic to ingest (default: fsm-ingest-demo)")
    ap.add_argument("--to", default="fsm-ingest", help="output directory (default: ./fsm-ingest)")
    ap.add_argument("--format", default="parquet", choices=("parquet", "delta"))
    ap.add_argument(
        "--bootstrap-servers",
        help="Kafka brokers; without it a loopback broker (--broker) is started and filled with demo data",
    )
    ap.add_argument(
        "--broker",
        choices=BROKER_KINDS,
        default="tansu",
        help="without --bootstrap-servers: tansu (default: embedded, starts in milliseconds) or kafka "
        "(Apache Kafka, the reference; `fsm-consumer broker fetch --kind kafka` first)",
    )
    ap.add_argument(
        "--trigger",
        default="available-now",
        help="available-now (default: everything there is, then stop), once, or an interval "
        "such as '10 seconds' (runs until Ctrl-C or --duration)",
    )
    ap.add_argument("--duration", type=float, help="with an interval trigger: stop after this many seconds")
    ap.add_argument("--master", default="local[*]", help="Spark master URL (default: local[*])")
    ap.add_argument(
        "--commit-to-group",
        metavar="GROUP",
        help="also commit each finished batch's end offsets to this Kafka group (for lag tools)",
    )
    ap.add_argument("--checkpoint", help="checkpoint directory (default: <to>/_checkpoint)")
    ap.add_argument("--starting-offsets", default="earliest", help="earliest (default), latest or JSON")
    ap.add_argument("--max-offsets-per-trigger", type=int, help="bound each micro-batch")
    ap.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="more fsm_kafka source options, e.g. kafka.security.protocol=SSL (repeatable)",
    )
    ap.add_argument("--records", type=int, default=200_000, help="demo records (loopback broker only)")
    ap.add_argument("--partitions", type=int, default=4, help="demo topic partitions (loopback broker only)")
    ap.add_argument("--record-size", type=int, default=100, help="demo record size (loopback broker only)")
    ap.add_argument("--quiet", action="store_true", help="no live progress display")
    return ap


def _trigger(text: str) -> dict[str, Any]:
    if text == "available-now":
        return {"availableNow": True}
    if text == "once":
        return {"once": True}
    return {"processingTime": text}


def _loopback(master: str) -> bool:
    """Spark runs on this machine only: keep its driver on 127.0.0.1 too."""
    return master.startswith("local") or master.split("://", 1)[-1].split(":")[0] in ("127.0.0.1", "localhost")


def _session(master: str, fmt: str, local: bool) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this interpreter and package
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("fsm-consumer ingest")
    builder = builder.config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "false")
    if local:  # a local master or a cluster on 127.0.0.1: the driver listens on loopback too
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if fmt == "delta":
        try:
            from delta import configure_spark_with_delta_pip  # optional: in no extra of this package
        except ImportError:
            raise SystemExit("--format delta needs delta-spark: pip install delta-spark") from None
        builder = configure_spark_with_delta_pip(
            builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension").config(
                "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
            )
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _lag(progress: dict[str, Any] | None) -> dict[str, int]:
    """Per topic-partition: what the broker has (latestOffset) minus what the last batch reached."""
    if not progress or not progress.get("sources"):
        return {}
    source = progress["sources"][0]
    try:
        latest = json.loads(source.get("latestOffset") or "null") or {}
        end = json.loads(source.get("endOffset") or "null") or {}
    except (TypeError, ValueError):
        return {}
    lag = {}
    for topic, parts in latest.items():
        for p, offset in parts.items():
            lag[f"{topic}-{p}"] = max(0, int(offset) - int(end.get(topic, {}).get(p, 0)))
    return lag


def _watch(query: StreamingQuery, args: argparse.Namespace, total_hint: int | None) -> None:
    """Follow the query until it ends (or --duration), with a live display unless --quiet."""
    deadline = None if args.duration is None else time.monotonic() + args.duration
    seen_batches: set[int] = set()
    rows = 0

    def step() -> bool:
        nonlocal rows
        for p in query.recentProgress:
            if p["batchId"] not in seen_batches:
                seen_batches.add(p["batchId"])
                rows += p.get("numInputRows", 0)
        if deadline is not None and time.monotonic() >= deadline:
            query.stop()
        return query.isActive

    if args.quiet or not sys.stdout.isatty():
        while step():
            # pyspark annotates the timeout int, but takes float seconds (it checks for int or float)
            query.awaitTermination(0.5)  # type: ignore[arg-type]
        step()
        return
    from rich.live import Live
    from rich.table import Table

    def render() -> Table:
        last: dict[str, Any] = query.lastProgress or {}
        table = Table(title=f"fsm-consumer ingest: {args.topic} -> {args.to}", show_header=False)
        rate = last.get("processedRowsPerSecond") or 0.0
        done = f"{rows:,}" + (f" of {total_hint:,}" if total_hint else "")
        table.add_row("records written", done)
        table.add_row("records/s (last batch)", f"{rate:,.0f}")
        table.add_row("batches", str(len(seen_batches)))
        lag = _lag(last)
        table.add_row("lag per partition", ", ".join(f"{k}: {v:,}" for k, v in sorted(lag.items())) or "-")
        return table

    with Live(render(), refresh_per_second=4, transient=False) as live:
        while step():
            query.awaitTermination(0.25)  # type: ignore[arg-type]  # float seconds, as above
            live.update(render())
        step()
        live.update(render())


def ingest(argv: list[str]) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.bootstrap_servers and "--broker" in argv:
        ap.error("--broker starts a loopback broker; with --bootstrap-servers there is none to start")
    extra = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"error: --option {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        extra[key] = value
    t0 = time.monotonic()
    with ExitStack() as stack:
        total_hint = None
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from ..broker import KafkaNotFoundError, start_broker
            from ..broker._kinds import describe
            from ._demo import _fill

            try:
                broker = stack.enter_context(start_broker(args.broker))
            except KafkaNotFoundError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            bootstrap = broker.bootstrap_servers
            print(
                f"broker: {describe(broker)}; filling {args.topic!r} with "
                f"{args.records:,} records of {args.record_size} B in {args.partitions} partitions"
            )
            broker.create_topic(args.topic, partitions=args.partitions)
            _fill(bootstrap, args.topic, args.records, args.record_size)
            total_hint = args.records
        out = Path(args.to).resolve()
        checkpoint = Path(args.checkpoint).resolve() if args.checkpoint else out / "_checkpoint"
        spark = _session(args.master, args.format, local=_loopback(args.master))
        stack.callback(spark.stop)
        from ..spark import register

        register(spark)
        reader = (
            spark.readStream.format("fsm_kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", args.topic)
            .option("startingOffsets", args.starting_offsets)
        )
        if args.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        if args.commit_to_group:
            reader = reader.option("commitToGroup", args.commit_to_group)
        for key, value in extra.items():
            reader = reader.option(key, value)
        query = (
            reader.load()
            .writeStream.format(args.format)
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**_trigger(args.trigger))
            .queryName("fsm_consumer_ingest")
            .start()
        )
        try:
            _watch(query, args, total_hint)
        except KeyboardInterrupt:
            query.stop()
        if query.exception() is not None:
            print(f"error: the query failed: {query.exception()}", file=sys.stderr)
            return 1
        written = spark.read.format(args.format).load(str(out))
        count = written.count()
        files = sorted(p for p in out.rglob("*.parquet"))
        took = time.monotonic() - t0
        print(
            f"done: {count:,} records in {len(files)} {args.format} files under {out} in {took:.1f} s "
            f"(checkpoint {checkpoint})"
        )
        if total_hint is not None and count != total_hint:
            print(f"error: {total_hint:,} records were produced, {count:,} written", file=sys.stderr)
            return 1
        print(
            f"read them back: spark.read.format({args.format!r}).load({str(out)!r})"
            + ("   or: pyarrow.parquet.read_table(path) per file" if args.format == "parquet" else "")
        )
    return 0
