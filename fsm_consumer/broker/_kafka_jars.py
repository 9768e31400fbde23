"""Apache Kafka's jars, fetched once from Maven Central into a cache, and the Java that runs them.

``fetch_kafka()`` runs ``mvn dependency:copy-dependencies`` on the pom kept beside this module
(``kafka/pom.xml``: the broker ``kafka_2.13``, ``kafka-clients`` and ``kafka-tools`` of one release,
with their runtime dependencies) into ``~/.cache/fsm-consumer/kafka-<version>/libs``
(``FSM_CONSUMER_CACHE`` moves the cache). A marker file says the copy is complete, so a fetch that
was cut short is redone rather than used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ._errors import BrokerError

KAFKA_VERSION = "4.1.1"
POM = Path(__file__).with_name("kafka") / "pom.xml"
FETCH_COMMAND = "fsm-consumer broker fetch --kind kafka"
_MARKER = ".fetched"


class KafkaNotFoundError(BrokerError):
    """Java or Apache Kafka's jars are missing; the message says which command fetches them."""


def cache_dir() -> Path:
    root = os.environ.get("FSM_CONSUMER_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "fsm-consumer"


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    return cache_dir() / f"kafka-{version}"


def find_java() -> str:
    """The ``java`` to run the broker with: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaNotFoundError(
            "no java on PATH (and no JAVA_HOME): Apache Kafka needs Java 17 or later "
            "(e.g. apt-get install openjdk-17-jre-headless)"
        )
    return found


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """The directory of the release's jars; raises KafkaNotFoundError naming the fetch command if absent."""
    libs = kafka_home(version) / "libs"
    if not (kafka_home(version) / _MARKER).is_file():
        raise KafkaNotFoundError(
            f"Apache Kafka {version}'s jars are not in {libs}: run `{FETCH_COMMAND}` (needs mvn and Maven Central) once"
        )
    return libs


def fetch_kafka(version: str = KAFKA_VERSION, *, quiet: bool = True, timeout: float = 900) -> Path:
    """Fetch the jars (a no-op when complete); returns the libs directory."""
    home = kafka_home(version)
    if (home / _MARKER).is_file():
        return home / "libs"
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaNotFoundError(
            "mvn is not on PATH: install Maven (apt-get install maven) to fetch Apache Kafka's jars from Maven Central"
        )
    libs = home / "libs"
    if libs.exists():
        shutil.rmtree(libs)  # a fetch that was cut short
    libs.mkdir(parents=True)
    argv = [
        mvn,
        "-B",
        "-f",
        str(POM),
        f"-Dkafka.version={version}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={libs}",
        "-DincludeScope=runtime",
    ]
    if quiet:
        argv.insert(1, "-q")
    done = subprocess.run(argv, capture_output=quiet, text=True, timeout=timeout)
    if done.returncode != 0:
        out = (done.stdout or "") + (done.stderr or "") if quiet else ""
        raise KafkaNotFoundError(f"mvn could not fetch Apache Kafka {version} (exit {done.returncode}):\n{out[-3000:]}")
    if not any(libs.glob(f"kafka_2.13-{version}.jar")):
        raise KafkaNotFoundError(f"mvn finished but {libs} holds no kafka_2.13-{version}.jar")
    (home / _MARKER).write_text(version)
    return libs
