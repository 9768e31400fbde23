"""A Spark session that starts without noise a user did not ask for (``fsm-consumer ingest``).

Spark's startup speaks before ``setLogLevel`` can be called: its default log4j profile announces itself
and its level, and warns of the native-hadoop library and of a hostname on loopback; the JVM itself warns
of the incubator module Spark 4 adds (``jdk.incubator.vector``). ``log_config`` gives Spark a log4j2
configuration at the level asked for (a ``SPARK_CONF_DIR`` holding only ``log4j2.properties``, unless the
user has a ``SPARK_CONF_DIR`` of their own, which then rules); ``jvm_stderr_filtered`` relays what the JVM
writes on stderr except that one line, for as long as the JVM runs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LEVELS = ("off", "fatal", "error", "warn", "info", "debug", "trace", "all")
_NOISE = (b"WARNING: Using incubator modules:",)  # the JVM's own, not a log line: no level silences it


def log_config(level: str) -> None:
    """Make Spark's driver log at ``level`` from its first line (sets ``SPARK_CONF_DIR`` for the JVM
    about to start, unless the user set one)."""
    level = level.strip().lower()
    if level not in LEVELS:
        raise SystemExit(f"--spark-log-level {level!r}: one of {', '.join(v.upper() for v in LEVELS)}")
    if os.environ.get("SPARK_CONF_DIR"):
        return
    conf = Path(tempfile.mkdtemp(prefix="fsm-ingest-spark-conf-"))
    atexit.register(shutil.rmtree, conf, True)  # read once, when the JVM starts; no run should leave it behind
    (conf / "log4j2.properties").write_text(
        f"""rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# a shell's (PySpark's too) level comes from these loggers; unset, Spark says it sets WARN
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
logger.pyspark.name = org.apache.spark.api.python.PythonGatewayServer
logger.pyspark.level = {level}
"""
        + _task_failures(level)
    )
    os.environ["SPARK_CONF_DIR"] = str(conf)


# the loggers that print a failed task's Python traceback again and again (the task, its writer, the stage, the
# query): the job says a query's failure itself, in a line (and restarts one that met a newer schema version)
_TASK_FAILURE_LOGGERS = (
    "org.apache.spark.util.Utils",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.sql.execution.streaming",
)


def _task_failures(level: str) -> str:
    if level != "error":  # WARN, INFO, DEBUG: everything, as asked
        return ""
    return "".join(
        f"logger.task{i}.name = {name}\nlogger.task{i}.level = off\n" for i, name in enumerate(_TASK_FAILURE_LOGGERS)
    )


@contextmanager
def jvm_stderr_filtered() -> Iterator[threading.Thread | None]:
    """Around the start of the JVM: it inherits a pipe as its stderr, and a thread relays the pipe to this
    process's stderr line by line, dropping the known noise. This process's own stderr is restored at once;
    the thread ends when the JVM does (the caller may join it after stopping the session so that nothing
    the JVM wrote last is lost)."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to speak of
        yield None
        return
    read_end, write_end = os.pipe()
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)
    relay = threading.Thread(target=_relay, args=(read_end, saved), name="jvm-stderr", daemon=True)
    relay.start()
    try:
        yield relay
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # ours again; the JVM keeps the pipe (the relay keeps the saved descriptor)


_muted = threading.Event()


def mute_jvm_stderr() -> None:
    """From now on the relay drops everything: once the user has stopped the job (Ctrl-C), the errors of
    the tasks the stop cancels (aborted writes, a Python worker's broken pipe) are its expected echo."""
    _muted.set()


def _relay(read_end: int, target: int) -> None:
    with os.fdopen(read_end, "rb") as lines, os.fdopen(target, "wb", buffering=0) as out:
        for line in lines:
            if not line.startswith(_NOISE) and not _muted.is_set():
                out.write(line)
