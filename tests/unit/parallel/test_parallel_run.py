"""ParallelConsumer.run() over an in-memory consumer: how failures, aborts and seeks end or reshape a run.

``LogConsumer`` is what a ParallelConsumer uses of a Consumer (assigned partitions over in-memory logs,
positions, pause, commits with their metadata), thread-safe so a handler may seek. The revocation
timeout is long (60 s) wherever a test asserts that run() ends promptly.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import namedtuple
from types import SimpleNamespace

import pytest

import fsm_consumer
from fsm_consumer.fetch import OffsetAndMetadata, TopicPartition
from fsm_consumer.parallel import HandlerFailedError, ParallelConsumer, PartitionProgress

TP = TopicPartition("t", 0)
LONG_REVOKE_MS = 60_000
PROMPT_S = 10.0  # run() must end well before LONG_REVOKE_MS
Record = namedtuple("Record", "topic partition offset key value")


class LogConsumer:
    """Assigned partitions, each a log of ``count`` records; positions start at the committed offset
    (else 0); poll() returns at most ``batch`` records of a partition at a time."""

    def __init__(self, count: int, partitions: int = 1, key=lambda i: b"k%d" % (i % 4), batch: int = 5) -> None:
        self.config = SimpleNamespace(group_id="g", enable_auto_commit=False, max_poll_interval_ms=300_000)
        self._logs = {
            TopicPartition("t", p): [Record("t", p, i, key(i), b"v%d" % i) for i in range(count)]
            for p in range(partitions)
        }
        self._batch = batch
        self._lock = threading.Lock()
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._committed: dict[TopicPartition, OffsetAndMetadata] = {}
        self.commits: list[dict[TopicPartition, int]] = []

    # -- what ParallelConsumer calls --------------------------------------------------------------
    def assignment(self) -> set[TopicPartition]:
        return set(self._logs)

    def subscription(self):
        return None  # assigned by hand: no rebalance listener

    def committed(self, tp, metadata: bool = False):
        with self._lock:
            return self._committed.get(tp)

    def seek(self, tp, offset: int) -> None:
        with self._lock:
            self._positions[tp] = offset

    def pause(self, *tps) -> None:
        with self._lock:
            self._paused.update(tps)

    def resume(self, *tps) -> None:
        with self._lock:
            self._paused.difference_update(tps)

    def paused(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._paused)

    def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> dict:
        out = {}
        with self._lock:
            room = max_records or 500
            for tp, log in sorted(self._logs.items()):
                if tp in self._paused or room <= 0:
                    continue
                position = self._positions.get(tp)
                if position is None:
                    found = self._committed.get(tp)
                    position = found.offset if found is not None else 0
                records = log[position : position + min(self._batch, room)]
                if records:
                    out[tp] = records
                    room -= len(records)
                self._positions[tp] = position + len(records)
        if not out and timeout_ms:
            time.sleep(min(timeout_ms, 10) / 1000)
        return out

    def commit(self, offsets) -> None:
        with self._lock:
            self._committed.update(offsets)
            self.commits.append({tp: om.offset for tp, om in offsets.items()})

    def commit_async(self, offsets, callback) -> None:
        self.commit(offsets)
        callback(offsets, None)

    # -- for the tests ----------------------------------------------------------------------------
    def set_committed(self, tp, offset: int, metadata: str = "") -> None:
        self._committed[tp] = OffsetAndMetadata(offset, metadata, -1)


def run_until_it_ends(pc: ParallelConsumer, timeout_s: float = PROMPT_S) -> tuple[BaseException | None, float]:
    """run() in a thread: (what it raised, seconds it took); fails when it is still running after ``timeout_s``."""
    raised: list[BaseException] = []

    def target():
        try:
            pc.run()
        except BaseException as exc:  # KeyboardInterrupt and SystemExit too: handed to the test
            raised.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    took = time.monotonic() - started
    if thread.is_alive():
        pc.stop()
        raise AssertionError(f"run() still runs after {timeout_s} s (metrics {pc.metrics()})")
    return (raised[0] if raised else None), took


def no_worker_left() -> bool:
    return not [t for t in threading.enumerate() if t.name.startswith("fsm-parallel") and t.is_alive()]


def sync_or_async(kind: str, body):
    """``body(record)`` as the handler of that kind."""
    if kind == "thread":
        return body

    async def handler(record):
        await asyncio.sleep(0)
        body(record)

    return handler


# -- 1. a failure without on_failure -------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["thread", "async"])
def test_a_failure_without_on_failure_raises_promptly_after_committing_what_was_done(kind):
    consumer = LogConsumer(40)

    def body(record):
        if record.offset == 7:
            raise ValueError("bad record")

    pc = ParallelConsumer(
        consumer, sync_or_async(kind, body), parallelism=4, ordering="partition", revoke_timeout_ms=LONG_REVOKE_MS
    )
    raised, took = run_until_it_ends(pc)
    assert isinstance(raised, HandlerFailedError) and isinstance(raised.__cause__, ValueError)
    assert raised.record.offset == 7 and "t-0@7" in str(raised)
    assert took < PROMPT_S
    assert consumer.committed(TP).offset == 7  # the completed records, not the failed one
    assert pc.metrics()["failed"] == 1 and pc.metrics()["in-flight"] == 0
    assert no_worker_left()


def test_str_keys_keep_key_order_and_an_unhashable_key_ends_run_with_a_clear_error():
    # a key deserializer's output, not bytes: str keys order as bytes keys do
    seen: list[tuple[str, int]] = []
    consumer = LogConsumer(20, key=lambda i: f"k{i % 3}")

    def handle(record) -> None:
        seen.append((record.key, record.offset))
        if len(seen) == 20:
            pc.stop()

    pc = ParallelConsumer(consumer, handle, parallelism=4, ordering="key", revoke_timeout_ms=LONG_REVOKE_MS)
    raised, _ = run_until_it_ends(pc)
    assert raised is None
    for key in ("k0", "k1", "k2"):
        offsets = [o for k, o in seen if k == key]
        assert offsets == sorted(offsets) and len(offsets) == 7 - (key == "k2")
    consumer = LogConsumer(5, key=lambda i: {"id": i})  # a dict names no lane
    pc = ParallelConsumer(consumer, lambda r: None, parallelism=2, ordering="key", revoke_timeout_ms=LONG_REVOKE_MS)
    raised, took = run_until_it_ends(pc)
    assert isinstance(raised, TypeError) and "ordering='partition'" in str(raised)
    assert pc.metrics()["in-flight"] == 0 and consumer.commits == []  # nothing half received
    assert no_worker_left()


def test_a_failure_lets_the_running_records_of_other_keys_finish_and_commits_them():
    consumer = LogConsumer(8, key=lambda i: b"k%d" % i)  # every record its own key: all run at once
    finished: list[int] = []
    lock = threading.Lock()

    def handler(record):
        if record.offset == 0:
            time.sleep(0.3)  # the others are running when it fails
            raise ValueError("bad record")
        time.sleep(0.6)
        with lock:
            finished.append(record.offset)

    pc = ParallelConsumer(consumer, handler, parallelism=8, revoke_timeout_ms=LONG_REVOKE_MS)
    raised, took = run_until_it_ends(pc)
    assert isinstance(raised, HandlerFailedError) and raised.record.offset == 0
    assert sorted(finished) == list(range(1, 8)) and took < PROMPT_S
    found = consumer.committed(TP)
    assert found.offset == 0  # offset 0 failed: nothing passes it, what is done above travels in the metadata
    assert [o for o in range(8) if not PartitionProgress.restore(found.offset, found.metadata).receive(o)] == list(
        range(1, 8)
    )


# -- 2. BaseExceptions ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["thread", "async"])
@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt])
def test_a_handler_raising_systemexit_or_keyboardinterrupt_stops_run_which_raises_it(kind, exc_type):
    consumer = LogConsumer(30)
    handled: list[int] = []

    def body(record):
        if record.offset == 5:
            raise exc_type(3) if exc_type is SystemExit else exc_type()
        handled.append(record.offset)

    pc = ParallelConsumer(
        consumer,
        sync_or_async(kind, body),
        parallelism=4,
        ordering="partition",
        retries=3,
        on_failure=lambda record, exc: pytest.fail("an abort is no failure to dead-letter"),
        revoke_timeout_ms=LONG_REVOKE_MS,
    )
    raised, took = run_until_it_ends(pc)
    assert type(raised) is exc_type, raised  # as itself, not wrapped
    assert any("t-0@5" in note for note in getattr(raised, "__notes__", ()))
    assert handled == [0, 1, 2, 3, 4] and took < PROMPT_S  # not retried; nothing after it ran
    assert consumer.committed(TP).offset == 5  # the clean shutdown committed what was completed
    assert pc.metrics()["in-flight"] == 0 and pc.metrics()["retried"] == 0
    assert no_worker_left()


def test_systemexit_out_of_a_task_an_async_handler_started_ends_run_too():
    consumer = LogConsumer(30, key=lambda i: b"k%d" % i)
    started = threading.Event()

    async def exits():
        raise SystemExit(2)  # asyncio re-raises it out of the event loop itself, past every task

    async def handler(record):
        if record.offset == 3:
            await asyncio.get_running_loop().create_task(exits())
        started.set()
        await asyncio.sleep(0.05)

    pc = ParallelConsumer(consumer, handler, parallelism=4, revoke_timeout_ms=LONG_REVOKE_MS)
    raised, took = run_until_it_ends(pc)
    assert type(raised) is SystemExit and raised.code == 2
    assert took < PROMPT_S and pc.metrics()["in-flight"] == 0  # the cancelled tasks' records were counted out
    assert consumer.committed(TP).offset <= 3
    assert no_worker_left()


def test_cancellederror_from_an_async_handler_is_a_failure_of_that_record():
    consumer = LogConsumer(12, key=lambda i: b"k")
    attempts: dict[int, int] = {}
    dead: list[tuple[int, type]] = []
    done: list[int] = []

    async def handler(record):
        attempts[record.offset] = attempts.get(record.offset, 0) + 1
        if record.offset == 4:
            task = asyncio.get_running_loop().create_task(asyncio.sleep(10))
            task.cancel()
            await task  # an inner task cancelled: CancelledError out of the handler
        done.append(record.offset)
        if len(done) + len(dead) == 12:
            pc.stop()

    pc = ParallelConsumer(
        consumer,
        handler,
        parallelism=2,
        retries=1,
        retry_backoff_ms=1,
        on_failure=lambda record, exc: dead.append((record.offset, type(exc))),
        revoke_timeout_ms=LONG_REVOKE_MS,
    )
    raised, _ = run_until_it_ends(pc)
    assert raised is None
    assert dead == [(4, asyncio.CancelledError)] and attempts[4] == 2  # retried, then dead-lettered
    assert done == [o for o in range(12) if o != 4]  # the loop and the key went on
    assert consumer.committed(TP).offset == 12

    consumer = LogConsumer(12, key=lambda i: b"k")
    done.clear()
    pc = ParallelConsumer(consumer, handler, parallelism=2, revoke_timeout_ms=LONG_REVOKE_MS)
    raised, took = run_until_it_ends(pc)
    assert isinstance(raised, HandlerFailedError) and isinstance(raised.__cause__, asyncio.CancelledError)
    assert raised.record.offset == 4 and took < PROMPT_S
    assert consumer.committed(TP).offset == 4


def test_keyboardinterrupt_from_on_failure_stops_run_and_is_raised_as_itself():
    consumer = LogConsumer(10)

    def handler(record):
        if record.offset == 2:
            raise ValueError("bad record")

    def on_failure(record, exc):
        raise KeyboardInterrupt

    pc = ParallelConsumer(
        consumer, handler, parallelism=2, ordering="partition", on_failure=on_failure, revoke_timeout_ms=LONG_REVOKE_MS
    )
    raised, took = run_until_it_ends(pc)
    assert type(raised) is KeyboardInterrupt and took < PROMPT_S
    assert consumer.committed(TP).offset == 2


# -- 3. seek -------------------------------------------------------------------------------------------
def test_a_seek_below_the_committed_offset_handles_the_records_again_from_there():
    consumer = LogConsumer(20)
    consumer.set_committed(TP, 10, PartitionProgress(10, done=[12, 13]).metadata())
    consumer.seek(TP, 3)  # below the committed offset, before run()
    handled: list[int] = []

    def handler(record):
        handled.append(record.offset)
        if record.offset == 19:
            pc.stop()

    pc = ParallelConsumer(consumer, handler, parallelism=4, ordering="partition")
    raised, _ = run_until_it_ends(pc)
    assert raised is None
    assert handled == list(range(3, 20))  # 12 and 13 too: the metadata was the old position's
    assert min(c[TP] for c in consumer.commits) >= 3
    assert consumer.committed(TP) == OffsetAndMetadata(20, "", -1)


@pytest.mark.parametrize("kind", ["thread", "async"])
def test_a_seek_back_while_running_restarts_the_partitions_progress_there(kind):
    consumer = LogConsumer(20, partitions=2)  # polled 5 at a time: 16-19 came with 15, queued behind it
    handled: dict[int, list[int]] = {0: [], 1: []}
    sought = threading.Event()

    def restarted() -> bool:  # the poll after the seek brought offset 5 back: a new run of partition 0
        part = pc.metrics()["partitions"]["t-0"]
        return part["completed"] == 0 and part["committable"] == 5

    def note(record) -> bool:
        """True when this record is the one that seeks."""
        handled[record.partition].append(record.offset)
        if len(handled[0]) == 31 and len(handled[1]) == 20:
            pc.stop()
        if (record.partition, record.offset) == (0, 15) and not sought.is_set():
            sought.set()
            consumer.seek(TP, 5)
            return True
        return False

    def handler(record):
        if note(record):
            deadline = time.monotonic() + 5
            while not restarted() and time.monotonic() < deadline:
                time.sleep(0.005)

    async def async_handler(record):
        if note(record):
            deadline = time.monotonic() + 5
            while not restarted() and time.monotonic() < deadline:
                await asyncio.sleep(0.005)

    pc = ParallelConsumer(
        consumer,
        handler if kind == "thread" else async_handler,
        parallelism=4,
        ordering="partition",
        commit_interval_ms=50,
    )
    raised, _ = run_until_it_ends(pc)
    assert raised is None
    # partition 0: up to the seek, then again from 5; 16-19, received but not handed out, were dropped
    # (as a Kafka consumer drops what it fetched for a partition that is sought)
    assert handled[0] == list(range(16)) + list(range(5, 20))
    assert handled[1] == list(range(20))  # the other partition went on untouched
    assert consumer.committed(TP).offset == 20 and consumer.committed(TopicPartition("t", 1)).offset == 20
    assert pc.metrics()["in-flight"] == 0


# -- 4. the top-level export ---------------------------------------------------------------------------
def test_parallelconsumer_is_exported_at_the_top_level_and_loaded_on_first_use():
    import subprocess
    import sys

    from fsm_consumer import ParallelConsumer as top

    assert top is ParallelConsumer and "ParallelConsumer" in fsm_consumer.__all__
    assert "ParallelConsumer" in dir(fsm_consumer)
    probe = (
        "import sys, fsm_consumer; loaded = 'fsm_consumer.parallel' in sys.modules or 'asyncio' in sys.modules; "
        "from fsm_consumer import ParallelConsumer; from fsm_consumer.parallel import ParallelConsumer as P; "
        "print(loaded, ParallelConsumer is P)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "True"], out.stderr  # `import fsm_consumer` stays as light as it was
    with pytest.raises(AttributeError, match="no_such_name"):
        fsm_consumer.no_such_name  # noqa: B018
