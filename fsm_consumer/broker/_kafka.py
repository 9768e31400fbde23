"""KafkaBroker: a single-node Apache Kafka 4.x (KRaft, combined broker and controller) on 127.0.0.1.

The same surface as ``EmbeddedBroker`` (context manager, ``start``/``stop``/``restart``,
``bootstrap_servers``, ``create_topic``, ``topic_partitions``, the log's tail in start errors). The
jars come from the cache ``fetch_kafka()`` fills (``fsm-consumer broker fetch --kind kafka``); the
storage is formatted for a static one-voter quorum and the server runs as ``java -cp libs/*
kafka.Kafka server.properties`` with a small heap, so it starts in a few seconds on 2 cores.
Settings are those a test wants: no initial rebalance delay (the point of the reference broker is
prompt JoinGroups), sessions down to 500 ms, replication factor 1 for the internal topics.

Ports are picked free before the JVM starts, which takes seconds to bind them: another process (a
broker of another job) may take one in between. The first start then retries on fresh ports
(``_PORT_ATTEMPTS`` in all, storage formatted anew), as ``EmbeddedBroker`` does for Tansu. A conflict
is told from Kafka exiting while one of its ports is held by someone else (its own log says nothing:
the jars carry no SLF4J binding), or from another broker (another cluster id) answering on the port.
A port given by the caller, and ``restart()`` (the same ports), are not changed: a conflict there raises.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from ._admin import LoopbackBroker, new_cluster_id
from ._errors import BrokerRequestError, BrokerStartError
from ._kafka_jars import KAFKA_VERSION, find_java, kafka_libs
from ._logtail import tail
from ._ports import LOOPBACK, free_loopback_port, port_in_use
from ._process import GuardedProcess
from ._wire import fetch_api_versions

_HEAP = [
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:auto",
    "-Djava.net.preferIPv4Stack=true",
]  # IPv4 sockets: 127.0.0.1, not ::ffff:127.0.0.1 on a dual-stack one
# An auto-picked port can be taken by someone else while the JVM starts: fresh ports, this many times in all.
_PORT_ATTEMPTS = 3
_BROKER_DEFAULTS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",  # 50 by default: slow to create on 2 cores, useless here
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",  # 6 s by default: tests and demos use short sessions, as Tansu allows
    # the consumer protocol (KIP-848) takes its heartbeat interval and session from the broker: 5 s and 45 s by
    # default, floors included; 1 s and 10 s here, so that its groups settle and fence at test speed
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "10000",
    # a classic group becomes a consumer-protocol group when a member of the new protocol joins it, and back
    # (online migration; the rolling upgrade of docs/usage.md): said here, whatever the release's default
    "group.consumer.migration.policy": "bidirectional",
    # share groups (KIP-932, on by default from 4.2): the share state topic on this one node (3 replicas and 50
    # partitions by default), and locks, heartbeats and sessions at test speed (30 s locks floored at 15 s,
    # 5 s heartbeats and 45 s sessions by default); a group may still set its own lock duration from 1 s
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "4",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.record.lock.duration.ms": "5000",
    "group.share.min.heartbeat.interval.ms": "100",
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.session.timeout.ms": "1000",
    "group.share.session.timeout.ms": "10000",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",  # as Tansu: asking for an unknown topic creates it
    "log.segment.bytes": str(64 * 1024 * 1024),
    "num.network.threads": "2",
    "num.io.threads": "2",
    # a broker started again after a crash (kill()) registers with the controller only once its previous
    # registration's session has run out: 9 s by default, 2 s here (a restart takes ~4 s instead of ~12 s)
    "broker.session.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "500",
}


class _PortTaken(BrokerStartError):
    """Kafka could not have its ports: another process holds ``taken``. Fresh ports may help."""

    def __init__(self, message: str, taken: list[int]) -> None:
        super().__init__(message)
        self.taken = taken


class KafkaBroker(LoopbackBroker):
    """Apache Kafka in a child process on loopback ports, started on construction."""

    kind = "kafka"

    def __init__(
        self,
        port: int | None = None,
        *,
        version: str = KAFKA_VERSION,
        config: Mapping[str, str] | None = None,
        sasl_users: Mapping[str, str] | None = None,
        ssl_keystore: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None,
        start_timeout: float = 60.0,
        stop_grace: float = 10.0,
        advertised_port: int | None = None,
        features: Mapping[str, int] | None = None,
    ) -> None:
        self.version = version
        #: the port Metadata names for the PLAINTEXT listener (default its own): a proxy in front of it
        #: (testing.FaultProxy)
        self.advertised_port = advertised_port
        # feature levels the storage is formatted with (kafka-storage format --feature), e.g. {"share.version": 0}:
        # a cluster with share groups switched off
        self.features = dict(features or {})
        #: user -> password on a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512);
        #: see sasl_bootstrap_servers
        self.sasl_users = dict(sasl_users or {})
        #: (certificate chain PEM file, unencrypted PKCS#8 key PEM file) of an SSL listener; see ssl_bootstrap_servers
        self.ssl_keystore = ssl_keystore
        self.config = dict(config or {})
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self.java = find_java()
        self.libs = kafka_libs(version)
        self._fixed_port = port
        self._sasl_port: int | None = None
        self._ssl_port: int | None = None
        self._port = self._controller_port = 0
        self._pick_ports()
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._process: GuardedProcess | None = None
        self._api_versions: dict[int, tuple[int, int]] = {}
        self.cluster_id = new_cluster_id()
        #: Seconds the last start took, from spawn until ApiVersions and Metadata answered.
        self.startup_seconds: float | None = None
        self.start()

    # -- addresses ----------------------------------------------------------------------------------
    @property
    def sasl_bootstrap_servers(self) -> str:
        """The SASL_PLAINTEXT listener (``sasl_users`` given)."""
        if self._sasl_port is None:
            raise ValueError("this KafkaBroker has no SASL listener: give sasl_users={user: password}")
        return f"{LOOPBACK}:{self._sasl_port}"

    @property
    def ssl_bootstrap_servers(self) -> str:
        """The SSL listener (``ssl_keystore`` given)."""
        if self._ssl_port is None:
            raise ValueError("this KafkaBroker has no SSL listener: give ssl_keystore=(cert_chain.pem, key.pem)")
        return f"{LOOPBACK}:{self._ssl_port}"

    @property
    def controller_port(self) -> int:
        """The KRaft controller's listener (loopback, like every other)."""
        return self._controller_port

    @property
    def log_path(self) -> Path | None:
        return Path(self._workdir.name) / "kafka.log" if self._workdir is not None else None

    # -- lifecycle ----------------------------------------------------------------------------------
    def _relaunch(self) -> None:  # the same ports and data
        self._spawn_and_wait()

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<KafkaBroker {self.version} {self.bootstrap_servers} {state}>"

    # -- internals ----------------------------------------------------------------------------------
    def _pick_ports(self) -> None:
        """Free ports for every listener the caller did not fix (in this order: SASL, SSL, client, controller)."""
        self._sasl_port = free_loopback_port() if self.sasl_users else None
        self._ssl_port = free_loopback_port() if self.ssl_keystore else None
        self._port = self._fixed_port if self._fixed_port is not None else free_loopback_port()
        self._controller_port = free_loopback_port()

    def _ports(self) -> dict[int, str]:
        """Every port of the server -> which listener it is."""
        named = {
            self._port: "client",
            self._controller_port: "controller",
            self._sasl_port: "SASL",
            self._ssl_port: "SSL",
        }
        return {port: name for port, name in named.items() if port is not None}

    def _launch(self) -> None:
        """Format the storage and start the server (blocks until it answers Metadata); on a port conflict,
        again on fresh ports (a fresh storage too: nothing of the failed attempt, which may have written its
        quorum state, is kept)."""
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self._workdir = tempfile.TemporaryDirectory(prefix="fsm-consumer-kafka-", ignore_cleanup_errors=True)
            self._write_properties()
            self._format()
            try:
                self._spawn_and_wait()
                return
            except _PortTaken as exc:
                if self._fixed_port in exc.taken:
                    raise BrokerStartError(f"{exc} (the port was given: not retried)") from None
                if attempt == _PORT_ATTEMPTS:
                    raise BrokerStartError(f"{exc} (after {attempt} attempts on fresh ports)") from None
                self._workdir.cleanup()
                self._workdir = None
                self._pick_ports()

    @property
    def _properties_path(self) -> Path:
        assert self._workdir is not None
        return Path(self._workdir.name) / "server.properties"

    def _write_properties(self) -> None:
        assert self._workdir is not None
        listeners = {"PLAINTEXT": self._port}
        if self._sasl_port is not None:
            listeners["SASL_PLAINTEXT"] = self._sasl_port
        if self._ssl_port is not None:
            listeners["SSL"] = self._ssl_port
        bound = ",".join(f"{name}://{LOOPBACK}:{port}" for name, port in listeners.items())
        if self.advertised_port is not None:
            listeners["PLAINTEXT"] = self.advertised_port
        advertised = ",".join(f"{name}://{LOOPBACK}:{port}" for name, port in listeners.items())
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{LOOPBACK}:{self._controller_port}",
            "listeners": f"{bound},CONTROLLER://{LOOPBACK}:{self._controller_port}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(f"{n}:{n}" for n in listeners) + ",CONTROLLER:PLAINTEXT",
            "log.dirs": str(Path(self._workdir.name) / "data"),
            **self._sasl_properties(),
            **self._ssl_properties(),
            **_BROKER_DEFAULTS,
            **self.config,
        }
        self._properties_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _sasl_properties(self) -> dict[str, str]:
        if not self.sasl_users:
            return {}
        plain = " ".join(f'user_{user}="{password}"' for user, password in self.sasl_users.items())
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain};"
            ),
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram,
        }

    def _ssl_properties(self) -> dict[str, str]:
        if not self.ssl_keystore:
            return {}
        chain, key = (Path(p).read_text() for p in self.ssl_keystore)
        # inline PEM (a file-based PEM keystore would need an encrypted key); \n is a newline in a .properties value
        return {
            "listener.name.ssl.ssl.keystore.type": "PEM",
            "listener.name.ssl.ssl.keystore.certificate.chain": chain.strip().replace("\n", "\\n"),
            "listener.name.ssl.ssl.keystore.key": key.strip().replace("\n", "\\n"),
        }

    def commit_log(self, group: str, timeout_s: float = 120) -> list[tuple[str, int, int]]:
        """The offset commits of ``group`` as the broker applied them, in order: (topic, partition, offset),
        read back from ``__consumer_offsets`` with Kafka's own ``OffsetsMessageFormatter`` (a group's
        commits all go to one partition of it, so their order there is the order they took effect)."""
        argv = self._java(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "--bootstrap-server",
            self.bootstrap_servers,
            "--topic",
            "__consumer_offsets",
            "--from-beginning",
            "--formatter",
            "org.apache.kafka.tools.consumer.OffsetsMessageFormatter",
            "--timeout-ms",
            "5000",
        )
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"reading __consumer_offsets failed (exit {done.returncode}): {done.stderr[-2000:]}")
        out: list[tuple[str, int, int]] = []
        text, at, decoder = done.stdout, 0, json.JSONDecoder()
        while True:  # the formatter writes its JSON objects back to back
            while at < len(text) and text[at].isspace():
                at += 1
            if at >= len(text):
                return out
            record, at = decoder.raw_decode(text, at)
            key, value = record.get("key") or {}, record.get("value")
            data = key.get("data") or {}
            if key.get("type") in (0, 1) and data.get("group") == group and value:  # not a tombstone
                out.append((data["topic"], int(data["partition"]), int(value["data"]["offset"])))

    def _java(self, main: str, *args: str) -> list[str]:
        log4j = Path(__file__).with_name("kafka") / "log4j2.properties"
        return [self.java, *_HEAP, f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{self.libs}/*", main, *args]

    def _format(self) -> None:
        scram = [
            arg
            for user, password in self.sasl_users.items()
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
            for arg in ("--add-scram", f"{mechanism}=[name={user},password={password}]")
        ]
        argv = self._java(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self.cluster_id,
            "-c",
            str(self._properties_path),
            "--ignore-formatted",
            *scram,
            *(arg for name, level in self.features.items() for arg in ("--feature", f"{name}={level}")),
        )
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise BrokerStartError(
                f"formatting Kafka's storage failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}"
            )

    def _spawn_and_wait(self) -> None:
        assert self.log_path is not None
        started = time.monotonic()
        process = self._spawn(self._java("kafka.Kafka", str(self._properties_path)), stop_grace=self.stop_grace)
        deadline = started + self.start_timeout
        last: Exception | None = None
        while True:
            try:
                self._api_versions = fetch_api_versions(LOOPBACK, self._port, timeout=0.5)
                cluster = self._metadata(None, timeout=2.0).cluster_id
            except BrokerRequestError as exc:
                last = exc
            else:
                if cluster == self.cluster_id:
                    break
                if cluster is not None:  # not ours, which cannot bind the port: it exits, or is stopped here
                    self._stop_process()
                    self._api_versions = {}
                    raise _PortTaken(
                        f"another broker (cluster id {cluster!r}) answers on {self.bootstrap_servers}: "
                        f"the port was taken before Apache Kafka could bind it",
                        [self._port],
                    )
            if not process.alive():
                code = process.returncode
                self._stop_process()
                taken = [port for port in self._ports() if port_in_use(port)]  # ours is gone: someone else's
                if taken:
                    raise _PortTaken(
                        f"Apache Kafka exited with code {code} before it answered on "
                        f"{self.bootstrap_servers}: "
                        + ", ".join(f"{LOOPBACK}:{port} (its {self._ports()[port]} listener)" for port in taken)
                        + " taken by another process",
                        taken,
                    )
                raise BrokerStartError(
                    f"Apache Kafka exited with code {code} before it answered on "
                    f"{self.bootstrap_servers}; end of its log:\n{tail(self.log_path)}"
                )
            if time.monotonic() > deadline:
                self._stop_process()
                raise BrokerStartError(
                    f"Apache Kafka on {self.bootstrap_servers} did not answer within "
                    f"{self.start_timeout:.0f} s: {last}; end of its log:\n{tail(self.log_path)}"
                )
            time.sleep(0.1)
        self.startup_seconds = time.monotonic() - started
