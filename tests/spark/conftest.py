"""A local Spark session (``local[2]``, loopback only) shared by the Spark tests. Spark's JVM is
started once per test session and stopped at its end."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra: pip install -e '.[spark]'")

from fsm_consumer.cli._ingest_progress import PROGRESS_PREFIX  # noqa: E402


@pytest.fixture(scope="session")
def spark(tmp_path_factory) -> Iterator[pyspark.sql.SparkSession]:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this venv (and this package)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = SparkSession.builder
    connector = _spark_kafka_jars()
    if connector:  # Spark's own Kafka source, the peer fsm_kafka is compared with (test_spark_kafka_parity.py)
        builder = builder.config("spark.jars", ",".join(connector))
    session = (
        builder.master("local[2]")
        .appName("fsm-consumer-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.streaming.stopTimeout", "10s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


SPARK_KAFKA_MISSING: list[str] = []  # why Spark's connector could not be had (said once by the tests that need it)


def _spark_kafka_jars() -> list[str]:
    from fsm_consumer.broker._kafka_jars import KafkaNotFoundError, spark_kafka_jars

    try:
        return [str(j) for j in spark_kafka_jars()]
    except KafkaNotFoundError as exc:
        SPARK_KAFKA_MISSING.append(str(exc))
        return []


@pytest.fixture
def spark_kafka(spark, broker):
    """``spark_kafka(subscribe="t", ...)``: a DataFrameReader of Spark's own Kafka source on the session's
    broker (``stream=True``: a DataStreamReader); the test is skipped, saying why, when the connector's jars
    were not fetched (``fsm-consumer broker fetch --kind spark-kafka``), failed under FSM_REQUIRE_SPARK_KAFKA=1
    (CI, which fetches them)."""
    if SPARK_KAFKA_MISSING:
        if os.environ.get("FSM_REQUIRE_SPARK_KAFKA") == "1":
            pytest.fail(
                f"Spark's Kafka connector is required here (FSM_REQUIRE_SPARK_KAFKA=1) but: {SPARK_KAFKA_MISSING[0]}"
            )
        pytest.skip(SPARK_KAFKA_MISSING[0])

    return _reader_of(spark, broker, "kafka")


@pytest.fixture(scope="session")
def fsm_kafka(spark, broker):
    """``fsm_kafka(subscribe="t", ...)`` -> a DataFrameReader of the fsm_kafka source on the session's
    broker with the options set; ``fsm_kafka(stream=True, ...)`` -> a DataStreamReader."""
    from fsm_consumer.spark import register

    register(spark)
    return _reader_of(spark, broker, "fsm_kafka")


def _reader_of(spark, broker, source: str):
    """``reader(stream=False, **options)`` of ``source`` on ``broker``, the options set."""

    def reader(stream: bool = False, **options):
        r = (spark.readStream if stream else spark.read).format(source)
        r = r.option("kafka.bootstrap.servers", broker.bootstrap_servers)
        for key, value in options.items():
            r = r.option(key, value)
        return r

    return reader


def _start_ingest(*args: str, quiet: bool = True, as_a_user: bool = False) -> subprocess.Popen[str]:
    """``as_a_user``: the environment a user's shell has (no SPARK_LOCAL_IP set for the job: it sets it)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    if as_a_user:
        env.pop("SPARK_LOCAL_IP", None)
    else:
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return subprocess.Popen(
        [sys.executable, "-m", "fsm_consumer.cli", "ingest", *(["--quiet"] if quiet else []), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the job and its JVM in one process group: killed together
    )


@pytest.fixture
def start_ingest():
    """``start_ingest(*args, quiet=True, as_a_user=False)``: ``fsm-consumer ingest [--quiet] ARGS`` in its own
    process group (a Popen, text output, stderr with stdout, piped); every one still running at teardown is
    killed with its JVM."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, **how: bool) -> subprocess.Popen[str]:
        started.append(_start_ingest(*args, **how))
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # a run killed outright leaves its progress directory (the next run would clear it ten minutes on)
        for left in Path(tempfile.gettempdir()).glob(f"{PROGRESS_PREFIX}{proc.pid}-*"):
            shutil.rmtree(left, ignore_errors=True)
