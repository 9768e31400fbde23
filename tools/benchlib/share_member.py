"""One member of tools/bench share in a process of its own (a Python member per process: no GIL shared with the
others), speaking the protocol of tools/peers/JavaShareBench.java on stdin and stdout:

  stdout {"ev":"ready"}   subscribed; then it polls, and per record sleeps WORK_MS (the simulated work) and
                          acknowledges (explicit: acknowledge() ACCEPT each, the next poll sends them)
  stdout {"ev":"p","t":wall ms,"o":[[first,last],...],"lat":[ms,...]}   one per poll that brought records
  stdin  stop (or EOF)    close the consumer; then {"ev":"closed"}

The drain's records wait in an open transaction (the groups read committed): what a member polls before the
benchmark commits it finds nothing, however early it joined.

Kinds: fsm (fsm_consumer's ShareConsumer), confluent (confluent-kafka's ShareConsumer), group (fsm_consumer's
Consumer in a consumer group: the baseline, in which one member owns the one partition).
  tools/bench _share_member KIND BOOTSTRAP GROUP TOPIC MODE WORK_MS MAX_POLL ACQUIRE LATENCY
"""

from __future__ import annotations

import json
import sys
import threading
import time


def _out(event: dict) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class _Progress:
    """The offsets and latencies of one poll's records, printed as one line."""

    def __init__(self, latency: bool) -> None:
        self.latency = latency
        self.ranges: list[list[int]] = []
        self.lat: list[float] = []

    def done(self, offset: int, timestamp_ms: int) -> None:
        if self.latency:
            self.lat.append(round(time.time() * 1000 - timestamp_ms, 1))
        if self.ranges and self.ranges[-1][1] == offset - 1:
            self.ranges[-1][1] = offset
        else:
            self.ranges.append([offset, offset])

    def flush(self) -> None:
        if self.ranges:
            event = {"ev": "p", "t": time.time() * 1000, "o": self.ranges}
            if self.latency:
                event["lat"] = self.lat
            _out(event)
        self.ranges, self.lat = [], []


def _stdin(stop: threading.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stop.set()  # "stop" or the end of stdin (the parent went away)


def _fsm(bootstrap, group, topic, mode, work, max_poll, acquire, latency, stop) -> None:
    from fsm_consumer.share import AcknowledgeType, ShareConsumer

    with ShareConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="fsm-share-bench",
        share_acknowledgement_mode=mode,
        share_acquire_mode=acquire,
        max_poll_records=max_poll,
    ) as consumer:
        _out({"ev": "ready"})
        explicit = mode == "explicit"
        progress = _Progress(latency)
        while not stop.is_set():
            for r in consumer.poll(timeout_ms=100):
                if work:
                    time.sleep(work)
                if explicit:
                    consumer.acknowledge(r, AcknowledgeType.ACCEPT)  # sent by the next poll()
                progress.done(r.offset, r.timestamp)
            progress.flush()


def _confluent(bootstrap, group, topic, mode, work, max_poll, acquire, latency, stop) -> None:
    from confluent_kafka import AcknowledgeType
    from confluent_kafka import ShareConsumer as CShare

    consumer = CShare(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "rdkafka-share-bench",
            "share.acknowledgement.mode": mode,
            "max.poll.records": max_poll,  # librdkafka has one acquire mode: its batches, this a hint
            "log_level": 3,  # not the preview's warning on every start
        }
    )
    try:
        consumer.subscribe([topic])
        _out({"ev": "ready"})
        explicit = mode == "explicit"
        progress = _Progress(latency)
        while not stop.is_set():
            for m in consumer.poll(0.1):
                if m.error() is not None:
                    _out({"ev": "error", "error": str(m.error())})
                    continue
                if work:
                    time.sleep(work)
                if explicit:
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                progress.done(m.offset(), m.timestamp()[1])
            progress.flush()
    finally:
        consumer.close()


def _group(bootstrap, group, topic, mode, work, max_poll, acquire, latency, stop) -> None:
    from fsm_consumer import Consumer

    consumer = Consumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="fsm-group-bench",
        auto_offset_reset="earliest",
        isolation_level="read_committed",  # as the share groups: the drain's records appear at its commit
        max_poll_records=max_poll,
    )
    try:
        consumer.subscribe([topic])
        _out({"ev": "ready"})
        progress = _Progress(latency)
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=100).values():
                for r in records:
                    if work:
                        time.sleep(work)
                    progress.done(r.offset, r.timestamp)
            progress.flush()
    finally:
        consumer.close()


KINDS = {"fsm": _fsm, "confluent": _confluent, "group": _group}


def member(argv: list[str]) -> int:
    kind, bootstrap, group, topic, mode = argv[:5]
    work, max_poll, acquire, latency = int(argv[5]) / 1000, int(argv[6]), argv[7], argv[8] == "1"
    stop = threading.Event()
    threading.Thread(target=_stdin, args=(stop,), daemon=True).start()
    try:
        KINDS[kind](bootstrap, group, topic, mode, work, max_poll, acquire, latency, stop)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the run
        _out({"ev": "error", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    _out({"ev": "closed"})
    return 0
