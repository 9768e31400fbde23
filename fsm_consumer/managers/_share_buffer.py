"""The acquired records of a share consumer (KIP-932), sans-IO: Java's ShareFetchBuffer, ShareInFlightBatch and
Acknowledgements in one place, each batch a share_batch machine (_share_batch.py).

``add`` keeps what one ShareFetch answer acquired for a partition, in arrival order; ``take(max_records, now)``
hands out only records whose batch allows it (its lock has not run out, its session has not ended), splitting
a batch it hands out in part; ``acknowledge`` records each record's type; ``take_acks`` (the application's
next poll() or commit) queues those of fully acknowledged batches, and ``pending_acks(node)`` gives them in
Kafka's AcknowledgementBatch form, as Java's Acknowledgements.getAcknowledgementBatches builds it. Outcomes
(done, refused by the broker, or failed because the lock ran out or the session ended first) are collected
for the application in ``outcomes``; ``observer`` (a consumer's history) is told each outcome as it happens,
renewals included, and each batch lost.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, Protocol

import attrs
import kafka.errors as ke

from .._gc_pause import gc_paused
from ..fetch._untrack import untrack
from ..machines import shipped_spec
from ._share_batch import AckType, ShareBatch, ShareRecord, held_offset
from ._share_session import TopicIdPartition

log = logging.getLogger("fsm_consumer.share")
_new = tuple.__new__  # a ShareRecord from a whole tuple, without its __new__'s keyword handling
_OFFSET = operator.attrgetter("offset")
_ACK_TYPES = {int(t): t for t in AckType}

MAX_RECORDS_WITH_SAME_ACKNOWLEDGE_TYPE = 10  # Java's Acknowledgements: a longer run becomes a batch of one type


@attrs.frozen
class AckBatch:
    """One AcknowledgementBatch: offsets first..last, with one type for them all or one per offset (0: a gap)."""

    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


class BufferObserver(Protocol):
    """What a history is told: acknowledgements settled (``ack_types``: every record's, RENEW included) and
    batches lost (``offsets``: their records not settled), with the time it happened."""

    def acknowledged(self, outcome: AckOutcome, ack_types: tuple[tuple[int, int], ...], now: float) -> None: ...

    def lost(self, batch: ShareBatch, now: float) -> None: ...


@attrs.frozen
class AckOutcome:
    """What became of acknowledgements of one partition's records: done (``error_code`` 0 and no ``reason``),
    refused by the broker (its code), or failed here (``reason``: the lock ran out, the session ended)."""

    partition: TopicIdPartition
    acks: tuple[tuple[int, int], ...]  # (offset, acknowledge type)
    error_code: int = 0
    reason: str | None = None
    sent_at: float | None = None  # when they went out (None: never sent, failed here)

    @property
    def ok(self) -> bool:
        return self.error_code == 0 and self.reason is None


def ack_batches(acks: Mapping[int, int]) -> list[AckBatch]:
    """Offset -> type as AcknowledgementBatches, as Java's getAcknowledgementBatches: a new batch at every gap in
    the offsets; within a contiguous run, a stretch of more than ten offsets of one type becomes a batch of its
    own; a batch whose offsets all have one type carries that type once."""
    if acks:
        first, last = min(acks), max(acks)
        kinds = set(acks.values())
        if last - first + 1 == len(acks) and len(kinds) == 1:  # the common case, what the steps below give it
            return [AckBatch(first, last, (int(kinds.pop()),))]
    out: list[AckBatch] = []
    run_first: int | None = None
    run: list[int] = []
    for offset in sorted(acks):
        if run_first is not None and offset != run_first + len(run):
            out.extend(_single_typed(_optimise(run_first, run)))
            run_first, run = None, []
        if run_first is None:
            run_first = offset
        run.append(int(acks[offset]))
    if run_first is not None:
        out.extend(_single_typed(_optimise(run_first, run)))
    return out


def _optimise(first: int, types: list[int]) -> list[AckBatch]:
    """Java's maybeOptimiseAcknowledgementTypes, step for step (the for loop's own i++ included)."""
    batches: list[AckBatch] = []
    current, start, same = first, 0, 1
    i = 1
    while i < len(types):
        kind, prev = types[i], types[i - 1]
        if kind == prev and same >= MAX_RECORDS_WITH_SAME_ACKNOWLEDGE_TYPE:
            while i < len(types) and types[i] == types[i - 1]:
                i += 1
                same += 1
            last1 = current + i - same - start - 1
            if last1 >= current:
                batches.append(AckBatch(current, last1, tuple(types[start : i - same])))
            batches.append(AckBatch(current + i - same - start, current + i - start - 1, (kind,)))
            same = 1
            current = current + i - start
            start = i
        elif kind == prev:
            same += 1
        else:
            same = 1
        i += 1
    if start < len(types):
        batches.append(AckBatch(current, current + len(types) - start - 1, tuple(types[start:])))
    return batches


def _single_typed(batches: list[AckBatch]) -> list[AckBatch]:
    return [
        AckBatch(b.first_offset, b.last_offset, b.acknowledge_types[:1]) if len(set(b.acknowledge_types)) == 1 else b
        for b in batches
    ]


class ShareBuffer:
    """Every live acquired batch, in arrival order."""

    def __init__(self, *, decode: Callable[[Any], Iterable[Any]] | None = None) -> None:
        # records_bytes -> records with an .offset (or plain offsets): the wiring layer's decoder
        self._decode = decode or (lambda records: records or ())
        shipped_spec(ShareBatch.SPEC)  # read and built once per process (~3 ms): now, not when records arrive
        self._batches: list[ShareBatch] = []
        self._last_held: ShareBatch | None = None  # the batch the last acknowledgement found
        self.outcomes: list[AckOutcome] = []
        self.observer: BufferObserver | None = None
        self.machine_observer: Any = None  # given to each batch's machine (a history's transition lines)

    def __len__(self) -> int:
        return len(self._batches)

    def batches(self, node: int | None = None) -> list[ShareBatch]:
        return [b for b in self._batches if node is None or b.node == node]

    def drain_outcomes(self) -> list[AckOutcome]:
        out, self.outcomes = self.outcomes, []
        return out

    # -- what an answer brings -----------------------------------------------------------------------------
    def add(
        self,
        node: int,
        generation: int,
        partition: TopicIdPartition,
        acquired: Sequence[tuple[int, int, int]],
        records: Any,
        *,
        sent_at: float,
        now: float,
        lock_ms: float | None = None,
    ) -> ShareBatch | None:
        """Keep what one answer acquired for ``partition``: ``acquired`` as (first, last, delivery count) ranges,
        ``records`` whatever the decoder reads (records outside the ranges were not acquired: skipped, as Java's
        ShareCompletedFetch). The lock counts from ``sent_at``, the ShareFetch's sending."""
        if not acquired:
            return None
        items = self._decode(records)
        if not isinstance(items, list):
            items = list(items)
        quick = self._quick(partition, acquired, items)
        if quick is not None:
            held, gaps = quick
            return self._keep(node, generation, partition, held, gaps, sent_at, now, lock_ms, ordered=True)
        counts: dict[int, int] = {}
        for first, last, delivery_count in acquired:
            counts.update(dict.fromkeys(range(first, last + 1), delivery_count))
        if not counts:
            return None
        delivered: dict[int, ShareRecord] = {}
        last, ordered = -1, True  # a log's records come in offset order
        with gc_paused():  # a tuple or two per record, no cycle among them
            for item in items:
                if isinstance(item, int):
                    offset, item = item, None
                else:
                    offset = item.offset
                if offset in counts and offset not in delivered:
                    delivered[offset] = _new(ShareRecord, (partition, offset, counts[offset], item))
                    ordered, last = ordered and offset > last, offset
        gaps = [o for o in counts if o not in delivered]
        held = list(delivered.values())
        untrack([partition])
        untrack(held)
        return self._keep(node, generation, partition, held, gaps, sent_at, now, lock_ms, ordered)

    @staticmethod
    def _quick(
        partition: TopicIdPartition, acquired: Sequence[tuple[int, int, int]], items: list[Any]
    ) -> tuple[list[ShareRecord], list[int]] | None:
        """``add``'s common case without a step per record in Python: one acquired range, whose records the
        decoder gave in offset order, none outside it. None: anything else (``add`` then walks them)."""
        if len(acquired) != 1 or not items or isinstance(items[0], int):
            return None
        first, last, count = acquired[0]
        offsets = list(map(_OFFSET, items))
        if offsets[0] < first or offsets[-1] > last or not all(map(operator.lt, offsets, offsets[1:])):
            return None
        with gc_paused():  # a tuple per record, no cycle among them
            held = list(map(_new, repeat(ShareRecord), zip(repeat(partition), offsets, repeat(count), items)))
            untrack([partition])  # first: a record is untracked only if what it holds is
            untrack(held)
        gaps = [] if len(offsets) == last - first + 1 else sorted(set(range(first, last + 1)).difference(offsets))
        return held, gaps

    def _keep(
        self,
        node: int,
        generation: int,
        partition: TopicIdPartition,
        held: list[ShareRecord],
        gaps: list[int],
        sent_at: float,
        now: float,
        lock_ms: float | None,
        ordered: bool,
    ) -> ShareBatch:
        batch = ShareBatch(
            node,
            generation,
            partition,
            held,
            gaps,
            lock_from=sent_at,
            lock_ms=lock_ms,
            on_lost=self._batch_lost,
            ordered=ordered,
        )
        batch.machine.observer = self.machine_observer
        self._batches.append(batch)
        batch.machine.tick(now)  # an answer read after the lock ran out: lost before anything is handed out
        if not batch.records and batch.machine.attribute("hand_out") == "allowed":
            batch.delivered = True
            batch.machine.fire("delivered", now)  # gaps only: nothing to hand out, acknowledged as gaps
            batch.machine.fire("acknowledged", now)
        return batch

    # -- the application's side -------------------------------------------------------------------------
    def take(self, max_records: int, now: float) -> list[ShareRecord]:
        """Up to ``max_records`` records, in arrival order, of batches whose lock still runs (ticked first): a
        record is never handed out after its lock ran out."""
        return [r for batch in self.take_batches(max_records, now) for r in batch.records]

    def take_batches(self, max_records: int, now: float) -> list[ShareBatch]:
        """``take``, as the batches handed out (each with its lock's ``deadline`` and its records)."""
        self.tick(now)
        out: list[ShareBatch] = []
        count = 0
        i = 0
        while i < len(self._batches) and count < max_records:
            batch = self._batches[i]
            i += 1
            if batch.machine.attribute("hand_out") != "allowed" or not batch.records:
                continue
            room = max_records - count
            if len(batch.records) > room:
                self._batches.insert(i, batch.split(room))
            out.append(batch)
            count += len(batch.records)
            batch.delivered = True
            batch.machine.fire("delivered", now)
        return out

    def ready_records(self) -> int:
        """How many records wait to be handed out (as of the last tick)."""
        return sum(len(b.records) for b in self._batches if b.machine.attribute("hand_out") == "allowed")

    def acknowledge(self, partition: TopicIdPartition, offset: int, ack_type: int, now: float) -> bool:
        """The application acknowledged a record it was handed. False when its batch is lost (reported failed at
        once, never sent); IllegalStateError when it was not handed out or is acknowledged already."""
        batch = self._holding(partition, offset)
        if batch is None or not batch.delivered:
            raise ke.IllegalStateError(
                f"record {partition.topic_id}-{partition.partition}@{offset} cannot be acknowledged: it is not "
                "handed out, or its acknowledgement is taken already"
            )
        return self._acknowledge_batch(batch, {offset: ack_type}, now)

    def acknowledge_many(self, partition: TopicIdPartition, acks: Mapping[int, int], now: float) -> None:
        """``acknowledge`` of many records of one partition at once, as explicit mode gathers them on the application
        thread (Java's ShareInFlightBatch) until its next poll() or commit: each batch's machine is told once.
        Records of lost batches, or no longer held at all, are reported failed; IllegalStateError as acknowledge."""
        left = dict(acks)
        for batch in self._batches:
            if not left:
                return
            if batch.partition != partition or not batch.delivered or not batch.records:
                continue
            held = batch.held_offsets()
            if left.keys() <= held:  # the common case: one batch of the partition handed out by the last poll
                mine, left = left, {}
            else:
                mine = {o: k for o, k in left.items() if o in held}
                left = {o: k for o, k in left.items() if o not in held}
            if mine:
                self._acknowledge_batch(batch, mine, now)
        if left:
            failed = tuple((o, int(k)) for o, k in sorted(left.items()))
            self._report(AckOutcome(partition, failed, reason="the member no longer holds them"), now)

    def _acknowledge_batch(self, batch: ShareBatch, acks: dict[int, int], now: float) -> bool:
        """``acks`` of records ``batch`` holds; False when the batch is lost (reported failed at once, never sent)."""
        what = batch.machine.attribute("acknowledge")
        if what == "refused":
            offsets = sorted(acks)
            raise ke.IllegalStateError(
                f"records {batch.partition.topic_id}-{batch.partition.partition}@{offsets[0]}..{offsets[-1]} cannot be "
                "acknowledged: they are not handed out, or their acknowledgements are taken already"
            )
        kinds = set(acks.values())
        if len(kinds) == 1:  # one type for them all: converted once, not per record
            kind = kinds.pop()
            batch.acks.update(dict.fromkeys(acks, _ACK_TYPES.get(kind) or AckType(kind)))
        else:
            batch.acks.update({o: _ACK_TYPES.get(k) or AckType(k) for o, k in acks.items()})
        if what == "failed":
            pairs = tuple((o, int(k)) for o, k in sorted(acks.items()))
            self._report(AckOutcome(batch.partition, pairs, reason=batch.lost_why), now)
            return False
        batch.machine.fire("acknowledged", now)
        return True

    def acknowledge_all(self, ack_type: int, now: float) -> None:
        """Every handed-out record without an acknowledgement gets ``ack_type`` (Java's acknowledgeAll, and the
        implicit mode at the next poll); records of lost batches are reported failed."""
        kind = AckType(ack_type)
        for batch in list(self._batches):
            if not batch.delivered or batch.all_acknowledged():
                continue
            what = batch.machine.attribute("acknowledge")
            if what == "refused":
                continue
            acks = batch.acks
            if len(acks) == len(batch.gaps):  # none acknowledged yet (implicit mode's case): no test per record
                missing = list(map(held_offset, batch.records))
            else:
                missing = [r.offset for r in batch.records if r.offset not in acks]
            acks.update(dict.fromkeys(missing, kind))
            if what == "failed":
                self._report(
                    AckOutcome(batch.partition, tuple((o, int(kind)) for o in missing), reason=batch.lost_why), now
                )
            else:
                batch.machine.fire("acknowledged", now)

    def take_acks(self, now: float) -> int:
        """The application's next poll() or commit: the acknowledgements of every fully acknowledged batch are
        queued for their session's leader; lost batches are let go. Returns how many batches were queued."""
        self.tick(now)
        queued = 0
        for batch in self._batches:
            if batch.state == "marked":
                batch.machine.fire("acks_taken", now)
                queued += 1
        self._batches = [b for b in self._batches if b.state != "lost"]
        self._last_held = None
        return queued

    # -- the fetch manager's side ------------------------------------------------------------------------
    def _queued(self, node: int) -> list[ShareBatch]:
        return [b for b in self._batches if b.node == node and b.machine.attribute("acks") == "to_send"]

    def pending_acks(self, node: int) -> dict[TopicIdPartition, tuple[AckBatch, ...]]:
        """The queued acknowledgements for ``node``'s session, per partition, as AcknowledgementBatches."""
        per: dict[TopicIdPartition, dict[int, int]] = {}
        for batch in self._queued(node):
            per.setdefault(batch.partition, {}).update(batch.acks)  # AckType values: ints
        return {tp: tuple(ack_batches(acks)) for tp, acks in per.items()}

    def renew_pending(self, node: int) -> bool:
        return any(b.renews() for b in self._queued(node))

    def acks_sent(self, node: int, now: float) -> list[ShareBatch]:
        """The queued acknowledgements for ``node`` went out (the request of ``pending_acks``); their batches."""
        sent = self._queued(node)
        for batch in sent:
            batch.ack_sent_at = now
            batch.machine.fire("ack_sent", now)
        return sent

    def acks_answered(
        self,
        batches: Iterable[ShareBatch],
        errors: Mapping[TopicIdPartition, int],
        now: float,
        *,
        retry: Callable[[int], bool] = lambda code: False,
        lock_ms: float | None = None,
    ) -> None:
        """The answer to acknowledgements in flight: the acknowledge error code of each partition (absent: not
        processed, sent again; ``retry(code)``: the same). A batch lost meanwhile stays failed."""
        for batch in batches:
            code = errors.get(batch.partition)
            if batch.state == "renewing":
                if code == 0:
                    self._settle(batch, 0, now)
                    if lock_ms:
                        batch.lock_ms = lock_ms
                    batch.machine.fire("renewed", now)
                else:
                    batch.lost_why = "the renewal was refused" + (f" (error {code})" if code else "")
                    batch.machine.fire("renew_failed", now)
            elif batch.state in ("ack_in_flight", "ack_in_flight_late"):  # late: lost if it is to go again
                if code is None or retry(code):
                    batch.machine.fire("ack_retry", now)
                else:
                    self._settle(batch, code, now)
                    batch.machine.fire("ack_answered", now)
            elif batch.state == "lost":  # lost meanwhile: reported failed when it was lost, whatever the answer says
                batch.machine.fire("ack_answered", now)

    def acks_not_processed(self, batches: Iterable[ShareBatch], why: str, now: float) -> None:
        """A top-level error that keeps the session: nothing of the request was processed. Acknowledgements go
        again with the next request; a renewal is given up (the old lock goes on running)."""
        for batch in batches:
            if batch.state in ("ack_in_flight", "ack_in_flight_late"):
                batch.machine.fire("ack_retry", now)
            elif batch.state == "renewing":
                batch.lost_why = f"the renewal was not processed: {why}"
                batch.machine.fire("renew_failed", now)

    def lose(self, node: int, generation: int, why: str, now: float) -> list[ShareBatch]:
        """The session ``generation`` with ``node`` ended: every batch it acquired is lost."""
        lost = []
        for batch in self._batches:
            if batch.node == node and batch.generation == generation and not batch.machine.is_terminal:
                batch.lost_why = f"its share session ended: {why}"
                batch.machine.fire("session_ended", now)
                lost.append(batch)
        return lost

    def tick(self, now: float) -> None:
        for batch in self._batches:
            batch.machine.tick(now)
        kept = [b for b in self._batches if b.state != "settled"]
        if len(kept) != len(self._batches):
            for batch in self._batches:
                if batch.state == "settled":
                    batch.machine.release()  # done with: freed at once, not left to the cyclic collector
            self._batches, self._last_held = kept, None

    # -- helpers ------------------------------------------------------------------------------------------
    def _holding(self, partition: TopicIdPartition, offset: int) -> ShareBatch | None:
        last = self._last_held  # records are mostly acknowledged in the order they were handed out
        if last is not None and last.partition == partition and last.holds(offset):
            return last
        for batch in self._batches:
            if batch.partition == partition and batch.holds(offset):
                self._last_held = batch
                return batch
        return None

    def _settle(self, batch: ShareBatch, code: int, now: float) -> None:
        """The broker answered ``batch``'s acknowledgements with ``code``."""
        outcome = AckOutcome(batch.partition, batch.ack_pairs(), error_code=code, sent_at=batch.ack_sent_at)
        self._report(outcome, now, renews=batch.renews())

    def _report(self, outcome: AckOutcome, now: float, *, renews: bool = True) -> None:
        every = outcome.acks
        # a renewal done is no outcome (its records come back from a poll); one that failed is the user's
        told = tuple(a for a in every if a[1] != AckType.RENEW) if outcome.ok and renews else every
        if told:
            self.outcomes.append(outcome if told == every else attrs.evolve(outcome, acks=told))
        if every and self.observer is not None:
            self.observer.acknowledged(outcome, every, now)

    def _batch_lost(self, batch: ShareBatch) -> None:
        """A batch was lost: the acknowledgements it had recorded are reported failed (never done)."""
        acks = batch.ack_pairs()
        log.info("share batch %r lost: %s", batch, batch.lost_why)
        now = batch.machine.now
        if self.observer is not None:
            self.observer.lost(batch, now)
        if acks:
            self._report(AckOutcome(batch.partition, acks, reason=batch.lost_why, sent_at=batch.ack_sent_at), now)
