"""The public Consumer: kafka-python's KafkaConsumer API on the two-thread design.

Everything that needs the network becomes an application event for the background thread;
blocking calls wait on the event's future until their deadline. poll() runs on this thread:
it raises errors the background thread reported and collects records from the fetch buffer.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from kafka.structs import OffsetAndTimestamp

from .._config import ConsumerConfig
from .._metrics import Metrics
from ..engine import ApplicationEventProcessor, BackgroundLifecycle, NetworkThread
from ..errors import (ConsumerClosedError, IllegalStateError, KafkaTimeoutError, NoOffsetForPartitionError,
                      WakeupException)
from ..events import (ApplicationEventQueue, AssignmentChangedEvent, BackgroundEventQueue, CallbackEvent,
                      CloseEvent, ErrorEvent, ListOffsetsEvent, PollEvent, Signal, TopicMetadataEvent)
from ..fetch import ConsumerRecord, TopicPartition
from ..fetch._buffer import FetchBuffer
from ..fetch._collector import FetchCollector
from ..managers import FetchManager, MetadataManager, OffsetsManager
from ..spec import MonotonicClock, SpecMachine, shipped_spec
from ..state import SubscriptionState
from ..transport._kafka import KafkaTransport
from ._group import GroupParts
from ._group_api import GroupApi

_EARLIEST, _LATEST = -2, -1
_log = logging.getLogger("fsm_consumer.consumer")


def _tp(value: Any) -> TopicPartition:
    try:
        topic, partition = value
    except (TypeError, ValueError):
        raise TypeError(f"expected a TopicPartition (topic, partition), got {value!r}") from None
    if not isinstance(topic, str) or isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"expected a TopicPartition (topic: str, partition: int), got {value!r}")
    return TopicPartition(topic, partition)


class Consumer(GroupApi):
    """A Kafka consumer. ``Consumer(bootstrap_servers=..., **config)``; see ConsumerConfig for keys."""

    def __init__(self, *topics: str, transport=None, **configs: Any) -> None:
        self.config = config = ConsumerConfig.from_kwargs(**configs)
        self._clock = clock = MonotonicClock()
        self._signal = Signal()
        self._closed = False
        self._woken = threading.Event()
        self._iterator: Iterator[ConsumerRecord] | None = None
        self._metrics = metrics = Metrics()
        self._subs = subs = SubscriptionState(config.auto_offset_reset, notify=self._signal.set)
        self._app_queue = ApplicationEventQueue()
        self._bg_queue = bg = BackgroundEventQueue(self._signal)
        self._buffer = buffer = FetchBuffer(config.fetch_buffer_max_bytes, on_data=self._signal.set)
        self._transport = transport = transport or KafkaTransport(config, clock=clock)
        self._app_queue.bind_waker(transport.wakeup)
        self._metadata = metadata = MetadataManager(config, subs.topics_needed)
        offsets = OffsetsManager(config, subs, metadata, bg)
        fetch = FetchManager(config, subs, metadata, buffer, bg, metrics)
        self._lifecycle = lifecycle = BackgroundLifecycle(clock)
        machine = SpecMachine(shipped_spec("background"), lifecycle, clock=clock, config=config,
                              instance=config.client_id)
        lifecycle.machine = self._background_machine = machine
        processor = ApplicationEventProcessor(metadata=metadata, offsets=offsets, lifecycle=lifecycle,
                                              machine=machine, subscription=subs)
        self._collector = FetchCollector(config, subs, buffer, transport.wakeup, metrics)
        self._group = group = GroupParts(
            config, clock=clock, subscription=subs, metadata=metadata, lifecycle=lifecycle,
            background_machine=machine, background_events=bg, app_queue=self._app_queue, processor=processor,
            metrics=metrics) if config.group_id else None
        self._thread = NetworkThread(
            name=f"fsm-consumer-network-{config.client_id}", clock=clock, transport=transport,
            managers=[metadata, *(group.managers if group else ()), offsets, fetch], processor=processor,
            machine=machine, lifecycle=lifecycle, app_queue=self._app_queue, background_queue=bg,
            metadata=metadata, metrics=metrics,
            extra_machines=[group.membership.machine] if group else (),
            broker_sources=[group.coordinator] if group else ())
        self._thread.start()
        if topics:
            self.subscribe(topics)

    # -- plumbing ----------------------------------------------------------------------------
    def _ensure_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the consumer is closed")
        if self._lifecycle.failure is not None and not self._bg_queue:
            raise self._lifecycle.failure

    def _deadline(self, timeout_ms: float | None) -> float:
        ms = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        return self._clock.now_ms() + ms

    def _handle_background_events(self) -> None:
        for event in self._bg_queue.drain():
            if isinstance(event, ErrorEvent):
                raise event.error
            if isinstance(event, CallbackEvent):
                error = None
                try:
                    event.fn(*event.args)
                except Exception as exc:  # the callback's failure is the caller's, after the ack
                    error = exc
                if event.ack is not None:
                    event.ack(error)
                if error is not None:
                    raise error

    def _raise_if_no_offset(self, partitions=None) -> None:
        """auto_offset_reset='none' and no position: raised by every poll()/position() until a seek."""
        missing = self._subs.without_offset(partitions)
        if missing:
            raise NoOffsetForPartitionError(missing)

    def _check_wakeup(self) -> None:
        if self._woken.is_set():
            self._woken.clear()
            raise WakeupException("the call was woken up by wakeup()")

    def _call(self, event, timeout_ms: float | None):
        """Send ``event`` and wait for its result until its deadline."""
        self._ensure_open()
        self._check_wakeup()  # a wakeup() that came before this call is raised by it (Kafka's contract)
        event.deadline_ms = self._deadline(timeout_ms)
        self._app_queue.put(event)
        while True:
            remaining = event.deadline_ms - self._clock.now_ms()
            if event.future.wait(max(0.0, min(remaining, 100.0)) / 1000.0):
                return event.future.result()
            self._check_wakeup()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{type(event).__name__} did not complete within "
                                        f"{timeout_ms if timeout_ms is not None else self.config.default_api_timeout_ms} ms")

    def _wake_background(self) -> None:
        self._app_queue.put(AssignmentChangedEvent(future=None))

    # -- assignment ------------------------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._ensure_open()
        wanted = [_tp(p) for p in partitions]
        # with a group, starting positions come from the group's committed offsets
        self._subs.assign(wanted, awaiting_committed=self._group is not None)
        assigned = set(wanted)
        self._collector.drop_partitions(lambda tp: tp in assigned)
        self._wake_background()

    def assignment(self) -> set[TopicPartition]:
        return self._subs.assignment()

    # -- positions ---------------------------------------------------------------------------------
    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._ensure_open()
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
        tp = _tp(partition)
        self._subs.seek(tp, offset)
        self._wake_background()

    def _seek_to(self, partitions, strategy: str) -> None:
        self._ensure_open()
        tps = [_tp(p) for p in partitions] if partitions else list(self._subs.assignment())
        self._subs.request_reset(tps, strategy)
        self._wake_background()

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._seek_to(partitions, "earliest")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._seek_to(partitions, "latest")

    def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int:
        """The offset of the next record to return; waits for a pending reset to resolve."""
        self._ensure_open()
        tp = _tp(partition)
        deadline = self._deadline(timeout_ms)
        while True:
            self._signal.clear()
            position = self._subs.state(tp).position
            if position is not None:
                return position
            self._raise_if_no_offset([tp])
            self._handle_background_events()
            self._check_wakeup()
            remaining = deadline - self._clock.now_ms()
            if remaining <= 0:
                raise KafkaTimeoutError(f"the position of {tp} was not known within the timeout")
            self._signal.wait(remaining / 1000.0)

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
    def poll(self, timeout_ms: float = 0, max_records: int | None = None, update_offsets: bool = True
             ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition, at most ``max_records`` (default max_poll_records); waits up to
        ``timeout_ms`` for some to arrive. Raises what the background thread reported."""
        if not update_offsets:
            raise ValueError("update_offsets=False is not supported (positions always advance)")
        return self._poll(timeout_ms, max_records, self._collector.collect)

    def poll_batch(self, timeout_ms: float = 0, max_records: int | None = None):
        """Like poll(), as one ``pyarrow.RecordBatch`` with columns topic (dictionary<string>),
        partition (int32), offset (int64), timestamp (timestamp[ms]; null when the record has none), key
        and value (binary, nullable) and headers (list<struct<key: string, value: binary>>), in the
        order poll() would hand the records out; no rows when nothing came within ``timeout_ms``.
        Positions advance exactly as with poll(), and the two can be mixed. Keys and values are
        the raw bytes, so it cannot be used with key_deserializer or value_deserializer.
        Needs pyarrow (``pip install fsm_consumer[spark]``)."""
        try:
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise ImportError("Consumer.poll_batch() needs pyarrow: pip install fsm_consumer[spark]") from exc
        if self.config.key_deserializer is not None or self.config.value_deserializer is not None:
            raise ValueError("poll_batch() returns raw bytes: it cannot be used with key_deserializer or "
                             "value_deserializer (use poll(), or deserialize the columns)")
        return self._poll(timeout_ms, max_records, self._collector.collect_batch)

    def _poll(self, timeout_ms: float, max_records: int | None, collect):
        self._ensure_open()
        limit = self.config.max_poll_records if max_records is None else max_records
        if limit < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records!r}")
        self._metrics.polls += 1
        self._check_wakeup()  # also when records are waiting: a pending wakeup() is never lost behind data
        deadline = self._clock.now_ms() + timeout_ms
        if self._group is not None:  # restarts the poll-interval timer, rejoins a stale member
            self._app_queue.put(PollEvent(future=None, at_ms=deadline - timeout_ms))
        while True:
            self._signal.clear()
            self._handle_background_events()
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

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> ConsumerRecord:
        if self._iterator is None:
            self._iterator = self._records()
        return next(self._iterator)

    def _records(self) -> Iterator[ConsumerRecord]:
        timeout = self.config.consumer_timeout_ms
        idle_since = self._clock.now_ms()
        while True:
            wait = 1000.0 if math.isinf(timeout) else max(0.0, min(1000.0, idle_since + timeout - self._clock.now_ms()))
            batch = self.poll(timeout_ms=wait)
            if batch:
                idle_since = self._clock.now_ms()
                for records in batch.values():
                    yield from records
            elif not math.isinf(timeout) and self._clock.now_ms() - idle_since >= timeout:
                self._iterator = None
                return

    # -- offsets lookups ---------------------------------------------------------------------------------
    def _list_offsets(self, timestamps: dict, timeout_ms):
        return self._call(ListOffsetsEvent(timestamps=timestamps), timeout_ms)

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: float | None = None
                          ) -> dict[TopicPartition, int]:
        found = self._list_offsets({_tp(p): _EARLIEST for p in partitions}, timeout_ms)
        return {tp: v[0] for tp, v in found.items() if v is not None}

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: float | None = None
                    ) -> dict[TopicPartition, int]:
        """The offset after the last record. With Tansu 0.6 this is the last batch's base offset + 1
        (a broker quirk), not the high watermark of a multi-record batch."""
        found = self._list_offsets({_tp(p): _LATEST for p in partitions}, timeout_ms)
        return {tp: v[0] for tp, v in found.items() if v is not None}

    def offsets_for_times(self, timestamps: dict, timeout_ms: float | None = None
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        checked = {}
        for p, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamp for {p} must be an integer >= 0 (ms), got {ts!r}")
            checked[_tp(p)] = ts
        found = self._list_offsets(checked, timeout_ms)
        return {tp: (None if v is None else OffsetAndTimestamp(v[0], v[1], -1)) for tp, v in found.items()}

    # -- metadata ------------------------------------------------------------------------------------------
    def topics(self, timeout_ms: float | None = None) -> set[str]:
        return set(self._call(TopicMetadataEvent(topics=None), timeout_ms))

    def partitions_for_topic(self, topic: str, timeout_ms: float | None = None) -> set[int] | None:
        found = self._call(TopicMetadataEvent(topics=frozenset([topic])), timeout_ms)
        return set(found[topic]) if topic in found else None

    # -- the rest --------------------------------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        lag = {}
        for tp in self._subs.assignment():
            s = self._subs._parts.get(tp)
            if s is not None and s.position is not None and s.high_watermark >= 0:
                lag[tp] = max(0, s.high_watermark - s.position)
        out = self._metrics.snapshot(lag=lag, buffer_bytes=self._buffer.bytes, buffer_peak=self._buffer.peak_bytes,
                                     app_events=len(self._app_queue), bg_events=len(self._bg_queue))
        if self._group is not None:
            out.update(self._group.metrics(self._clock.now_ms()))
        return out

    def wakeup(self) -> None:
        """From any thread: the blocking call in progress (or the next one) raises WakeupException."""
        self._woken.set()
        self._signal.set()

    def close(self, timeout_ms: float | None = None, autocommit: bool = True) -> None:
        """Stop the background thread and close every connection within ``timeout_ms``
        (default ``close_timeout_ms``)."""
        if self._closed:
            return
        self._closed = True
        budget = self.config.close_timeout_ms if timeout_ms is None else timeout_ms
        deadline = self._clock.now_ms() + budget
        if self._thread.alive:
            event = CloseEvent(deadline_ms=deadline)
            self._app_queue.put(event)
            while not event.future.done and self._clock.now_ms() < deadline:
                self._signal.clear()
                try:  # the rebalance callbacks of leaving the group run here, on this thread
                    self._handle_background_events()
                except Exception as exc:  # close goes on: a failing callback must not leave a thread behind
                    _log.warning("during close: %r", exc)
                self._signal.wait(min(50.0, max(0.0, deadline - self._clock.now_ms())) / 1000.0)
            if not self._thread.join(max(0.0, deadline - self._clock.now_ms()) / 1000.0 + 0.05):
                # the loop did not stop in time: close the sockets from here so nothing stays open
                self._transport.close()
        self._collector.drop_partitions(lambda tp: False)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<fsm_consumer.Consumer {self.config.client_id} {'closed' if self._closed else 'open'}>"


KafkaConsumer = Consumer
