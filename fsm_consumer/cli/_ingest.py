"""``fsm-consumer ingest``: the main job. A Spark structured-streaming ingestion of a Kafka topic into
parquet (or Delta) files with a checkpoint, read with the ``fsm_kafka`` data source.

Without ``--bootstrap-servers`` it starts the embedded broker (Tansu) on loopback and fills the topic
with demo data first, so it runs on a fresh machine; ``--master`` goes to Spark (``local[*]`` by
default, or ``spark://host:port`` for a standalone cluster). It shows records/s, batches and the lag per
partition while it runs, and ends with a summary: records written, files, time, how to read them back.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..broker import BROKER_KINDS
from . import _ingest_preflight as preflight
from . import _ingest_typed as typed_flags
from ._ctrl_c import ctrl_c_stops
from ._help import plain
from ._ingest_checkpoint import ForeignCheckpoint, check, record
from ._ingest_progress import progress_directory, watch
from ._spark_quiet import jvm_stderr_filtered, log_config, mute_jvm_stderr

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_TRIGGERS = ("available-now", "once")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="fsm-consumer ingest", description=plain(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
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
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="start over: move the output and checkpoint aside (renamed, never deleted) instead of going on from them",
    )
    ap.add_argument("--quiet", action="store_true", help="no progress display")
    ap.add_argument(
        "--progress-every",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="when output is not a terminal: a progress line this often (default 5)",
    )
    ap.add_argument(
        "--wait-for-topic",
        action="store_true",
        help="with --bootstrap-servers: a topic that does not exist yet is waited for (else an error naming the "
        "topics there)",
    )
    typed_flags.add_arguments(ap)
    ap.add_argument("--debug", action="store_true", help="on an error, show the traceback too")
    ap.add_argument(
        "--spark-log-level",
        default="ERROR",
        help="Spark's own log level for the job (default ERROR: no startup warnings; WARN or INFO for more)",
    )
    return ap


def _flag_options(args: argparse.Namespace) -> dict[str, str]:
    """The source options the job's own flags set (an --option of the same key wins)."""
    options = {"startingOffsets": args.starting_offsets}
    if args.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
    if args.commit_to_group:
        options["commitToGroup"] = args.commit_to_group
    return options


def _trigger(text: str) -> dict[str, Any]:
    if text == "available-now":
        return {"availableNow": True}
    if text == "once":
        return {"once": True}
    return {"processingTime": text}


def _loopback(master: str) -> bool:
    """Spark runs on this machine only: keep its driver on 127.0.0.1 too."""
    return master.startswith("local") or master.split("://", 1)[-1].split(":")[0] in ("127.0.0.1", "localhost")


def _session(master: str, fmt: str, local: bool, log_level: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this interpreter and package
    if local:
        # Spark's "your hostname resolves to a loopback address" warning: the driver is on loopback by choice
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
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
    # Spark's log level from the JVM's first line (setLogLevel comes too late for its startup warnings,
    # such as the native-hadoop one), and the JVM's own incubator-module warning left out
    log_config(log_level)
    with jvm_stderr_filtered():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.upper())
    return spark


def ingest(argv: list[str]) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.bootstrap_servers and "--broker" in argv:
        ap.error("--broker starts a loopback broker; with --bootstrap-servers there is none to start")
    if typed_flags.typed(args) and args.bootstrap_servers and not args.schema_registry:
        ap.error("--value-format/--key-format avro, protobuf or json-schema need --schema-registry URL")
    extra = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            ap.error(f"--option {item!r} is not KEY=VALUE")
        extra[key] = value
    try:
        return _run(args, extra)
    except preflight.Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted before the query started: nothing was written", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a tool's error is a line; --debug shows the traceback
        if args.debug:
            raise
        print(f"error: {_plain(exc)}\n(run again with --debug for the traceback)", file=sys.stderr)
        return 1


def _whole(exc: BaseException) -> str:
    """An error's message with those of its Java causes (a Python worker's exception is in a cause's)."""
    texts = [str(getattr(exc, "_desc", "") or exc)]  # pyspark's StreamingQueryException: the Java message
    cause = getattr(exc, "java_exception", None)
    for _ in range(8):  # a chain of causes, not a cycle
        if cause is None:
            break
        try:
            texts.append(str(cause.toString()))
            cause = cause.getCause()
        except Exception:  # noqa: BLE001 - the JVM may be gone: what was read is what there is
            break
    return "\n".join(texts)


def _plain(exc: BaseException) -> str:
    """An error's message as one line: a Java exception's own message, not py4j's "An error occurred while
    calling o123.start" nor its stack trace."""
    java = getattr(exc, "java_exception", None)  # py4j's Py4JJavaError
    if java is not None:
        try:
            text = str(java.getMessage() or java.toString())
        except Exception:  # noqa: BLE001 - the JVM may be gone; its text is then all there is
            text = str(exc)
    else:
        text = str(exc)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _run(args: argparse.Namespace, extra: dict[str, str]) -> int:
    from ..broker._kafka_jars import KafkaNotFoundError, find_java

    try:  # Spark runs on Java: said up front, not as Spark's JAVA_GATEWAY_EXITED after the broker's fill
        find_java()
    except KafkaNotFoundError:
        raise preflight.Refused(
            "no java on PATH (and no JAVA_HOME): Spark needs Java 17 or later "
            "(e.g. apt-get install openjdk-17-jre-headless, or set JAVA_HOME)"
        ) from None
    out = Path(args.to).resolve()
    checkpoint = Path(args.checkpoint).resolve() if args.checkpoint else out / "_checkpoint"
    # the checks that need no broker first: a mistake there costs no broker start, fill or Spark start
    registry_url = args.schema_registry
    options = {
        **_flag_options(args),
        **typed_flags.source_options(args, registry_url or "http://127.0.0.1:8081"),
        **extra,
    }
    preflight.read_options(options, args.bootstrap_servers or "127.0.0.1:9092", args.topic)
    preflight.writable(out, "--to")
    preflight.writable(checkpoint, "--checkpoint")
    t0 = time.monotonic()
    with ExitStack() as stack:
        total_hint = None
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from ..broker import start_broker
            from ..broker._kinds import describe
            from ._demo import _fill

            try:
                broker = stack.enter_context(start_broker(args.broker))
            except KafkaNotFoundError as exc:
                raise preflight.Refused(str(exc)) from None
            bootstrap = broker.bootstrap_servers
            print(
                f"broker: {describe(broker)}; filling {args.topic!r} with "
                f"{args.records:,} records of "
                + (
                    f"{args.value_format} (two versions of one schema, confluent-kafka's serializer)"
                    if args.value_format != "binary"
                    else f"{args.record_size} B"
                )
                + f" in {args.partitions} partitions"
            )
            broker.create_topic(args.topic, partitions=args.partitions)
            value = None
            if typed_flags.typed(args):
                registry_url = typed_flags.start_registry(stack, print)
                options.update(typed_flags.source_options(args, registry_url))
                if args.value_format != "binary":
                    value = typed_flags.demo_values(args.value_format, registry_url, args.topic, args.records)
            _fill(broker, args.topic, args.records, args.record_size, value)
            total_hint = args.records
        found = preflight.lookup(preflight.read_options(options, bootstrap, args.topic), bootstrap)
        try:
            preflight.topic_exists(found, args.topic, bootstrap, wait=args.wait_for_topic, say=print)
            source = preflight.identity(found, bootstrap, args.topic)
        finally:
            found.close()
        try:
            resumed = check(
                checkpoint, out, source, embedded=args.bootstrap_servers is None, fresh=args.fresh, say=print
            )
        except ForeignCheckpoint as exc:
            raise preflight.Refused(str(exc)) from None
        print(f"spark: starting (master {args.master}); this takes a while the first time")
        started = time.monotonic()
        spark = _session(args.master, args.format, local=_loopback(args.master), log_level=args.spark_log_level)
        stack.callback(spark.stop)
        print(f"spark: up in {time.monotonic() - started:.1f} s; planning the first batch")
        before = _count(spark, out, args.format) if resumed else 0
        from ..spark import register

        register(spark)
        progress_dir = progress_directory()
        stack.callback(shutil.rmtree, progress_dir, True)
        reader = (
            spark.readStream.format("fsm_kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", args.topic)
            .option("progressPath", progress_dir)
        )
        for key, option in options.items():
            reader = reader.option(key, option)
        deadline = None if args.duration is None else time.monotonic() + args.duration
        rows = restarts = 0
        with ctrl_c_stops(first=(lambda: None) if args.debug else mute_jvm_stderr) as stop:
            while True:
                df = reader.load()  # a typed read chooses its reader schema here: the latest version now
                if typed_flags.typed(args):
                    print(f"schema: value {df.schema['value'].dataType.simpleString()}")
                query = (
                    df.writeStream.format(args.format)
                    .option("path", str(out))
                    .option("checkpointLocation", str(checkpoint))
                    .option("mergeSchema", "true")  # Delta: a new version's columns join the table
                    .trigger(**_trigger(args.trigger))
                    .queryName("fsm_consumer_ingest")
                    .start()
                )
                record(checkpoint, source)
                rows += watch(
                    query,
                    progress_dir,
                    title=f"fsm-consumer ingest: {args.topic} -> {args.to}",
                    quiet=args.quiet,
                    every_s=args.progress_every,
                    deadline=deadline,
                    stop=stop,
                )
                failed = query.exception()
                if failed is None:
                    break
                if typed_flags.restart_for_newer(_whole(failed), restarts, print) and not stop():
                    restarts += 1
                    continue
                raise RuntimeError(f"the query failed: {_plain(failed)}")
        count = _count(spark, out, args.format)
        files = sorted(p for p in out.rglob("*.parquet"))
        took = time.monotonic() - t0
        new = count - before
        if stop():
            print(
                f"interrupted: the query stopped at its last whole batch; this run wrote {new:,} records "
                f"({count:,} in the output now) and its checkpoint {checkpoint} says where it stopped: "
                + (
                    "the same command again resumes from there"
                    if args.bootstrap_servers
                    else "the embedded broker stops with this run, so a rerun starts afresh on new demo data (with "
                    "--bootstrap-servers, the same command resumes)"
                )
            )
            return 130
        print(
            f"done: this run wrote {new:,} records ({count:,} in the output now, {len(files)} {args.format} files "
            f"under {out}) in {took:.1f} s; checkpoint {checkpoint}"
            + ("; nothing new since the checkpoint" if resumed and new == 0 else "")
        )
        if new != rows:
            print(f"error: the batches of this run took in {rows:,} records but {new:,} were written", file=sys.stderr)
            return 1
        if total_hint is not None and new != total_hint:
            print(f"error: {total_hint:,} records were produced, this run wrote {new:,}", file=sys.stderr)
            return 1
        print(
            f"read them back: spark.read.format({args.format!r}).load({str(out)!r})"
            + (f"   or: pyarrow.parquet.read_table({str(out)!r})" if args.format == "parquet" else "")
        )
        aside = sorted(out.parent.glob(f"{out.name}.previous-*"))
        if aside:
            print(
                f"note: {len(aside)} earlier output{'s' if len(aside) > 1 else ''} moved aside by earlier runs "
                f"sit beside it ({out.name}.previous-*, with their checkpoints): delete them when no longer needed"
            )
    return 0


def _count(spark: SparkSession, out: Path, fmt: str) -> int:
    """Records in the output as its format's log lists them (Spark's ``_spark_metadata``, Delta's log: a
    killed batch's leftover files are not counted); 0 when there is no output yet."""
    log = out / ("_delta_log" if fmt == "delta" else "_spark_metadata")
    # a run stopped before its first batch committed leaves the log without an entry: nothing to read yet
    if not log.is_dir() or not any(p.name[:1].isdigit() for p in log.iterdir()):
        return 0
    return int(spark.read.format(fmt).option("mergeSchema", "true").load(str(out)).count())
