"""SchemaRegistry: a real Confluent-compatible schema registry (Apicurio Registry) on 127.0.0.1, for tests.

Why Apicurio: Confluent's Schema Registry is published only on packages.confluent.io and as container images,
neither reachable from where the tests run; Apicurio serves Confluent's REST API under ``/apis/ccompat/v7``
and Maven Central carries it as a runnable Quarkus app (``apicurio-registry-app-<v>-all.tar.gz``, Apicurio's
own build: its other 3.x modules are not all on Central, so Quarkus's build cannot be rerun from the app jar).
``fetch_registry()`` unpacks it with mvn (``registry/pom.xml``) into ``~/.cache/fsm-consumer/registry-<v>``
(``FSM_CONSUMER_CACHE`` moves the cache; a marker says the unpack is complete) and, with Java 25 or later,
records an AOT cache from one training run, which cuts the startup to about 2.5 s from 4 s (2 cores).
Storage is H2 in memory: every start is an empty registry. Java 21 or later runs it (its classes are Java 21).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from ._errors import BrokerError, BrokerNotRunningError, BrokerStartError
from ._kafka_jars import cache_dir
from ._logtail import tail
from ._ports import LOOPBACK, free_loopback_port, port_in_use
from ._process import GuardedProcess

REGISTRY_VERSION = "3.3.3"
POM = Path(__file__).with_name("registry") / "pom.xml"
FETCH_COMMAND = "fsm-consumer broker fetch --kind registry"
_MARKER = ".fetched"
_AOT = "registry.aot"
_JVM = ["-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData"]
_PORT_ATTEMPTS = 3
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through $http_proxy


class RegistryNotFoundError(BrokerError):
    """Java 21+ or Apicurio Registry is missing; the message says what to install or which command fetches it."""


def registry_home(version: str = REGISTRY_VERSION) -> Path:
    return cache_dir() / f"registry-{version}"


def _java_major(java: Path) -> int:
    release = java.resolve().parent.parent / "release"
    try:
        text = release.read_text()
    except OSError:  # no release file: ask the JVM
        try:
            text = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30).stderr
        except (OSError, subprocess.SubprocessError):
            return 0
    found = re.search(r'VERSION="?(\d+)', text, re.IGNORECASE)
    return int(found.group(1)) if found else 0


def find_java() -> str:
    """A ``java`` of release 21 or later: ``$JAVA_HOME``'s, the one on PATH, else the newest in /usr/lib/jvm."""
    home = os.environ.get("JAVA_HOME")
    first = [Path(home) / "bin" / "java"] if home else []
    on_path = shutil.which("java")
    first += [Path(on_path)] if on_path else []
    installed = sorted(Path("/usr/lib/jvm").glob("*/bin/java"), key=_java_major, reverse=True)
    for java in [*first, *installed]:
        if os.access(java, os.X_OK) and _java_major(java) >= 21:
            return str(java)
    raise RegistryNotFoundError(
        "Apicurio Registry needs Java 21 or later (its classes are Java 21), and JAVA_HOME, PATH and /usr/lib/jvm "
        "hold none: install one (e.g. apt-get install openjdk-21-jre-headless) or point JAVA_HOME at it"
    )


def fetch_registry(version: str = REGISTRY_VERSION, *, quiet: bool = True, timeout: float = 900) -> Path:
    """Unpack Apicurio Registry (a no-op when complete), then record its AOT cache (Java 25+, once); returns
    the directory of ``quarkus-run.jar``."""
    home = registry_home(version)
    if not (home / _MARKER).is_file():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RegistryNotFoundError(
                "mvn is not on PATH: install Maven (apt-get install maven) to fetch the registry"
            )
        if home.exists():
            shutil.rmtree(home)  # a fetch that was cut short
        home.mkdir(parents=True)
        argv = [mvn, "-B", "-f", str(POM), f"-Dregistry.version={version}", f"-Dregistry.home={home}"]
        argv += ["dependency:unpack@registry"] + (["-q"] if quiet else [])
        done = subprocess.run(argv, capture_output=quiet, text=True, timeout=timeout)
        if done.returncode != 0 or not (home / "quarkus-run.jar").is_file():
            out = (done.stdout or "") + (done.stderr or "")
            raise RegistryNotFoundError(
                f"mvn could not fetch Apicurio Registry {version} (exit {done.returncode}):\n{out[-3000:]}"
            )
        shutil.rmtree(home / ".build", ignore_errors=True)
        (home / _MARKER).write_text(version)
    java = find_java()
    if _java_major(Path(java)) >= 25 and not (home / _AOT).is_file():
        _record_aot(version, java, home / _AOT)
    return home


def _record_aot(version: str, java: str, path: Path) -> None:
    """One start with ``-XX:AOTCacheOutput`` that registers, reads and checks schemas of each type: the JVM
    writes the classes it loaded, linked and profiled to ``path`` when it exits."""
    partial = path.with_suffix(f".{os.getpid()}.partial")
    registry = SchemaRegistry(version, java=java, jvm_options=[f"-XX:AOTCacheOutput={partial}"], stop_grace=180)
    registry.start()
    try:
        _exercise(registry.url)
        assert registry._process is not None
        registry._process.stop()  # the JVM writes the cache as it exits
        log = registry.tail
    except (urllib.error.URLError, OSError) as exc:
        raise BrokerStartError(f"the training run failed: {exc}; end of its log:\n{registry.tail}") from exc
    finally:
        registry.stop()
    if not partial.is_file():
        raise RegistryNotFoundError(f"{java} wrote no AOT cache for Apicurio Registry; end of its log:\n{log}")
    os.replace(partial, path)


def _exercise(url: str) -> None:
    avro = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}
    schemas = {
        "AVRO": json.dumps(avro),
        "PROTOBUF": 'syntax = "proto3";\nmessage R {\n  string a = 1;\n}\n',
        "JSON": json.dumps({"type": "object", "properties": {"a": {"type": "string"}}}),
    }
    for kind, text in schemas.items():
        body = {"schema": text, "schemaType": kind}
        found = _call(f"{url}/subjects/train-{kind.lower()}-value/versions", body)
        _call(f"{url}/schemas/ids/{found['id']}")
        _call(f"{url}/compatibility/subjects/train-{kind.lower()}-value/versions/latest", body)


def _call(url: str, body: object = None) -> dict[str, object]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    with _LOCAL.open(urllib.request.Request(url, data, headers), timeout=30) as response:
        answer: dict[str, object] = json.load(response)
        return answer


class SchemaRegistry:
    """Apicurio Registry in a child process on a free loopback port; ``url`` is its Confluent API."""

    def __init__(
        self,
        version: str = REGISTRY_VERSION,
        *,
        properties: Mapping[str, str] | None = None,
        start_timeout: float = 90.0,
        stop_grace: float = 10.0,
        java: str | None = None,
        jvm_options: list[str] | None = None,
    ) -> None:
        self.version = version
        self.home = registry_home(version)
        if not (self.home / _MARKER).is_file():
            raise RegistryNotFoundError(
                f"Apicurio Registry {version} is not in {self.home}: "
                f"run `{FETCH_COMMAND}` (needs mvn and Maven Central) once"
            )
        self.java = java or find_java()
        #: Quarkus and Apicurio settings (``apicurio.ccompat.legacy-id-mode.enabled``, ...), over the defaults here
        self.properties = dict(properties or {})
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self.jvm_options = list(jvm_options or [])
        self.port = 0
        #: Seconds the last start took, from spawn until ``GET /subjects`` answered 200.
        self.startup_seconds: float | None = None
        self._process: GuardedProcess | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        """The Confluent-compatible API: what ``SchemaRegistryClient({"url": ...})`` takes."""
        if not self.running:
            raise BrokerNotRunningError("the schema registry is not running: start() it first")
        return f"http://{LOOPBACK}:{self.port}/apis/ccompat/v7"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.alive()

    @property
    def log_path(self) -> Path | None:
        return Path(self._workdir.name) / "registry.log" if self._workdir is not None else None

    @property
    def tail(self) -> str:
        """The root cause of a Java exception in the log (its last ``Caused by:``, which the stack trace after it
        hides from a tail), then the end of the log."""
        if self.log_path is None:
            return "<no log: never started>"
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        causes = [line for line in text.splitlines() if line.startswith("Caused by:")]
        return (f"{causes[-1]}\n" if causes else "") + tail(self.log_path)

    def start(self) -> None:
        """Start on a free port (fresh ones if another process takes it first); blocks until it answers."""
        if self.running:
            return
        try:
            for _ in range(_PORT_ATTEMPTS):
                self.stop()
                self._workdir = tempfile.TemporaryDirectory(prefix="fsm-consumer-registry-", ignore_cleanup_errors=True)
                self.port = free_loopback_port()
                if self._spawn_and_wait():
                    return
            raise BrokerStartError(f"Apicurio Registry found its port taken by another process {_PORT_ATTEMPTS} times")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the registry (its schemas are gone) and remove its directory. Idempotent."""
        if self._process is not None:
            self._process.stop()
            self._process = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> SchemaRegistry:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"{self.url} pid={self._process.pid}" if self._process and self.running else "stopped"
        return f"<SchemaRegistry Apicurio {self.version} {state}>"

    def _argv(self) -> list[str]:
        assert self._workdir is not None
        work = self._workdir.name
        props = {
            "quarkus.http.host": LOOPBACK,
            "quarkus.http.port": str(self.port),
            # the management interface (health, metrics) is built in: on loopback, on any free port
            "quarkus.management.host": LOOPBACK,
            "quarkus.management.port": "0",
            "apicurio.datasource.jdbc.initial-size": "1",  # 20 H2 connections by default
            "apicurio.datasource.jdbc.min-size": "1",
            "apicurio.storage.snapshot.location": work,
            "apicurio.import.work-dir": work,
            "java.io.tmpdir": work,  # vert.x's file cache
            **self.properties,
        }
        aot = self.home / _AOT
        cache = [f"-XX:AOTCache={aot}"] if aot.is_file() and _java_major(Path(self.java)) >= 25 else []
        defines = [f"-D{key}={value}" for key, value in props.items()]
        return [self.java, *_JVM, *cache, *self.jvm_options, *defines, "-jar", str(self.home / "quarkus-run.jar")]

    def _spawn_and_wait(self) -> bool:
        """True once it answers; False if it exited because another process holds its port."""
        assert self.log_path is not None
        started = time.monotonic()
        try:
            self._process = GuardedProcess(self._argv(), log_path=self.log_path, stop_grace=self.stop_grace)
        except (OSError, subprocess.SubprocessError) as exc:
            raise BrokerStartError(f"could not spawn {self.java}: {exc}") from exc
        subjects = f"http://{LOOPBACK}:{self.port}/apis/ccompat/v7/subjects"
        while True:
            try:
                with _LOCAL.open(subjects, timeout=2) as response:
                    if response.status == 200:
                        self.startup_seconds = time.monotonic() - started
                        return True
            except (urllib.error.URLError, OSError):
                pass
            if not self._process.alive():
                code = self._process.returncode
                if port_in_use(self.port):
                    return False
                raise BrokerStartError(f"Apicurio Registry exited with code {code}; end of its log:\n{self.tail}")
            if time.monotonic() - started > self.start_timeout:
                raise BrokerStartError(
                    f"Apicurio Registry did not answer GET {subjects} within {self.start_timeout:.0f} s; "
                    f"end of its log:\n{self.tail}"
                )
            time.sleep(0.1)
