"""The public Consumer: kafka-python's KafkaConsumer API on the two-thread design.

Everything that needs the network becomes an application event for the background thread;
blocking calls wait on the event's future until their deadline. poll() runs on this thread:
it raises errors the background thread reported and collects records from the fetch buffer.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sized
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar, overload

from .._config import ConsumerConfig
from .._metrics import kafka_python_view
from ..errors import ConsumerClosedError, KafkaTimeoutError, NoOffsetForPartitionError, WakeupException
from ..events import (
    AssignmentChangedEvent,
    BootstrapEvent,
    CallbackEvent,
    CloseEvent,
    ErrorEvent,
    PollEvent,
    Signal,
)
from ..fetch import ConsumerRecord, OffsetAndMetadata, TopicPartition
from ..machines import MonotonicClock
from ._arguments import topic_partition as _tp
from ._group_api import GroupApi, check_subscription, held_key
from ._lookups import Lookups
from ._wiring import wire

if TYPE_CHECKING:
    import pyarrow as pa
    from kafka.metrics import KafkaMetric, MetricName

    from ..events import ApplicationEvent

_R = TypeVar("_R", bound=Sized)  # what a poll collects: records by partition, or a RecordBatch

_log = logging.getLogger("fsm_consumer.consumer")


class Consumer(GroupApi, Lookups):
    """A Kafka consumer. ``Consumer(bootstrap_servers=..., **config)``; see ConsumerConfig for keys."""

    # ``transport`` (a test hook: a fsm_consumer Transport, None for a KafkaTransport) is Any, not
    # ``Transport | None``: a type checker matches a ``**config`` dict's values against every keyword
    # parameter, so ``Consumer(**config)`` with a dict of mixed values (dict[str, object]) would fail
    def __init__(self, *topics: str, transport: Any = None, **configs: Any) -> None:
        self.config = config = ConsumerConfig.from_kwargs(**configs)
        subscription = check_subscription(topics, None) if topics else None  # before any thread starts
        self._clock = clock = MonotonicClock()
        self._signal = Signal()
        self._closed = self._closing = False
        self._woken = threading.Event()
        self._iterator: Iterator[ConsumerRecord] | None = None
        parts = wire(config, transport, clock, self._signal)
        self._metrics, self._subs, self._held = parts.metrics, parts.subs, parts.held
        self._app_queue, self._bg_queue, self._buffer = parts.app_queue, parts.bg_queue, parts.buffer
        self._transport, self._metadata, self._collector = parts.transport, parts.metadata, parts.collector
        self._lifecycle, self._background_machine = parts.lifecycle, parts.background_machine
        self._group, self._thread = parts.group, parts.thread
        self._history = history = parts.history
        if history is not None:
            history.started(config)
        self._thread.start()
        try:
            if subscription is not None:
                self.subscribe(*subscription)
            if config.api_version is None:
                self._infer_api_version(config.bootstrap_timeout_ms)
        except BaseException:
            self.close(autocommit=False, timeout_ms=1000)  # a failed construction leaves no thread behind
            raise

    def _infer_api_version(self, timeout_ms: float | None) -> None:
        """kafka-python 3.0's api_version=None: learn the broker release (config['api_version']) in the
        constructor, waiting at most ``timeout_ms`` (bootstrap_timeout_ms; None: no limit) for a broker to
        answer. None did: KafkaTimeoutError naming the bootstrap servers and why each failed, as kafka-python
        raises (the constructor then closes what it started)."""
        try:
            self.bootstrap(timeout_ms=math.inf if timeout_ms is None else timeout_ms)
        except KafkaTimeoutError:
            if not self._metadata.ready:  # else a broker answered just as the wait ended
                error = self._metadata.bootstrap_error()
                raise error from error.__cause__
        self._note_api_version()

    def _note_api_version(self) -> None:
        release = getattr(self._transport, "broker_release", None)
        if self.config.api_version is None and release:
            self.config = self.config.replace(api_version=tuple(release))

    # -- plumbing ----------------------------------------------------------------------------
    def _ensure_open(self) -> None:
        # while close() runs, its rebalance callbacks may still use the consumer (commit on revoke)
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        if self._lifecycle.failure is not None and not self._bg_queue:
            raise self._lifecycle.failure

    def _deadline(self, timeout_ms: float | None) -> float:
        ms = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return self._clock.now_ms() + ms

    def _handle_background_events(self) -> None:
        """Run every drained callback and acknowledge it (a rebalance waits for its ack), then raise the
        first error: one raised early would drop the events after it."""
        first: BaseException | None = None
        for event in self._bg_queue.drain():
            if isinstance(event, ErrorEvent):
                error = event.error
            elif isinstance(event, CallbackEvent):
                error = None
                began = self._clock.now_ms()
                try:
                    event.fn(*event.args)
                except Exception as exc:  # the callback's failure is the caller's, after the ack
                    error = exc
                if self._history is not None:
                    self._history.callback(event.fn, event.args, self._clock.now_ms() - began, error)
                if event.ack is not None:
                    event.ack(error)
            else:
                continue
            if error is None:
                continue
            if first is None:
                first = error
            else:
                _log.warning("also failed in the same poll (the first error is raised): %r", error)
        if first is not None:
            raise first

    def _raise_if_no_offset(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """auto_offset_reset='none' and no position: raised by every poll()/position() until a seek."""
        missing = self._subs.without_offset(partitions)
        if missing:
            raise NoOffsetForPartitionError(missing)

    def _check_wakeup(self) -> None:
        if self._woken.is_set():
            self._woken.clear()
            raise WakeupException("the call was woken up by wakeup()")

    def _call(
        self, event: ApplicationEvent, timeout_ms: float | None, what: str, default_ms: float | None = None
    ) -> Any:
        """Send ``event`` and wait for its result until its deadline; ``what`` names the call for a
        timeout's message (which also says why, when the background thread knows)."""
        self._ensure_open()
        self._check_wakeup()  # a wakeup() that came before this call is raised by it (Kafka's contract)
        ms = (
            timeout_ms
            if timeout_ms is not None
            else (self.config.default_api_timeout_ms if default_ms is None else default_ms)
        )
        event.what, event.timeout_ms = what, ms
        event.deadline_ms = self._clock.now_ms() + ms
        self._app_queue.put(event)
        assert event.future is not None  # the events waited for here carry one (the default)
        while True:
            remaining = event.deadline_ms - self._clock.now_ms()
            if event.future.wait(max(0.0, min(remaining, 100.0)) / 1000.0):
                return event.future.result()
            self._check_wakeup()
            self._held.raise_first()  # a failure the user must act on ends the wait (credentials, ACLs)
            if remaining <= 0:
                raise event.timeout_error()

    def _wake_background(self) -> None:
        self._app_queue.put(AssignmentChangedEvent(future=None))

    def bootstrap(self, timeout_ms: float | None = None, refresh: bool = False) -> None:
        """Block until cluster metadata is known (kafka-python); ``timeout_ms=None`` waits indefinitely.
        Raises KafkaTimeoutError naming the bootstrap servers when no broker answered in time."""
        self._call(
            BootstrapEvent(refresh=refresh),
            timeout_ms,
            f"bootstrap (cluster metadata from {','.join(self.config.bootstrap_servers)})",
            default_ms=math.inf,
        )
        self._note_api_version()

    def bootstrap_connected(self) -> bool:
        """Whether a broker has answered (cluster metadata is known)."""
        return self._metadata.ready

    # -- assignment ------------------------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._ensure_open()
        wanted = [_tp(p) for p in partitions]
        # with a group, starting positions come from the group's committed offsets
        self._subs.assign(wanted, awaiting_committed=self._group is not None)
        assigned = set(wanted)

        def given_up(key: Hashable) -> bool:
            k = held_key(key)
            return (
                k[0] == "partition"
                and k[1] not in assigned
                or k[0] == "topic"
                and all(tp.topic != k[1] for tp in assigned)
            )

        self._held.release_where(given_up)
        self._collector.drop_partitions(lambda tp: tp in assigned)
        self._wake_background()

    def assignment(self) -> set[TopicPartition]:
        return self._subs.assignment()

    # -- positions ---------------------------------------------------------------------------------
    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """Fetch ``partition`` from ``offset`` (an int, or an OffsetAndMetadata with its leader epoch)."""
        self._ensure_open()
        leader_epoch = -1
        if isinstance(offset, OffsetAndMetadata):
            offset, leader_epoch = offset.offset, (-1 if offset.leader_epoch is None else offset.leader_epoch)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
        tp = _tp(partition)
        self._subs.seek(tp, offset, leader_epoch)
        if self._history is not None:
            self._history.write("seek", tp=[tp.topic, tp.partition], to=offset)
        self._held.release(("partition", tp))  # the user moved past what was held for it
        self._wake_background()

    def _seek_to(self, partitions: tuple[TopicPartition, ...], strategy: str) -> None:
        self._ensure_open()
        tps = [_tp(p) for p in partitions] if partitions else list(self._subs.assignment())
        self._subs.request_reset(tps, strategy)
        for tp in tps:
            self._held.release(("partition", tp))
            if self._history is not None:
                self._history.write("seek", tp=[tp.topic, tp.partition], to=strategy)
        self._wake_background()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_to(partitions, "earliest")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._seek_to(partitions, "latest")

    def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int:
        """The offset of the next record to return; waits for a pending reset to resolve."""
        self._ensure_open()
        tp = _tp(partition)
        ms = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = self._clock.now_ms() + ms
        while True:
            self._signal.clear()
            position = self._subs.position(tp)
            if position is not None:
                return position
            self._raise_if_no_offset([tp])
            self._handle_background_events()
            self._check_wakeup()
            remaining = deadline - self._clock.now_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"position({tp.topic}-{tp.partition}) was not known within {ms:g} ms: "
                    "neither its committed offset nor its reset (ListOffsets) was answered"
                )
            self._signal.wait(remaining / 1000.0)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark of ``partition`` from the last Fetch answer, None before one (kafka-python).
        On Tansu 0.6 it is the last batch's base offset + 1 (a broker quirk)."""
        return self._subs.highwater(_tp(partition))

    def pause(self, *partitions: TopicPartition) -> None:
        self._ensure_open()
        self._subs.set_paused([_tp(p) for p in partitions], True)

    def resume(self, *partitions: TopicPartition) -> None:
        self._ensure_open()
        self._subs.set_paused([_tp(p) for p in partitions], False)
        self._wake_background()

    def paused(self) -> set[TopicPartition]:
        return self._subs.paused()

    # -- records -------------------------------------------------------------------------------------
    def poll(
        self, timeout_ms: float = 0, max_records: int | None = None, update_offsets: bool = True
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition, at most ``max_records`` (default max_poll_records); waits up to
        ``timeout_ms`` for some to arrive. Positions (and so what a commit commits) move past exactly
        the records returned. Raises what the background thread reported.

        ``update_offsets=False`` (kafka-python's, for iterator-style callers): the records of one
        partition fetch at most, and positions stay where they are; move them yourself with seek()
        (else the next poll returns the same records again)."""
        if update_offsets:
            return self._poll(timeout_ms, max_records, self._collector.collect)
        return self._poll(timeout_ms, max_records, lambda n: self._collector.collect(n, advance=False))

    def poll_batch(self, timeout_ms: float = 0, max_records: int | None = None) -> pa.RecordBatch:
        """Like poll(), as one ``pyarrow.RecordBatch`` with columns topic (dictionary<string>),
        partition (int32), offset (int64), timestamp (timestamp[ms]; null when the record has none),
        timestamp_type (int32: 0 create time, 1 log append time, -1 none), key
        and value (binary, nullable) and headers (list<struct<key: string, value: binary>>), in the
        order poll() would hand the records out; no rows when nothing came within ``timeout_ms``.
        Positions advance exactly as with poll(), and the two can be mixed. Keys and values are
        the raw bytes, or typed columns where the key or value deserializer is one of
        ``fsm_consumer.schemas`` (an Avro record a struct column; other deserializers are refused).
        Needs pyarrow (``pip install fsm_consumer[spark]``)."""
        try:
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise ImportError("Consumer.poll_batch() needs pyarrow: pip install fsm_consumer[spark]") from exc
        for origin, des in (("key", self.config.key_deserializer), ("value", self.config.value_deserializer)):
            if des is not None and not hasattr(des, "to_arrow"):
                raise ValueError(
                    f"poll_batch() hands out columns: the {origin}_deserializer cannot type them (use poll(), a "
                    "deserializer of fsm_consumer.schemas, or none and deserialize the binary column)"
                )
        return self._poll(timeout_ms, max_records, self._collector.collect_batch)

    def _poll(
        self, timeout_ms: float, max_records: int | None, collect: Callable[[int], _R], *, call: bool = True
    ) -> _R:
        self._ensure_open()
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms!r}")
        limit = self.config.max_poll_records if max_records is None else max_records
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"max_records must be an integer, got {max_records!r}")
        if limit < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records!r}")
        self._metrics.polls += 1
        self._check_wakeup()  # also when records are waiting: a pending wakeup() is never lost behind data
        started = self._clock.now_ms()
        if call:  # a history's "read" lines say when their poll began (the iterator's: when next() did)
            self._collector.call_started = started
        deadline = started + timeout_ms
        if self._group is not None:  # restarts the poll-interval timer, rejoins a stale member
            self._app_queue.put(PollEvent(future=None, at_ms=deadline - timeout_ms))
        while True:
            self._signal.clear()
            self._handle_background_events()
            self._held.raise_first()
            self._raise_if_no_offset()
            records = collect(limit)
            if len(records):
                return records
            self._check_wakeup()
            if self._lifecycle.failure is not None:
                raise self._lifecycle.failure
            remaining = deadline - self._clock.now_ms()
            if remaining <= 0:
                return records
            self._signal.wait(remaining / 1000.0)

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record (kafka-python's iterator): StopIteration after ``consumer_timeout_ms``
        without one, or once the consumer is closed. The position moves past each record as it is
        returned, so a commit never covers a record the application has not received."""
        if self._closed:
            raise StopIteration("the consumer is closed")
        if self._iterator is None:
            self._iterator = self._records()
        if self._history is not None:
            self._collector.call_started = self._clock.now_ms()
        try:
            return next(self._iterator)
        except BaseException:
            # ended, or raised (a deserializer's error, a held error): a generator that raised is done,
            # the next call starts a fresh one from the positions (kafka-python's iterator goes on too)
            self._iterator = None
            raise

    def _records(self) -> Iterator[ConsumerRecord]:
        timeout = self.config.consumer_timeout_ms
        idle_since = self._clock.now_ms()
        collector = self._collector
        while True:
            wait = 1000.0 if math.isinf(timeout) else max(0.0, min(1000.0, idle_since + timeout - self._clock.now_ms()))
            # one partition's fetch at most, lent: each record is handed out (and its line written) by take_record
            batch = self._poll(wait, None, lambda n: collector.collect(n, advance=False, lend=True), call=False)
            if not batch:
                if not math.isinf(timeout) and self._clock.now_ms() - idle_since >= timeout:
                    return
                continue
            for tp, records in batch.items():
                last = records[-1]
                for record in records:
                    # taken atomically (position checked and moved, lease checked); the partition was
                    # sought, paused or revoked meanwhile: the rest is not handed out
                    if not collector.take_record(tp, record):
                        break
                    if record is last:
                        collector.settle()  # its fetch is used up: the next one is fetched meanwhile
                    yield record
            idle_since = self._clock.now_ms()

    # -- the rest --------------------------------------------------------------------------------------------
    @overload
    def metrics(self, raw: Literal[False] = False) -> dict[str, dict[str, Any]]: ...
    @overload
    def metrics(self, raw: Literal[True]) -> dict[MetricName, KafkaMetric]: ...
    @overload
    def metrics(self, raw: bool = False) -> dict[str, dict[str, Any]] | dict[MetricName, KafkaMetric]: ...
    def metrics(self, raw: bool = False) -> dict[str, dict[str, Any]] | dict[MetricName, KafkaMetric]:
        """kafka-python 3.0's metrics(): metric group -> {metric name -> value}, with kafka-python's groups
        and names (``consumer-fetch-manager-metrics``, ``consumer-coordinator-metrics``, ``consumer-metrics``)
        for the figures there are here; ``raw=True``: {MetricName: KafkaMetric} as kafka-python's. Every
        figure of this consumer, flat: metrics_flat()."""
        return kafka_python_view(self.metrics_flat(), client_id=self.config.client_id, raw=raw)

    def metrics_flat(self) -> dict[str, Any]:
        """Every figure by name, in one flat dict (docs/usage.md lists them); read it from any thread."""
        lag = self._subs.lag()
        # snapshots: the transport is the background thread's, node_states() copies what it reads
        node_states = getattr(self._transport, "node_states", None)
        out = self._metrics.snapshot(
            lag=lag,
            buffer_bytes=self._buffer.bytes,
            buffer_peak=self._buffer.peak_bytes,
            app_events=len(self._app_queue),
            bg_events=len(self._bg_queue),
            nodes=node_states() if node_states is not None else {},
            held=self._held.describe(),
        )
        # fetched data not handed out because its partition was sought, paused or revoked meanwhile
        out["fetches-dropped-stale"] = self._collector.stale_fetches
        out["records-dropped-stale"] = self._collector.stale_records
        out["assigned-partitions"] = len(self._subs.assignment())
        if self._group is not None:
            out.update(self._group.metrics(self._clock.now_ms()))
        return out

    def wakeup(self) -> None:
        """From any thread: the blocking call in progress (or the next one) raises WakeupException."""
        self._woken.set()
        self._signal.set()

    def close(self, autocommit: bool = True, timeout_ms: float | None = None) -> None:
        """Leave the group (rebalance callbacks run here and may still commit), auto-commit unless
        ``autocommit`` is False, stop the background thread and close every connection within
        ``timeout_ms`` (default ``close_timeout_ms``). kafka-python's argument order. Connections are
        closed by the background thread as it stops; if it does not stop in time, a WARNING says so."""
        if self._closed or self._closing:
            return
        self._closing = True
        try:
            budget = self.config.close_timeout_ms if timeout_ms is None else timeout_ms
            deadline = self._clock.now_ms() + budget
            if self._thread.alive:
                event = CloseEvent(deadline_ms=deadline, autocommit=bool(autocommit))
                assert event.future is not None  # built with one (the default)
                event.future.wake = self._signal.set
                self._app_queue.put(event)
                while not event.future.done and self._clock.now_ms() < deadline:
                    self._signal.clear()
                    try:  # the rebalance callbacks of leaving the group run here, on this thread
                        self._handle_background_events()
                    except Exception as exc:  # close goes on: a failing callback must not leave a thread behind
                        _log.warning("during close: %r", exc)
                    self._signal.wait(min(50.0, max(0.0, deadline - self._clock.now_ms())) / 1000.0)
                if not self._thread.join(max(0.0, deadline - self._clock.now_ms()) / 1000.0 + 0.05):
                    # Never closed from here: the transport is the background thread's alone, and its
                    # finally closes every connection when the loop stops (the thread is a daemon).
                    _log.warning(
                        "close(): the background thread of consumer %r did not stop within %g ms; "
                        "it closes its connections when it finishes",
                        self.config.client_id,
                        budget,
                    )
            self._collector.drop_partitions(lambda tp: False)
        finally:
            self._closed = True
            self._iterator = None
            if self._history is not None:
                self._history.write("closed")
                self._history.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<fsm_consumer.Consumer {self.config.client_id} {'closed' if self._closed else 'open'}>"


KafkaConsumer = Consumer
