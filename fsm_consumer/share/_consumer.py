"""The public ShareConsumer (KIP-932): many consumers on one partition, each record acquired under a lock and
acknowledged one by one, on the library's two threads.

The application thread hands records out of the share buffer and records acknowledgements in it, under the
lock the background thread takes while it fills the buffer and sends what was acknowledged; everything that
needs the network (heartbeats, share fetches, acknowledgements, leaving) runs on the background thread.
Outcomes of acknowledgements come back to this thread: to the acknowledgement commit callback (run by the
next poll(), commit or close) and to commit_sync()'s result.
"""

from __future__ import annotations

import logging
import operator
import threading
from collections.abc import Callable, Iterable
from itertools import repeat
from typing import Any, Self

from .._gc_pause import gc_paused
from ..errors import (
    ConsumerClosedError,
    IllegalStateError,
    KafkaTimeoutError,
    WakeupException,
)
from ..events import CloseEvent, Signal
from ..fetch._decode import _deserializer, deserializer_failed
from ..fetch._untrack import untrack
from ..managers._share_batch import ShareRecord as _Held
from ..managers._share_session import TopicIdPartition
from ..structs import TopicPartition
from ._acks import LastPoll, outcome_error
from ._config import share_config
from ._events import ShareSubscribeEvent, ShareUnsubscribeEvent
from ._types import AcknowledgeType, ShareRecord
from ._wiring import ShareParts, wire

_log = logging.getLogger("fsm_consumer.share")
_new = tuple.__new__  # a ShareRecord from a whole tuple, without its __new__'s keyword handling
_RECORD, _COUNT = operator.itemgetter(3), operator.itemgetter(2)  # a held record's decoded record, delivery count

#: (offsets acknowledged, by partition; the error, None when they took effect) -> anything
AcknowledgementCommitCallback = Callable[[dict[TopicPartition, set[int]], BaseException | None], object]


class ShareConsumer:
    """A member of a share group. ``ShareConsumer(*topics, bootstrap_servers=..., group_id=..., **config)``.

    Settings are the Consumer's (connection, security, timing, fetch sizes, deserializers), less those of consumer
    groups (refused, naming what replaces them), plus ``share_acknowledgement_mode`` ('implicit': what poll()
    handed out is accepted by the next poll(), commit or close; 'explicit': acknowledge() each record) and
    ``share_acquire_mode`` ('batch_optimized', or 'record_limit': at most max_poll_records acquired at a time).
    """

    def __init__(self, *topics: str, transport: Any = None, **configs: Any) -> None:
        self.config, self.settings = share_config(**configs)
        self._explicit = self.settings.acknowledgement_mode == "explicit"
        self._handed = False  # the last poll handed records out
        self._last = LastPoll()  # where the last poll handed out; explicit mode: its records and their acknowledgements
        self._signal = Signal()
        self._woken = threading.Event()
        self._closed = False
        self._callback: AcknowledgementCommitCallback | None = None
        self._failed: dict[tuple[str, int, int], BaseException] = {}  # not deserialized: (topic, partition, offset)
        self._failed_raised: set[tuple[str, int, int]] = set()
        self._pending: list[BaseException] = []  # raised by the next call
        self._parts: ShareParts = wire(self.config, self.settings, transport, self._signal)
        self._clock = self._parts.clock
        self._key_fn = _deserializer(self.config.key_deserializer)
        self._value_fn = _deserializer(self.config.value_deserializer)
        # record_limit: at most max_poll_records acquired at a time, so nothing is fetched ahead
        self._parts.fetch.adaptive = self.settings.acquire_mode != "record_limit"
        self._parts.thread.start()
        if topics:
            try:
                self.subscribe(topics)
            except BaseException:
                self.close(timeout_ms=1000)
                raise

    # -- subscription -----------------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str]) -> None:
        """Join the share group with ``topics`` (a list of names; replaces the subscription)."""
        self._ensure_open()
        if isinstance(topics, str):
            raise TypeError("subscribe() takes a list of topic names, not a string")
        names = tuple(sorted(set(topics)))
        if not names or not all(isinstance(t, str) and t for t in names):
            raise ValueError(f"subscribe() needs one or more topic names, got {topics!r}")
        self._call(ShareSubscribeEvent(topics=names), f"subscribe({list(names)})")

    def unsubscribe(self) -> None:
        """Leave the share group: acknowledgements taken so far go out, records not acknowledged are released."""
        self._ensure_open()
        self._settle(self._now())
        self._call(ShareUnsubscribeEvent(), "unsubscribe()")

    def subscription(self) -> set[str]:
        return set(self._parts.topics)

    # -- records ----------------------------------------------------------------------------------------
    def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> list[ShareRecord]:
        """Records acquired for this member, at most ``max_records`` (default max_poll_records), waiting up to
        ``timeout_ms`` for some. Implicit mode: the records of the previous poll() are accepted first. Explicit
        mode: each record of the previous poll() must have been acknowledged (IllegalStateError otherwise). A
        record is never handed out after its lock ran out."""
        self._ensure_open()
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms!r}")
        limit = self.config.max_poll_records if max_records is None else max_records
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_records must be an integer >= 1, got {max_records!r}")
        self._check_wakeup()
        self._raise_pending()
        parts = self._parts
        now = started = self._now()
        self._settle(now)
        with parts.lock:
            parts.membership.on_poll(now)
            parts.fetch.poll_started(now)
        deadline = now + timeout_ms
        first = True
        while True:
            self._signal.clear()
            self._run_callbacks()
            self._raise_pending()
            with parts.lock:
                now = self._now()  # read under the lock: a hand-out is stamped after what filled the buffer
                fetch = parts.fetch
                # each batch's records with its lock's deadline, read under the lock
                taken = [(b.deadline or 0.0, b.records) for b in fetch.buffer.take_batches(limit, now)]
                if not taken:
                    if first and self._handed:
                        fetch.app_waited()
                    fetch.want_records()
                elif fetch.ahead_allowed and fetch.buffer.ready_records() < fetch.fetch_records:
                    fetch.fetch_ahead(now)
            # the acknowledgements settled above go with the fetch asked here: one request, not two
            parts.transport.wakeup()
            first = False
            self._handed = bool(taken)
            if taken:
                if parts.history is not None:
                    parts.history.handed(taken, now, started)
                self._last.handed_out(taken, self._explicit)
                return self._hand_out(taken)
            self._check_wakeup()
            if parts.lifecycle.failure is not None:
                raise parts.lifecycle.failure
            remaining = deadline - self._now()
            if remaining <= 0:
                return []
            self._signal.wait(min(remaining, 1000.0) / 1000.0)

    def _hand_out(self, taken: list[tuple[float, list[_Held]]]) -> list[ShareRecord]:
        with gc_paused():  # a tuple per record, no cycle among them
            out = self._records_of(taken)
            untrack(out)  # those of plain keys and values: kept by the application a while, never in a cycle
            return out

    def _records_of(self, taken: list[tuple[float, list[_Held]]]) -> list[ShareRecord]:
        out: list[ShareRecord] = []
        key_fn, value_fn = self._key_fn, self._value_fn
        for deadline, records in taken:
            lock = deadline / 1000.0
            if key_fn is None and value_fn is None:  # the decoder's tuple as it is, the share fields after it
                counts = set(map(_COUNT, records))
                if len(counts) == 1:  # one delivery count (an acquired range): no Python step per record
                    tail = (counts.pop(), lock)
                    out.extend(map(_new, repeat(ShareRecord), map(operator.add, map(_RECORD, records), repeat(tail))))
                else:
                    out.extend([_new(ShareRecord, (*h.record, h.delivery_count, lock)) for h in records])
                continue
            for held in records:
                r = held.record
                origin = "key"
                try:
                    key = r.key if key_fn is None else key_fn(r.topic, r.headers, r.key)
                    origin = "value"
                    value = r.value if value_fn is None else value_fn(r.topic, r.headers, r.value)
                except Exception as exc:  # noqa: BLE001 - the deserializer's failure is the user's, raised by the next call
                    self._not_deserialized(r, exc, origin)
                    continue
                out.append(ShareRecord(*r[:6], key, value, *r[8:], held.delivery_count, lock))  # type: ignore[call-arg]
        if not out and self._pending:
            self._raise_pending()
        return out

    def _not_deserialized(self, r: Any, exc: Exception, origin: str) -> None:
        """Kept for the next call to raise; the record stays acquired until acknowledge_offset() or a later poll."""
        error = deserializer_failed(exc, r.topic, r.partition, r.offset, origin)
        cause = error.__cause__ or error
        cause.add_note(
            f"fsm_consumer: the record is acquired by this member: acknowledge_offset({r.topic!r}, "
            f"{r.partition}, {r.offset}, AcknowledgeType.REJECT) archives it, RELEASE hands it out again; "
            "not acknowledged by the poll() after next, it is released"
        )
        self._failed[(r.topic, r.partition, r.offset)] = cause
        self._pending.append(cause)

    # -- acknowledgements ---------------------------------------------------------------------------------
    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:  # noqa: A002
        """Explicit mode: acknowledge ``record`` (ACCEPT, RELEASE, REJECT, or RENEW to keep its lock: it comes back
        from a later poll() under a fresh lock). Sent with the next poll(), commit_sync() or commit_async(). A
        record whose lock ran out is reported failed to the commit callback and commit_sync(), never as done."""
        self._ensure_open()
        if not self._explicit:
            raise IllegalStateError(
                "acknowledge() needs share_acknowledgement_mode='explicit' (implicit mode accepts what poll() handed "
                "out at the next poll())"
            )
        if not isinstance(record, ShareRecord):
            raise TypeError(f"acknowledge() takes a ShareRecord that poll() returned, got {record.__class__.__name__}")
        if type.__class__ is not AcknowledgeType:
            type = AcknowledgeType(type)  # noqa: A001
        # a record of the last poll: kept on this thread until the next poll() or commit gives it to the buffer
        if not self._last.record(record.topic, record.partition, record.offset, type):
            self._acknowledge(record.topic, record.partition, record.offset, type)

    def acknowledge_offset(
        self,
        topic: str,
        partition: int,
        offset: int,
        type: AcknowledgeType = AcknowledgeType.REJECT,  # noqa: A002
    ) -> None:
        """Acknowledge a record poll() could not deserialize (its error named topic, partition and offset):
        REJECT archives it, RELEASE delivers it again. Any acknowledgement mode."""
        self._ensure_open()
        key = (topic, partition, offset)
        if key not in self._failed:
            raise IllegalStateError(
                f"acknowledge_offset({topic!r}, {partition}, {offset}): no record there failed to deserialize; "
                "acknowledge records poll() returned with acknowledge()"
            )
        if AcknowledgeType(type) is AcknowledgeType.RENEW:
            raise ValueError("a record that cannot be deserialized cannot be renewed: REJECT or RELEASE it")
        self._acknowledge(topic, partition, offset, type)
        del self._failed[key]
        self._failed_raised.discard(key)

    def _acknowledge(self, topic: str, partition: int, offset: int, kind: AcknowledgeType) -> None:
        if type(kind) is not AcknowledgeType:
            kind = AcknowledgeType(kind)
        parts = self._parts
        # the partition as the batches that handed it out know it (its topic id from their ShareFetch), else as
        # the metadata knows it now: one lookup per record of an explicit acknowledgement
        where = self._last.where(topic, partition)
        if where is None:
            tid = parts.topic_id(topic)
            if tid is None:
                raise IllegalStateError(f"{topic}-{partition}@{offset} was not handed out by this consumer")
            where = _new(TopicIdPartition, (tid, partition))
        with parts.lock:
            now = self._clock.now_ms()
            self._give_acks(now)  # those kept on this thread first: the buffer then sees the record's last type
            parts.fetch.buffer.acknowledge(where, offset, kind, now)

    def _give_acks(self, now: float) -> None:
        """Explicit mode's acknowledgements kept on this thread, to the buffer (under the lock)."""
        for where, acks in self._last.take():
            self._parts.fetch.buffer.acknowledge_many(where, acks, now)

    def commit_sync(self, timeout_ms: float | None = None) -> dict[TopicPartition, BaseException | None]:
        """Send the acknowledgements recorded so far (implicit mode: of every record handed out) and wait for the
        broker's answer: per partition, None when they took effect, else the error (AcknowledgementFailedError,
        or kafka-python's error for the broker's code). The commit callback is called too."""
        self._ensure_open()
        self._check_wakeup()
        parts = self._parts
        now = self._now()
        ms = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        self._settle(now, take=False)
        with parts.lock:
            parts.fetch.buffer.take_acks(now)
            waiting = ("ack_queued", "ack_in_flight", "ack_in_flight_late", "renewing")
            watched = [b for b in parts.fetch.buffer.batches() if b.state in waiting]
        parts.transport.wakeup()
        results: dict[TopicPartition, BaseException | None] = {}
        deadline = now + ms
        while True:
            self._signal.clear()
            with parts.lock:
                done = all(b.machine.is_terminal or b.state == "buffered" for b in watched)
            for partition, error in self._run_callbacks():
                if results.get(partition) is None:
                    results[partition] = error
            if done:
                return results
            self._check_wakeup()
            if parts.lifecycle.failure is not None:
                raise parts.lifecycle.failure
            remaining = deadline - self._now()
            if remaining <= 0:
                raise KafkaTimeoutError(f"commit_sync() did not complete within {ms:g} ms")
            self._signal.wait(min(remaining, 100.0) / 1000.0)

    def commit_async(self) -> None:
        """Send the acknowledgements recorded so far (implicit mode: of every record handed out) without waiting;
        their outcome goes to the commit callback, run by a later poll(), commit or close()."""
        self._ensure_open()
        self._settle(self._now())
        self._parts.transport.wakeup()

    def set_acknowledgement_commit_callback(self, callback: AcknowledgementCommitCallback | None) -> None:
        """``callback(offsets_by_partition, error)`` for each outcome of acknowledgements, on this thread (run by
        poll(), commit_sync(), commit_async() or close()); ``error`` is None when they took effect."""
        if callback is not None and not callable(callback):
            raise TypeError(f"the acknowledgement commit callback must be callable, got {callback!r}")
        self._callback = callback

    def _settle(self, now: float, *, take: bool = True) -> None:
        """What the last poll() handed out: implicit, accepted; explicit, every record must be acknowledged.
        Records that failed to deserialize and were raised but not acknowledged are released."""
        parts = self._parts
        ids = parts.topic_ids()
        with parts.lock:
            buffer = parts.fetch.buffer
            self._give_acks(now)
            for key in [k for k in self._failed if k in self._failed_raised]:
                topic, partition, offset = key
                tid = ids.get(topic)
                if tid is not None:
                    buffer.acknowledge(TopicIdPartition(tid, partition), offset, int(AcknowledgeType.RELEASE), now)
                del self._failed[key]
                self._failed_raised.discard(key)
            if self._explicit:
                failed = {(ids.get(t), p, o) for t, p, o in self._failed}
                open_ = [
                    b
                    for b in buffer.batches()
                    if b.state == "handed_out"
                    and not b.all_acknowledged()
                    and any(
                        r.offset not in b.acks and (b.partition.topic_id, b.partition.partition, r.offset) not in failed
                        for r in b.records
                    )
                ]
                if open_:
                    raise IllegalStateError(
                        "share_acknowledgement_mode='explicit': acknowledge every record of the last poll() before "
                        f"polling again or committing ({sum(len(b.records) - len(b.acks) for b in open_)} not yet)"
                    )
            else:
                buffer.acknowledge_all(int(AcknowledgeType.ACCEPT), now)
            if take:
                buffer.take_acks(now)

    def _run_callbacks(self) -> list[tuple[TopicPartition, BaseException | None]]:
        """Outcomes of acknowledgements, to the commit callback (on this thread); returned for commit_sync()."""
        parts = self._parts
        with parts.lock:
            outcomes = parts.fetch.buffer.drain_outcomes()
        names = {tid: name for name, tid in parts.topic_ids().items()}
        out = []
        for outcome in outcomes:
            tp = TopicPartition(
                names.get(outcome.partition.topic_id, outcome.partition.topic_id), outcome.partition.partition
            )
            error = outcome_error(tp, outcome)
            out.append((tp, error))
            if self._callback is not None:
                offsets = {tp: {o for o, kind in outcome.acks if kind != AcknowledgeType.RENEW}}
                try:
                    self._callback(offsets, error)
                except Exception as exc:  # noqa: BLE001 - the callback's failure is the caller's, after the others ran
                    self._pending.append(exc)
        return out

    # -- the rest ----------------------------------------------------------------------------------------
    def wakeup(self) -> None:
        """From any thread: the blocking call in progress (or the next one) raises WakeupException."""
        self._woken.set()
        self._signal.set()

    def close(self, timeout_ms: float | None = None) -> None:
        """Acknowledgements first (implicit mode: what poll() handed out is accepted), then every share session
        closes (records not acknowledged are released at once), then the member leaves the group; within
        ``timeout_ms`` (default close_timeout_ms)."""
        if self._closed:
            return
        parts = self._parts
        budget = self.config.close_timeout_ms if timeout_ms is None else timeout_ms
        now = self._now()
        deadline = now + budget
        try:
            try:
                if not self._explicit:
                    self._settle(now)
                else:
                    with parts.lock:
                        self._give_acks(now)
                        parts.fetch.buffer.take_acks(now)
            except IllegalStateError:
                pass  # close() goes on: what was not acknowledged is released by the session's close
            if parts.thread.alive:
                event = CloseEvent(deadline_ms=deadline, autocommit=True)
                assert event.future is not None
                event.future.wake = self._signal.set
                parts.app_queue.put(event)
                while not event.future.done and self._now() < deadline:
                    self._signal.clear()
                    self._run_callbacks()
                    self._signal.wait(min(50.0, max(0.0, deadline - self._now())) / 1000.0)
                if not parts.thread.join(max(0.0, deadline - self._now()) / 1000.0 + 0.05):
                    _log.warning(
                        "close(): the background thread of share consumer %r did not stop within %g ms",
                        self.config.client_id,
                        budget,
                    )
            self._run_callbacks()
        finally:
            self._closed = True
            if parts.history is not None:
                parts.history.closed()

    def metrics_flat(self) -> dict[str, Any]:
        parts = self._parts
        with parts.lock:
            m = parts.membership
            return {
                "member-id": m.member_id,
                "member-state": m.state,
                "member-epoch": m.epoch,
                "assigned-partitions": len(m.assignment),
                "share-sessions": {node: s.state for node, s in parts.fetch.sessions.items()},
                "acquired-batches": len(parts.fetch.buffer),
                "requests-sent": parts.requests.sent_requests,
            }

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<fsm_consumer.ShareConsumer {self.config.group_id} {'closed' if self._closed else 'open'}>"

    # -- plumbing -----------------------------------------------------------------------------------------
    def _now(self) -> float:
        return self._clock.now_ms()

    def _ensure_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the share consumer is closed")

    def _check_wakeup(self) -> None:
        if self._woken.is_set():
            self._woken.clear()
            raise WakeupException("the call was woken up by wakeup()")

    def _raise_pending(self) -> None:
        """What the user must act on: a fatal membership error (unsupported broker, authorization), errors of the
        share fetches, a corrupt batch, a deserializer's failure, a failing callback."""
        parts = self._parts
        parts.held.raise_first()
        with parts.lock:
            fatal = parts.membership.fatal
            errors = list(parts.fetch.errors)
            parts.fetch.errors.clear()
            decoded = list(parts.decode_errors)
            parts.decode_errors.clear()
        if fatal is not None:
            raise fatal
        self._pending.extend([*errors, *decoded])
        if self._pending:
            error = self._pending.pop(0)
            for key, failure in self._failed.items():
                if failure is error:
                    self._failed_raised.add(key)
            raise error

    def _call(self, event: Any, what: str) -> None:
        self._check_wakeup()
        ms = self.config.default_api_timeout_ms
        event.what, event.timeout_ms = what, ms
        event.deadline_ms = self._now() + ms
        self._parts.app_queue.put(event)
        while not event.future.wait(0.1):
            self._check_wakeup()
            self._raise_pending()
            if self._now() > event.deadline_ms:
                raise event.timeout_error()
        event.future.result()
