"""What ``fsm-consumer ingest`` checks before it starts a broker or Spark, so that a mistake costs seconds
and one plain line, not a Spark start and a Java stack trace: the ``--option`` values, that the output
and checkpoint directories can be written, that the broker answers (within ``REACH_S``) and that the topic
exists (else the topics that do, unless ``--wait-for-topic``).

Each failed check raises ``Refused``, whose message says what failed and what to do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..spark._offsets import OffsetLookup
    from ..spark._options import ReadOptions

REACH_S = 5.0  # the bootstrap wait: a refused or unanswered address is reported this soon
_LISTED = 20  # topics named in a missing topic's error


class Refused(Exception):
    """A check before the run failed; the message says what, and what to do."""


def read_options(options: dict[str, str], bootstrap: str, topic: str) -> ReadOptions:
    """The source's options as the query will get them: a misspelled or bad ``--option`` is refused here
    (with the source's own hint), before anything starts."""
    from ..spark._option_values import KafkaOptionError
    from ..spark._options import parse

    try:
        return parse({**options, "kafka.bootstrap.servers": bootstrap, "subscribe": topic})
    except KafkaOptionError as exc:
        raise Refused(str(exc)) from None


def writable(path: Path, flag: str) -> None:
    """``path`` is a directory this process can write, or can be made as one: checked without making it."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise Refused(f"{flag} {path}: {probe} is not a directory; give {flag} a directory path")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == path else f"cannot be made: {probe} is not writable"
        raise Refused(f"{flag} {path} {what} by this user; give {flag} a directory you can write")


def lookup(read: ReadOptions, bootstrap: str) -> OffsetLookup:
    """The driver's metadata lookup, its broker found within ``REACH_S`` or refused naming why."""
    from ..errors import KafkaTimeoutError
    from ..spark._offsets import OffsetLookup

    found = OffsetLookup(read, bootstrap_timeout_ms=int(REACH_S * 1000))
    try:
        found.connect()
    except KafkaTimeoutError as exc:
        found.close()
        reasons = getattr(exc, "reasons", "")  # each address and why it failed (MetadataManager.bootstrap_error)
        why = f": {reasons}" if reasons else ""
        raise Refused(
            f"no broker answered at {bootstrap} within {REACH_S:.0f} s{why}. Check --bootstrap-servers, and "
            "that the broker is up and reachable from this machine"
        ) from None
    return found


def topic_exists(
    found: OffsetLookup,
    topic: str,
    bootstrap: str,
    *,
    wait: bool,
    say: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """The topic is there (asked without creating it: a broker may create a topic a Metadata request
    names). Missing: refused naming the topics that exist, or, with ``wait``, asked again every 2 s."""
    told = False
    while True:
        topics = found.topics()
        if topic in topics:
            return
        if not wait:
            public = sorted(t for t in topics if not t.startswith("__"))
            listed = ", ".join(public[:_LISTED]) + (
                f" and {len(public) - _LISTED} more" if len(public) > _LISTED else ""
            )
            raise Refused(
                f"topic {topic!r} does not exist at {bootstrap}; "
                + (f"topics there: {listed}. " if public else "the broker has no topics. ")
                + "Check --topic, or add --wait-for-topic to wait until it is created"
            )
        if not told:
            say(f"waiting for topic {topic!r} to be created at {bootstrap} (Ctrl-C to stop)")
            told = True
        sleep(2.0)


def identity(found: OffsetLookup, bootstrap: str, topic: str) -> dict[str, Any]:
    """What names the data this run reads (the checkpoint records it): the cluster's and the topic's ids."""
    ids = found.identity([topic])
    return {
        "bootstrap": bootstrap,
        "topic": topic,
        "cluster_id": ids["cluster_id"],
        "topic_id": ids["topic_ids"][topic],
    }
