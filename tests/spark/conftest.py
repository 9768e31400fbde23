"""A local Spark session (``local[2]``, loopback only) shared by the Spark tests. Spark's JVM is
started once per test session and stopped at its end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra: pip install -e '.[spark]'")


@pytest.fixture(scope="session")
def spark(tmp_path_factory) -> Iterator[pyspark.sql.SparkSession]:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this venv (and this package)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
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


@pytest.fixture(scope="session")
def fsm_kafka(spark, broker):
    """``fsm_kafka(subscribe="t", ...)`` -> a DataFrameReader of the fsm_kafka source on the session's
    broker with the options set; ``fsm_kafka(stream=True, ...)`` -> a DataStreamReader."""
    from fsm_consumer.spark import register

    register(spark)

    def reader(stream: bool = False, **options):
        r = (spark.readStream if stream else spark.read).format("fsm_kafka")
        r = r.option("kafka.bootstrap.servers", broker.bootstrap_servers)
        for key, value in options.items():
            r = r.option(key, value)
        return r

    return reader


def _start_ingest(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.Popen(
        [sys.executable, "-m", "fsm_consumer.cli", "ingest", "--quiet", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the job and its JVM in one process group: killed together
    )


@pytest.fixture
def start_ingest():
    """``start_ingest(*args)``: ``fsm-consumer ingest --quiet ARGS`` in its own process group (a Popen, text
    output); every one still running at teardown is killed with its JVM."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        started.append(_start_ingest(*args))
        return started[-1]

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
