"""EmbeddedBroker: a real Tansu (Kafka-compatible) broker on 127.0.0.1 for tests and demos."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

from ._admin import LoopbackBroker, new_cluster_id
from ._binary import locate_tansu
from ._errors import BrokerRequestError, BrokerStartError
from ._logtail import tail
from ._moto import LocalS3
from ._ports import LOOPBACK, free_loopback_port
from ._process import GuardedProcess
from ._wire import fetch_api_versions

Storage = Literal["memory", "s3"]
_T = TypeVar("_T")

# An auto-picked port can be grabbed by someone else between picking and binding.
_PORT_ATTEMPTS = 3


class _TansuExited(BrokerStartError):
    """Tansu died during startup (e.g. its port was taken): a retry on a new port may help."""


class EmbeddedBroker(LoopbackBroker):
    """A Tansu broker child process listening on 127.0.0.1, started on construction.

    ``storage="memory"`` keeps everything in the broker process (lost on restart);
    ``storage="s3"`` stores topics in a bucket of a private moto S3 server that
    lives as long as this object, so data survives :meth:`restart`.

    The broker never outlives this object's owner: see ``_process`` for how.
    Not thread-safe; start it from a long-lived thread (PDEATHSIG caveat).
    """

    kind = "tansu"

    def __init__(
        self,
        storage: Storage = "memory",
        port: int | None = None,
        *,
        cluster_id: str | None = None,
        bucket: str = "tansu",
        start_timeout: float = 10.0,
        stop_grace: float = 3.0,
        binary: str | os.PathLike[str] | None = None,
        advertised_port: int | None = None,
    ) -> None:
        if storage not in ("memory", "s3"):
            raise ValueError(f"storage must be 'memory' or 's3', not {storage!r}")
        self.storage: Storage = storage
        #: a new id per broker (as Kafka's), kept across its restarts: the data of one is not taken for another's
        self.cluster_id = cluster_id if cluster_id is not None else new_cluster_id()
        self.bucket = bucket
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self.binary = locate_tansu(binary)
        self._fixed_port = port is not None
        self._port = port if port is not None else free_loopback_port()
        #: the port Metadata names for this broker (default its own): a proxy in front of it (testing.FaultProxy)
        self.advertised_port = advertised_port
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._s3: LocalS3 | None = None
        self._process: GuardedProcess | None = None
        self._api_versions: dict[int, tuple[int, int]] = {}
        #: Seconds the last start took, from spawn until ApiVersions and Metadata answered.
        self.startup_seconds: float | None = None
        self.start()

    # -- addresses --------------------------------------------------------------------

    @property
    def log_path(self) -> Path | None:
        return Path(self._workdir.name) / "tansu.log" if self._workdir is not None else None

    @property
    def storage_url(self) -> str:
        return f"s3://{self.bucket}/" if self.storage == "s3" else "memory://tansu/"

    @property
    def s3(self) -> LocalS3 | None:
        """The moto server behind ``storage="s3"`` (``None`` for memory storage)."""
        return self._s3

    # -- lifecycle --------------------------------------------------------------------

    def _launch(self) -> None:
        self._workdir = tempfile.TemporaryDirectory(prefix="fsm-consumer-tansu-", ignore_cleanup_errors=True)
        if self.storage == "s3" and self._s3 is None:
            self._s3 = LocalS3(self.bucket, log_dir=Path(self._workdir.name))
        self._start_tansu()

    def _relaunch(self) -> None:  # the same port and storage (the S3 bucket stays)
        self._start_tansu(allow_new_port=False)

    def _release(self) -> None:
        if self._s3 is not None:
            self._s3.stop()
            self._s3 = None

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<EmbeddedBroker {self.bootstrap_servers} storage={self.storage} {state}>"

    # -- internals --------------------------------------------------------------------

    def _tansu_argv(self) -> list[str]:
        url = f"tcp://{LOOPBACK}:{self._port}"
        return [
            self.binary,
            "broker",
            "--listener-url", url,
            # Clients reconnect to what Metadata advertises: the listener, or a proxy in front of it.
            "--advertised-listener-url", f"tcp://{LOOPBACK}:{self.advertised_port or self._port}",
            "--storage-engine", self.storage_url,
            "--cluster-id", self.cluster_id,
        ]  # fmt: skip

    def _tansu_env(self) -> dict[str, str]:
        if self._s3 is None:
            return dict(os.environ)
        # Drop the caller's AWS settings (profiles, real credentials, CA bundles):
        # only the local moto endpoint may be used.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(self._s3.tansu_env())
        env["NO_PROXY"] = env["no_proxy"] = LOOPBACK
        return env

    def _start_tansu(self, *, allow_new_port: bool = True) -> None:
        attempts = _PORT_ATTEMPTS if (allow_new_port and not self._fixed_port) else 1
        for attempt in range(1, attempts + 1):
            try:
                self._spawn_and_wait()
                return
            except _TansuExited as exc:
                if attempt == attempts:
                    raise BrokerStartError(str(exc)) from None
                self._port = free_loopback_port()

    def _spawn_and_wait(self) -> None:
        assert self.log_path is not None
        started = time.monotonic()
        self._spawn(self._tansu_argv(), env=self._tansu_env(), stop_grace=self.stop_grace)
        deadline = started + self.start_timeout
        try:
            self._api_versions = self._wait_until(
                deadline, lambda: fetch_api_versions(LOOPBACK, self._port, timeout=0.25), "answer ApiVersions"
            )
            # ApiVersions is served without touching storage; Metadata reads the
            # cluster's meta.json, so it catches an unreachable or misconfigured S3
            # (not a missing bucket: Tansu reads that 404 as "no metadata yet").
            self._wait_until(deadline, lambda: self._metadata(None, timeout=1.0), "answer Metadata (storage check)")
        except BrokerStartError:
            self._stop_process()
            raise
        self.startup_seconds = time.monotonic() - started

    def _wait_until(self, deadline: float, probe: Callable[[], _T], what: str) -> _T:
        """Retry ``probe`` until it succeeds; fail fast if tansu exits, else at ``deadline``."""
        assert self._process is not None and self.log_path is not None
        while True:
            try:
                return probe()
            except BrokerRequestError as exc:
                last_error = exc
            if not self._process.alive():
                raise _TansuExited(
                    f"tansu exited with code {self._process.returncode} before it could {what} "
                    f"on {self.bootstrap_servers}; end of its log:\n{tail(self.log_path)}"
                )
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"tansu on {self.bootstrap_servers} (storage {self.storage_url}) did not {what} "
                    f"within {self.start_timeout:.1f}s: {last_error}; "
                    f"end of its log:\n{tail(self.log_path)}"
                )
            time.sleep(0.01)
