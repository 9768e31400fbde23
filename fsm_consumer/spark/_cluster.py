"""A Spark standalone cluster started from the pyspark installation itself: one master and N worker
processes on 127.0.0.1 (``spark://127.0.0.1:PORT``), for running the ingest job on a cluster without a
Spark download. The processes are guarded like the embedded broker's (own process group, killed with
their parent, stopped on exit).

    with StandaloneCluster(workers=1, cores=2) as cluster:
        spark = SparkSession.builder.master(cluster.master_url)...
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..broker._ports import LOOPBACK, free_loopback_port
from ..broker._process import GuardedProcess


class ClusterStartError(RuntimeError):
    """The master or a worker did not come up; the message names which and quotes its log."""


def _spark_class() -> Path:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        raise ClusterStartError(f"{path} is missing: reinstall pyspark (pip install 'fsm_consumer[spark]')")
    return path


class StandaloneCluster:
    def __init__(
        self,
        *,
        workers: int = 1,
        cores: int = 2,
        memory: str = "1g",
        workdir: str | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="fsm-spark-cluster-"))
        self.start_timeout = start_timeout
        self.port = 0
        self.ui_port = 0
        self._procs: list[GuardedProcess] = []

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_LOCAL_IP=LOOPBACK,
            SPARK_LOCAL_DIRS=str(self.workdir / "local"),
            SPARK_LOG_DIR=str(self.workdir / "logs"),
            SPARK_WORKER_DIR=str(self.workdir / "work"),
            PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
        )  # executors run this package
        return env

    def _spawn(self, name: str, argv: list[str]) -> GuardedProcess:
        log = self.workdir / f"{name}.log"
        proc = GuardedProcess([str(_spark_class()), *argv], log_path=log, env=self._env())
        self._procs.append(proc)
        return proc

    def _status(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.ui_port}/json/", timeout=2) as answer:
                status: dict[str, Any] = json.load(answer)  # the master's JSON status page: an object
                return status
        except (OSError, ValueError):
            return None

    def _wait(self, what: str, proc: GuardedProcess, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                break
            if ready():
                return
            time.sleep(0.2)
        tail = proc.log_path.read_text(errors="replace")[-2000:] if proc.log_path.exists() else ""
        self.stop()
        raise ClusterStartError(
            f"the Spark {what} did not come up within {self.start_timeout:g} s (log {proc.log_path}):\n{tail}"
        )

    def start(self) -> StandaloneCluster:
        for sub in ("local", "logs", "work"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_loopback_port(), free_loopback_port()
        master = self._spawn(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                LOOPBACK,
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
            ],
        )
        self._wait("master", master, lambda: (self._status() or {}).get("status") == "ALIVE")
        for i in range(self.workers):
            worker = self._spawn(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    LOOPBACK,
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    str(free_loopback_port()),
                    "--work-dir",
                    str(self.workdir / "work"),
                ],
            )

            def workers_up(n: int = i + 1) -> bool:
                return sum(1 for w in (self._status() or {}).get("workers", []) if w.get("state") == "ALIVE") >= n

            self._wait(f"worker {i}", worker, workers_up)
        return self

    def alive_workers(self) -> int:
        return sum(1 for w in (self._status() or {}).get("workers", []) if w.get("state") == "ALIVE")

    def stop(self) -> None:
        for proc in reversed(self._procs):  # workers first, then the master
            proc.stop()
        self._procs.clear()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<StandaloneCluster {self.master_url} workers={self.workers} cores={self.cores}>"
