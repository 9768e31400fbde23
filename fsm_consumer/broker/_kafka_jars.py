"""Apache Kafka's jars and Spark's Kafka connector, fetched once from Maven Central into a cache, and the
Java that runs them.

``fetch_kafka()`` runs ``mvn dependency:copy-dependencies`` on the pom kept beside this module
(``kafka/pom.xml``: the broker ``kafka_2.13``, ``kafka-clients`` and ``kafka-tools`` of one release,
with their runtime dependencies) into ``~/.cache/fsm-consumer/kafka-<version>/libs``
(``FSM_CONSUMER_CACHE`` moves the cache). ``fetch_spark_kafka()`` does the same for Spark's own Kafka
source (``spark-kafka/pom.xml``: ``spark-sql-kafka-0-10_2.13`` and what PySpark's jars do not already
hold), the peer ``fsm_kafka`` is compared with row by row. A marker file says a copy is complete, so a
fetch that was cut short is redone rather than used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ._errors import BrokerError

KAFKA_VERSION = "4.2.2"
POM = Path(__file__).with_name("kafka") / "pom.xml"
FETCH_COMMAND = "fsm-consumer broker fetch --kind kafka"
# Spark's connector is published up to 4.2.0 (none yet for PySpark 4.3); the 4.2.0 jar runs on PySpark 4.3
SPARK_KAFKA_VERSION = "4.2.0"
SPARK_KAFKA_POM = Path(__file__).with_name("spark-kafka") / "pom.xml"
SPARK_KAFKA_FETCH_COMMAND = "fsm-consumer broker fetch --kind spark-kafka"
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
    libs = _fetch(POM, kafka_home(version), {"kafka.version": version}, f"Apache Kafka {version}", quiet, timeout)
    if not any(libs.glob(f"kafka_2.13-{version}.jar")):
        raise KafkaNotFoundError(f"mvn finished but {libs} holds no kafka_2.13-{version}.jar")
    (kafka_home(version) / _MARKER).write_text(version)
    return libs


def spark_kafka_home(version: str = SPARK_KAFKA_VERSION) -> Path:
    return cache_dir() / f"spark-kafka-{version}"


def spark_kafka_jars(version: str = SPARK_KAFKA_VERSION) -> list[Path]:
    """The connector's jars (for ``spark.jars``); raises KafkaNotFoundError naming the fetch command if absent."""
    home = spark_kafka_home(version)
    if not (home / _MARKER).is_file():
        raise KafkaNotFoundError(
            f"Spark's Kafka connector {version} is not in {home}: run `{SPARK_KAFKA_FETCH_COMMAND}` "
            "(needs mvn and Maven Central) once"
        )
    return sorted((home / "libs").glob("*.jar"))


def fetch_spark_kafka(version: str = SPARK_KAFKA_VERSION, *, quiet: bool = True, timeout: float = 900) -> Path:
    """Fetch Spark's Kafka connector (a no-op when complete); returns its libs directory."""
    home = spark_kafka_home(version)
    libs = _fetch(
        SPARK_KAFKA_POM, home, {"spark.version": version}, f"Spark's Kafka connector {version}", quiet, timeout
    )
    if not any(libs.glob(f"spark-sql-kafka-0-10_2.13-{version}.jar")):
        raise KafkaNotFoundError(f"mvn finished but {libs} holds no spark-sql-kafka-0-10_2.13-{version}.jar")
    (home / _MARKER).write_text(version)
    return libs


def _fetch(pom: Path, home: Path, properties: dict[str, str], what: str, quiet: bool, timeout: float) -> Path:
    """``mvn dependency:copy-dependencies`` of ``pom`` into ``home/libs`` unless a marker says it is done."""
    libs = home / "libs"
    if (home / _MARKER).is_file():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaNotFoundError(
            f"mvn is not on PATH: install Maven (apt-get install maven) to fetch {what} from Maven Central"
        )
    if libs.exists():
        shutil.rmtree(libs)  # a fetch that was cut short
    libs.mkdir(parents=True)
    argv = [
        mvn,
        "-B",
        "-f",
        str(pom),
        *(f"-D{k}={v}" for k, v in properties.items()),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={libs}",
        "-DincludeScope=runtime",
    ]
    if quiet:
        argv.insert(1, "-q")
    done = subprocess.run(argv, capture_output=quiet, text=True, timeout=timeout)
    if done.returncode != 0:
        out = (done.stdout or "") + (done.stderr or "") if quiet else ""
        raise KafkaNotFoundError(f"mvn could not fetch {what} (exit {done.returncode}):\n{out[-3000:]}")
    return libs
