"""What the brokers (Tansu and Apache Kafka) share: their loopback address, process, context manager,
and topic administration over the wire."""

from __future__ import annotations

import base64
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kafka.errors import (
    LeaderNotAvailableError,
    NotLeaderForPartitionError,
    UnknownTopicOrPartitionError,
    for_code,
)
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from ._errors import BrokerNotRunningError, BrokerRequestError, BrokerStartError, TopicCreateError
from ._ports import LOOPBACK
from ._process import GuardedProcess
from ._wire import pick_version, send_request

# Produce errors that say the batch was not appended (no leader yet): safe to send again
_NOT_APPENDED = frozenset(
    e.errno for e in (UnknownTopicOrPartitionError, LeaderNotAvailableError, NotLeaderForPartitionError)
)


def _produce_request(topic: str, batches: Mapping[int, bytes], timeout: float) -> ProduceRequest:
    topic_type = ProduceRequest.TopicProduceData
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=int(timeout * 1000),
        topic_data=[
            topic_type(
                name=topic,
                partition_data=[
                    topic_type.PartitionProduceData(index=p, records=batch) for p, batch in sorted(batches.items())
                ],
            )
        ],
    )


def _error_name(code: int) -> str:
    name: str = for_code(code).__name__  # kafka-python's error class for the code
    return name


class LoopbackBroker:
    """A broker child process on 127.0.0.1 and a temporary directory that lives from the first start to
    ``stop()``. Subclasses say how to launch it the first time (``_launch``: make the directory, pick
    ports, spawn) and again on the same directory and ports (``_relaunch``); the lifecycle is here."""

    #: Which broker this is: "tansu" or "kafka" (what ``--broker`` of the CLI takes).
    kind: str = ""
    _port: int
    _api_versions: dict[int, tuple[int, int]]
    _process: GuardedProcess | None
    _workdir: tempfile.TemporaryDirectory[str] | None

    def _launch(self) -> None:
        raise NotImplementedError

    def _relaunch(self) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        """What besides the process and the directory a stop gives back (Tansu's S3 server)."""

    def start(self) -> None:
        """Start the broker if it is not running; blocks until it answers. A failed start leaves nothing
        behind."""
        if self.running:
            return
        try:
            self._launch() if self._workdir is None else self._relaunch()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the broker and remove its data. Idempotent."""
        self._stop_process()
        self._release()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def restart(self) -> None:
        """Stop and start the broker on the same port(s) and data."""
        if self._workdir is None:
            raise BrokerNotRunningError("restart() after stop(): use start() instead")
        self._stop_process()
        try:
            self._relaunch()
        except BaseException:
            self.stop()
            raise

    def kill(self) -> None:
        """Crash the broker: SIGKILL, no shutdown of any kind. Its data stays (Tansu's only with S3 storage):
        ``start()`` brings it back on the same port(s) and data, as after a crash of its process."""
        if self._process is not None:
            self._process.kill()
            self._process = None

    def _spawn(self, argv: list[str], **options: Any) -> GuardedProcess:
        """The broker's process, logging to ``log_path``; a failure to spawn is a ``BrokerStartError``."""
        log_path = self.log_path
        assert log_path is not None  # the directory exists from _launch() until stop()
        try:
            self._process = GuardedProcess(argv, log_path=log_path, **options)
        except (OSError, subprocess.SubprocessError) as exc:
            raise BrokerStartError(f"could not spawn {argv[0]}: {exc}") from exc
        return self._process

    def _stop_process(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None

    @property
    def log_path(self) -> Path | None:
        raise NotImplementedError

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def port(self) -> int:
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self._port}"

    @property
    def pid(self) -> int | None:
        """Pid of the running broker process, ``None`` when stopped."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.alive()

    @property
    def api_versions(self) -> dict[int, tuple[int, int]]:
        """api_key -> (min, max) as advertised by the broker at its last start."""
        return dict(self._api_versions)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None, *, timeout: float = 10.0
    ) -> None:
        """Create ``name`` and wait until Metadata shows all its partitions with a leader."""
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, not {partitions}")
        self._require_running()
        version = pick_version(self._api_versions, CreateTopicsRequest)
        topic_type = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(
            topics=[
                topic_type(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    assignments=[],
                    configs=[
                        topic_type.CreatableTopicConfig(name=key, value=str(value))
                        for key, value in (config or {}).items()
                    ],
                )
            ],
            timeout_ms=int(timeout * 1000),
            validate_only=False,
        )
        response = self._request(request, CreateTopicsResponse, version, timeout=timeout)
        (result,) = response.topics
        if result.error_code != 0:
            raise TopicCreateError(
                f"creating topic {name!r} failed: {_error_name(result.error_code)}"
                + (f" ({result.error_message})" if result.error_message else "")
            )
        deadline = time.monotonic() + timeout
        expected = list(range(partitions))
        while (seen := self.topic_partitions(name)) != expected:
            if time.monotonic() > deadline:
                raise TopicCreateError(
                    f"topic {name!r} created but Metadata shows partitions {seen}, "
                    f"expected {expected} after {timeout:.1f}s"
                )
            time.sleep(0.02)

    def produce(self, topic: str, batches: Mapping[int, bytes], *, timeout: float = 10.0) -> dict[int, int]:
        """Append one record batch (magic 2, e.g. from kafka-python's ``MemoryRecordsBuilder``) to each
        partition of ``batches``, acknowledged by all in-sync replicas; returns the base offset each got.
        Demo and test data: one batch a partition per request (Kafka takes no more). A partition whose leader
        is not ready yet (a topic just created) is sent again until ``timeout``."""
        self._require_running()
        version = min(pick_version(self._api_versions, ProduceRequest), 12)  # 13 names topics by id
        deadline = time.monotonic() + timeout
        pending, base = dict(batches), {}
        while pending:
            response = self._request(
                _produce_request(topic, pending, timeout), ProduceResponse, version, timeout=timeout
            )
            answered, again = set(), {}
            for answer in response.responses:
                for part in answer.partition_responses:
                    answered.add(part.index)
                    if part.error_code == 0:
                        base[part.index] = part.base_offset
                    elif part.error_code in _NOT_APPENDED and part.index in pending and time.monotonic() < deadline:
                        again[part.index] = pending[part.index]
                    else:
                        raise BrokerRequestError(
                            f"producing to {topic}-{part.index} failed: {_error_name(part.error_code)}"
                            + (f" ({part.error_message})" if getattr(part, "error_message", None) else "")
                        )
            if answered != set(pending):
                raise BrokerRequestError(
                    f"producing to {topic}: answers for {sorted(answered)}, sent {sorted(pending)}"
                )
            pending = again
            if pending:
                time.sleep(0.05)
        return base

    def topic_names(self) -> set[str]:
        """Every topic the broker has (asked without naming one, so none is created by asking)."""
        return {topic.name for topic in self._metadata(None).topics if topic.error_code == 0}

    def topic_partitions(self, name: str) -> list[int]:
        """Sorted indexes of ``name``'s partitions that have a leader; [] if unknown."""
        response = self._metadata([name])
        for topic in response.topics:
            if topic.name == name and topic.error_code == 0:
                return sorted(p.partition_index for p in topic.partitions if p.error_code == 0 and p.leader_id >= 0)
        return []

    def _require_running(self) -> None:
        if not self.running:
            raise BrokerNotRunningError(f"{self!r} is not running")

    def _request(self, request: Any, response_type: Any, version: int, *, timeout: float = 5.0) -> Any:
        return send_request(LOOPBACK, self._port, request, response_type, version, timeout=timeout)

    def _metadata(self, topics: list[str] | None, *, timeout: float = 5.0) -> Any:
        version = pick_version(self._api_versions, MetadataRequest)
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        return self._request(request, MetadataResponse, version, timeout=timeout)


def new_cluster_id() -> str:
    """A new cluster id for a loopback broker, in Kafka's format: a UUID as URL-safe base64 without padding
    (22 characters); never one beginning with "-", which kafka-storage's command line would take for an
    option (as Kafka's own Uuid.randomUuid avoids): one start in 64 failed with "argument --cluster-id:
    expected one argument"."""
    while True:
        made = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not made.startswith("-"):
            return made
