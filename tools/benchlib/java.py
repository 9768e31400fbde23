"""Kafka's Java consumer in the benchmarks: the programs of tools/peers, compiled once with javac against
the cached kafka-clients (``fsm-consumer broker fetch --kind kafka``) into the cache, keyed by source."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from fsm_consumer.broker._kafka_jars import KAFKA_VERSION, KafkaNotFoundError, cache_dir, find_java, kafka_libs

PEERS = Path(__file__).resolve().parent.parent / "peers"


def peer_command(main: str, *args: str, heap: str | None = None, flags: tuple[str, ...] = ()) -> list[str]:
    """``java [FLAGS] -cp <compiled peers>:<kafka libs>/* MAIN ARGS``; raises KafkaNotFoundError without Java or
    jars."""
    java, libs = find_java(), kafka_libs(KAFKA_VERSION)
    sources = sorted(PEERS.glob("*.java"))
    digest = hashlib.sha256(b"".join(s.read_bytes() for s in sources)).hexdigest()[:12]
    classes = cache_dir() / f"peers-{KAFKA_VERSION}-{digest}"
    if not (classes / f"{main}.class").is_file():
        classes.mkdir(parents=True, exist_ok=True)
        javac = Path(java).with_name("javac")
        done = subprocess.run(
            [str(javac), "-cp", f"{libs}/*", "-d", str(classes), *map(str, sources)],
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode != 0:
            raise KafkaNotFoundError(f"javac could not compile {PEERS}: {done.stderr[-2000:]}")
    return [java, *([f"-Xmx{heap}"] if heap else []), *flags, "-cp", f"{classes}:{libs}/*", main, *args]


def java_missing() -> str | None:
    """Why the Java peers cannot run here, or None."""
    try:
        find_java()
        kafka_libs(KAFKA_VERSION)
    except KafkaNotFoundError as exc:
        return str(exc)
    return None
