"""A librdkafka member (confluent-kafka) in its own process, beside ``_member_process``'s: the same
arguments (``--parallel`` excepted), the same own lines for the run's ``Watch``, and a history in the
library's format (``OUT.lib``, docs/histories.md) written from the outside, so that the same checker
judges librdkafka under the same faults (tools/faults ``--client librdkafka``):

    python -m fsm_consumer.testing._librdkafka_member --bootstrap HOST:PORT --group G --topic T --name m0 \
        --out m0.jsonl [the options of _member_process]

What the history can say is what the application sees: ``assigned``/``revoked``/``lost`` when librdkafka
calls ``on_assign``/``on_revoke``/``on_lost`` (partitions are handed out only after the first, never
after the others return), a ``read`` per partition per ``consume()`` (its position before is the first
offset handed out: offsets that hold no record, such as those a broker crash left never acknowledged, show
as a gap to rule M, where this library's own history says "skip"), a ``commit`` when a synchronous
``commit()`` returned, and generation -1 (librdkafka does not tell its generation). A session that ran
out is seen as ``lost``, when librdkafka reports it. ``--commit auto`` uses librdkafka's auto-commit
(commits not in the history, as with ``_member_process``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from .._history_writer import HistoryWriter
from ._member_process import History, _arguments, _now_ms, _runs

__all__ = ["main"]


class _Member:
    """The consumer, its two logs, and the positions reached (what a commit commits)."""

    def __init__(self, args: Any, history: History) -> None:
        from confluent_kafka import Consumer  # a dev dependency, as for the producer of the runs

        self.args = args
        self.history = history
        self.lib = HistoryWriter(args.out + ".lib", args.name)
        self.every_poll = args.commit == "every-poll"
        self.position: dict[tuple[str, int], int] = {}  # reached by reads, per partition owned
        config: dict[str, Any] = {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "client.id": args.name,
            "partition.assignment.strategy": args.strategy,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": not self.every_poll,
            "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": args.heartbeat_interval_ms or max(100, args.session_timeout_ms // 10),
            "socket.timeout.ms": max(10, args.request_timeout_ms),
            # faults make librdkafka log a lot on stderr; the run keeps the member's stderr
            "log_level": 4,
        }
        if args.strategy == "consumer":  # KIP-848: the broker assigns and times the session
            for key in ("partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms"):
                del config[key]
            config["group.protocol"] = "consumer"
        if args.instance_id:
            config["group.instance.id"] = args.instance_id
        if args.max_poll_interval_ms is not None:
            config["max.poll.interval.ms"] = args.max_poll_interval_ms
        self.config = config
        self.batch = args.max_poll_records or 500  # the library's max_poll_records default
        self.consumer = Consumer(config)

    def _member_id(self) -> str:
        try:
            return self.consumer.memberid() or ""
        except Exception:  # not joined, or closed
            return ""

    def _ownership(self, event: str, partitions: list[Any]) -> None:
        tps = sorted([tp.topic, tp.partition] for tp in partitions)
        self.history.write(event, partitions=tps, generation=None)
        self.lib.write(event, member=self._member_id(), partitions=tps)

    def on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self._ownership("assigned", partitions)

    def on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        if self.args.revoke_sleep_ms and partitions:
            # a slow cleanup, then the usual last commit of what was handed out
            time.sleep(self.args.revoke_sleep_ms / 1000)
            self.commit(where="on_partitions_revoked")
        # the partitions stop being this member's when the callback returns: librdkafka releases them then
        self._ownership("revoked", partitions)
        self._forget(partitions)

    def on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._ownership("lost", partitions)
        self._forget(partitions)

    def _forget(self, partitions: list[Any]) -> None:
        for tp in partitions:
            self.position.pop((tp.topic, tp.partition), None)

    def start(self) -> None:
        self.history.write("started", pid=os.getpid(), config=self.config, parallel=None, client="librdkafka")
        self.lib.write(
            "started",
            group=self.args.group,
            config={
                "partition_assignment_strategy": [self.args.strategy],
                "session_timeout_ms": self.args.session_timeout_ms,
                "max_poll_records": self.batch,
                "enable_auto_commit": not self.every_poll,
                "auto_offset_reset": "earliest",
                "isolation_level": "read_uncommitted",
                "group_instance_id": self.args.instance_id,
                "client": "librdkafka",
            },
        )
        self.consumer.subscribe(
            [self.args.topic], on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost
        )

    def poll_once(self) -> None:
        started = _now_ms()
        messages = self.consumer.consume(num_messages=self.batch, timeout=0.1)
        returned = _now_ms()
        offsets: dict[tuple[str, int], list[int]] = {}
        for m in messages:
            if m.error() is not None:
                self.history.write("poll_error", error=str(m.error()))
                continue
            topic, partition, offset = m.topic(), m.partition(), m.offset()
            if topic is None or partition is None or offset is None:  # a record always has them
                continue
            offsets.setdefault((topic, partition), []).append(offset)
        for (topic, partition), os_ in offsets.items():
            for first, last in _runs(os_):
                self.history.write(
                    "read", t=returned, tp=[topic, partition], offsets=[first, last], count=last - first + 1
                )
                # librdkafka does not say its position before: the first offset handed out stands for it
                positions: dict[str, Any] = {"from": first, "to": last + 1}
                self.lib.write(
                    "read",
                    t=returned,
                    tp=[topic, partition],
                    offsets=[first, last],
                    count=last - first + 1,
                    t_poll_start=started,
                    max_records=self.batch,
                    **positions,
                )
            self.position[(topic, partition)] = os_[-1] + 1
        if offsets and self.every_poll:
            self.commit()

    def commit(self, where: str | None = None) -> None:
        """A synchronous commit of the positions reached, logged once it returned (with its error if any)."""
        from confluent_kafka import KafkaException, TopicPartition

        if not self.position:
            return
        offsets = sorted(self.position.items())
        sent = _now_ms()
        member = self._member_id()
        error: str | None = None
        try:
            answer = self.consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets], asynchronous=False
            )
            failed = [tp for tp in answer or [] if tp.error is not None]
            if failed:
                error = "; ".join(f"{tp.topic}-{tp.partition}: {tp.error}" for tp in failed)
        except KafkaException as exc:
            error = repr(exc.args[0] if exc.args else exc)
        t = _now_ms()
        extra: dict[str, Any] = {"where": where} if where else {}
        self.lib.write(
            "commit",
            t=t,
            member=member,
            generation=-1,
            offsets=[[tp, p, o] for (tp, p), o in offsets],
            error=error,
            sent_ago_ms=round(t - sent, 3),
            **extra,
        )
        if error is not None:
            self.history.write("commit_failed", t_start=sent, error=error, generation=None, **extra)
            return
        for (tp, p), o in offsets:
            self.history.write("commit", t=t, t_start=sent, tp=[tp, p], offset=o, generation=None, **extra)

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            self.lib.write("closed")
            self.lib.close()


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.parallel is not None:
        print("a librdkafka member has no ParallelConsumer (--parallel)", file=sys.stderr)
        return 2
    history = History(args.out, args.name)
    stop: list[bool] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    member = _Member(args, history)
    member.start()
    try:
        while not stop:
            member.poll_once()
    finally:
        try:
            member.close()
        finally:
            history.write("closed")
            history.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
