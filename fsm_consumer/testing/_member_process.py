"""One group member in its own process (so it can be frozen with SIGSTOP or killed with SIGKILL),
logging its own view as JSON lines (what the run watches), its consumer's history beside it (``OUT.lib``,
for ``fsm_consumer.history``'s checker):

    python -m fsm_consumer.testing._member_process --bootstrap HOST:PORT --group G --topic T --name m0 \
        --out m0.jsonl [--session-timeout-ms N --heartbeat-interval-ms N --max-poll-records N \
        --commit every-poll|auto --strategy range|cooperative-sticky|consumer --instance-id ID \
        --parallel N --handler-sleep-ms MS --max-poll-interval-ms N --revoke-sleep-ms MS]

By default a poll loop (cooperative-sticky, a dynamic member, ``commit()`` after every poll). ``--strategy``
chooses the assignor ("consumer": the consumer group protocol, KIP-848), ``--instance-id`` makes it a
static member (``group_instance_id``), ``--parallel N``
runs a ``ParallelConsumer`` (N workers, ``ordering="key"``, its own commits) over the consumer instead of
the loop, its handler sleeping up to ``--handler-sleep-ms`` and logging each record as a one-record "read".
A thread writes a "leader" line whenever the member becomes or stops being the group's leader. SIGTERM (or
SIGINT) ends the loop (or the ``ParallelConsumer``'s run); the consumer is closed and a last "closed" line
written. The library's own history goes to ``OUT.lib`` (``history_path``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from typing import Any

from kafka.errors import KafkaError

from ..consumer import Consumer, ConsumerRebalanceListener
from ..parallel import ParallelConsumer
from ..structs import ConsumerRecord

__all__ = ["main"]


class History:
    """The member's JSON lines; line-buffered, so a kill or a freeze loses at most the line being written.
    A ``ParallelConsumer``'s workers write too: one lock."""

    def __init__(self, path: str, name: str) -> None:
        self._file = open(path, "a", encoding="utf-8", buffering=1)
        self._name = name
        self._lock = threading.Lock()

    def write(self, event: str, t: float | None = None, **fields: Any) -> None:
        line = {"t": round(time.monotonic() * 1000 if t is None else t, 3), "member": self._name, "event": event}
        line.update(fields)
        text = json.dumps(line) + "\n"
        with self._lock:
            if not self._file.closed:  # a worker or the leadership thread may outlive close()
                self._file.write(text)

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _now_ms() -> float:
    return round(time.monotonic() * 1000, 3)


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """Contiguous [first, last] runs of ascending offsets (a plain producer's are one run)."""
    runs: list[tuple[int, int]] = []
    for o in offsets:
        if runs and o == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], o)
        else:
            runs.append((o, o))
    return runs


class Listener(ConsumerRebalanceListener):
    def __init__(self, history: History, revoke_sleep_ms: float = 0.0) -> None:
        self.history = history
        self.revoke_sleep_ms = revoke_sleep_ms
        self.consumer: Consumer | None = None

    def _log(self, event: str, partitions) -> None:
        generation = self.consumer.group_metadata().generation_id if self.consumer is not None else None
        self.history.write(
            event, partitions=sorted([tp.topic, tp.partition] for tp in partitions), generation=generation
        )

    def on_partitions_assigned(self, assigned):
        self._log("assigned", assigned)

    def on_partitions_revoked(self, revoked):
        self._log("revoked", revoked)
        if self.revoke_sleep_ms and revoked and self.consumer is not None:
            # a slow cleanup, then the usual last commit of what was handed out (KafkaConsumer's docs)
            time.sleep(self.revoke_sleep_ms / 1000)
            _commit(self.consumer, self.history, where="on_partitions_revoked")

    def on_partitions_lost(self, lost):  # overridden: the default would log it as "revoked"
        self._log("lost", lost)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m fsm_consumer.testing._member_process",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--name", required=True, help="the member's name in the history (and its client_id)")
    p.add_argument("--out", required=True, help="the JSON lines file (appended to)")
    p.add_argument("--session-timeout-ms", type=int, default=6000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=None, help="default: a tenth of the session")
    p.add_argument("--max-poll-records", type=int, default=None)
    p.add_argument("--max-poll-interval-ms", type=int, default=None)
    p.add_argument(
        "--revoke-sleep-ms",
        type=float,
        default=0.0,
        help="on_partitions_revoked sleeps this long, then commits what was handed out (logged)",
    )
    p.add_argument(
        "--request-timeout-ms",
        type=int,
        default=30000,
        help="the library's default; one shorter than a freeze drops every answer in flight at the "
        "thaw, hiding a fetch answered during the freeze",
    )
    p.add_argument(
        "--commit",
        choices=["every-poll", "auto", "async"],
        default="every-poll",
        help="every-poll: commit() after each non-empty poll, logged; auto: the library's "
        "auto-commit (not logged here, only in OUT.lib); async: commit_async() after each non-empty poll "
        "with auto-commit on too (the library's history logs both)",
    )
    p.add_argument("--auto-commit-interval-ms", type=int, default=None, help="--commit auto/async: the interval")
    p.add_argument(
        "--commit-faults",
        choices=["on", "off"],
        default="off",
        help="the consumer's OffsetCommits meet faults, one every 0.8-2 s: an answer held 0.5-3 s, a retriable "
        "error (COORDINATOR_LOAD_IN_PROGRESS, or COORDINATOR_NOT_AVAILABLE: found again) patched into an answer "
        "the broker gave after applying the commit; an answer held past request_timeout_ms is lost (the broker applied "
        "the commit, the consumer timed out)",
    )
    p.add_argument("--strategy", choices=["range", "cooperative-sticky", "consumer"], default="cooperative-sticky")
    p.add_argument("--instance-id", default=None, help="group_instance_id: a static member (default: dynamic)")
    p.add_argument(
        "--parallel",
        type=int,
        default=None,
        metavar="N",
        help="run a ParallelConsumer (N workers, ordering key) instead of the poll loop; it commits itself",
    )
    p.add_argument(
        "--handler-sleep-ms",
        type=float,
        default=2.0,
        help="--parallel: each record's handler sleeps a uniform 0..MS (default 2)",
    )
    args = p.parse_args(argv)
    if args.parallel is not None and (args.parallel < 1 or args.commit != "every-poll"):
        p.error("--parallel takes N >= 1 and commits itself (not with --commit auto)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    history = History(args.out, args.name)
    stop: list[bool] = []
    running: list[ParallelConsumer] = []

    def on_signal(*_: object) -> None:  # the loop notices within one poll timeout
        stop.append(True)
        if running:
            running[-1].stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    every_poll = args.commit == "every-poll"
    commit_async = args.commit == "async"
    config: dict[str, Any] = dict(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.name,
        partition_assignment_strategy=[args.strategy],
        group_instance_id=args.instance_id,
        auto_offset_reset="earliest",
        enable_auto_commit=not every_poll,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms or max(100, args.session_timeout_ms // 10),
        request_timeout_ms=args.request_timeout_ms,
        # Tansu 0.6 fails a follower's SyncGroup that reaches it before the leader's (group_harness.FAST)
        follower_sync_delay_ms=400,
        history_path=args.out + ".lib",
    )
    if args.strategy == "consumer":  # KIP-848: the broker assigns, paces heartbeats and times the session
        for key in ("partition_assignment_strategy", "session_timeout_ms", "heartbeat_interval_ms"):
            del config[key]
        del config["follower_sync_delay_ms"]
        config["group_protocol"] = "consumer"
    if args.max_poll_records is not None:
        config["max_poll_records"] = args.max_poll_records
    if args.max_poll_interval_ms is not None:
        config["max_poll_interval_ms"] = args.max_poll_interval_ms
    if args.auto_commit_interval_ms is not None:
        config["auto_commit_interval_ms"] = args.auto_commit_interval_ms
    history.write("started", pid=os.getpid(), config=config, parallel=args.parallel)
    listener = Listener(history, args.revoke_sleep_ms)
    transport = None
    if args.commit_faults == "on":
        transport = _commit_faults(config, history, stop)
    consumer = Consumer(transport=transport, **config)
    listener.consumer = consumer
    consumer.subscribe([args.topic], listener=listener)
    threading.Thread(target=_follow_leadership, args=(consumer, history, stop), daemon=True).start()
    try:
        if args.parallel is not None:
            _run_parallel(consumer, args.parallel, args.handler_sleep_ms, history, stop, running)
        while not stop:
            started = _now_ms()
            try:
                batch = consumer.poll(timeout_ms=100)
            except KafkaError as exc:  # logged; the run judges by the history, not by a crash
                history.write("poll_error", error=repr(exc))
                time.sleep(0.05)
                continue
            # The generation at poll return. The one under which the records were fetched is not
            # visible; but a rebalance's callbacks run inside poll() before records are collected, so
            # this is the generation whose assignment the records were handed out under (a frozen
            # member that has not heard of its expiry still logs its old generation: R3 catches it).
            meta = consumer.group_metadata()
            returned = _now_ms()
            for tp, records in batch.items():
                for first, last in _runs([r.offset for r in records]):
                    history.write(
                        "read",
                        t=returned,
                        t_poll_start=started,
                        generation=meta.generation_id,
                        member_id=meta.member_id,
                        tp=[tp.topic, tp.partition],
                        offsets=[first, last],
                        count=last - first + 1,
                    )
            if batch and every_poll:
                _commit(consumer, history)
            elif batch and commit_async:
                consumer.commit_async(callback=lambda offsets, error: _async_done(history, offsets, error))
    finally:
        try:
            # every handed-out record was committed after its poll; a close-time commit would not be logged
            consumer.close(autocommit=not every_poll, timeout_ms=5000)
        finally:
            history.write("closed")
            history.close()
    return 0


def _is_leader(consumer: Consumer) -> bool:
    """Whether the group's last JoinGroup answer named this member its leader (a test aid's peek at the
    membership: the churn run spares the leader where a broker cannot replace one, docs/brokers.md)."""
    membership = getattr(getattr(consumer, "_group", None), "membership", None)
    return membership is not None and bool(membership.member_id) and membership.leader_id == membership.member_id


def _follow_leadership(consumer: Consumer, history: History, stop: list[bool]) -> None:
    """A "leader" line whenever the member becomes or stops being the group's leader (checked every 0.1 s)."""
    was: bool | None = None
    while not stop:
        try:
            now = _is_leader(consumer)
            if now != was:
                history.write("leader", leader=now, generation=consumer.group_metadata().generation_id)
                was = now
        except Exception:  # the consumer closing under it: the member is stopping anyway
            return
        time.sleep(0.1)


def _run_parallel(
    consumer: Consumer,
    workers: int,
    sleep_ms: float,
    history: History,
    stop: list[bool],
    running: list[ParallelConsumer],
) -> None:
    """A ``ParallelConsumer`` over ``consumer`` until ``stop``; one that ends on an error is logged and
    followed by a new one (as the poll loop logs an error and polls again)."""

    def handle(record: ConsumerRecord) -> None:
        if sleep_ms > 0:
            time.sleep(random.uniform(0, sleep_ms) / 1000)
        offsets = [record.offset, record.offset]
        history.write("read", tp=[record.topic, record.partition], offsets=offsets, count=1, by="handler")

    while not stop:
        pc = ParallelConsumer(consumer, handle, parallelism=workers, ordering="key")
        running.append(pc)  # before the check: a signal from now on stops this one
        if stop:
            break
        try:
            pc.run()
        except KafkaError as exc:  # logged; the run judges by the history
            history.write("poll_error", error=repr(exc))
            time.sleep(0.05)


def _commit(consumer: Consumer, history: History, where: str | None = None) -> None:
    """commit() of everything handed out, logged per partition only once it returned without error;
    ``where``: the callback it was made from (None: the poll loop)."""
    t_start = _now_ms()
    # what commit() without offsets commits: it takes this same snapshot first thing on this thread
    # (commit() returns nothing, so there is no public way to learn what it committed)
    offsets = consumer._subs.consumed_offsets()
    generation = consumer.group_metadata().generation_id
    extra: dict[str, Any] = {"where": where} if where else {}
    try:
        consumer.commit(timeout_ms=5000)
    except KafkaError as exc:  # CommitFailedError, RebalanceInProgressError, KafkaTimeoutError...
        history.write("commit_failed", t_start=t_start, error=repr(exc), generation=generation, **extra)
        return
    t = _now_ms()
    for tp, om in sorted(offsets.items()):
        history.write(
            "commit",
            t=t,
            t_start=t_start,
            tp=[tp.topic, tp.partition],
            offset=om.offset,
            generation=generation,
            **extra,
        )


def _async_done(history: History, offsets: dict, error: BaseException | None) -> None:
    history.write(
        "commit_async",
        offsets=sorted([tp.topic, tp.partition, om.offset] for tp, om in offsets.items()),
        error=None if error is None else repr(error),
    )


def _commit_faults(config: dict[str, Any], history: History, stop: list[bool]) -> Any:
    """A FaultyTransport around the consumer's own, and a thread switching one OffsetCommit fault on every
    0.8-2 s (--commit-faults; every 0.2-0.8 s, hardly an auto-commit got through), each logged as a
    "commit_fault" line: an answer held 0.5-3 s (past the request timeout it is lost: the broker applied the
    commit, the consumer times out), or a retriable error patched into an answer the broker gave after
    applying the commit."""
    from .._config import ConsumerConfig
    from ..transport import FaultyTransport, KafkaTransport

    faults = FaultyTransport(KafkaTransport(ConsumerConfig.from_kwargs(**config)))
    rng = random.Random()

    def inject() -> None:
        while not stop:
            time.sleep(rng.uniform(0.8, 2.0))
            kind = rng.choice(("hold", "loading", "not_available"))
            if kind == "hold":
                ms = rng.uniform(500, 3000)
                faults.delay("OffsetCommit", ms)
                history.write("commit_fault", kind=kind, ms=round(ms))
            else:  # COORDINATOR_LOAD_IN_PROGRESS (retried), COORDINATOR_NOT_AVAILABLE (found again, retried)
                faults.fail("OffsetCommit", 14 if kind == "loading" else 15)
                history.write("commit_fault", kind=kind)

    threading.Thread(target=inject, daemon=True, name="commit-faults").start()
    return faults


if __name__ == "__main__":
    sys.exit(main())
