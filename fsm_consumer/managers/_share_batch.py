"""One acquired batch of a share group: the model of specs/share_batch.yaml, sans-IO.

The records of one partition that one ShareFetch answer acquired for this member, each with its delivery
count, the acquired offsets without a record (gaps), the acknowledgement type the application gave each
record, and the acquisition lock: a deadline of the spec (the ``lock`` timer), counted from when the
ShareFetch was sent, so the machine is built at that time. What may be done with the batch (hand its records
out, record an acknowledgement, send its acknowledgements) is read from the spec's attributes; the buffer
(_share_buffer.py) fires its triggers. Java's ShareInFlightBatch and ShareCompletedFetch hold the same, per
poll() rather than per answer.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from ..machines import SpecMachine, shipped_spec
from ._share_session import TopicIdPartition


class AckType(enum.IntEnum):
    """The acknowledge types of AcknowledgementBatch (RENEW: ShareFetch and ShareAcknowledge v2, Kafka 4.2)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class ShareRecord(NamedTuple):
    """A record as the buffer hands it out: where it is, how often it was delivered, what the decoder gave (a
    tuple: one is made per record acquired, and a tuple is made fastest)."""

    partition: TopicIdPartition
    offset: int
    delivery_count: int
    record: Any = None  # the decoded record (None when the answer gave offsets alone)


held_offset = operator.itemgetter(1)  # a ShareRecord's offset without the attribute lookup: run per record


class ShareBatch:
    """One acquired batch; its machine says what may be done with it."""

    SPEC = "share_batch"

    def __init__(
        self,
        node: int,
        generation: int,
        partition: TopicIdPartition,
        records: Sequence[ShareRecord],
        gaps: Iterable[int] = (),
        *,
        lock_from: float,
        lock_ms: float | None = None,
        on_lost: Callable[[ShareBatch], None] | None = None,
        ordered: bool = False,
    ) -> None:
        self.node = node
        self.generation = generation  # the share session (with ``node``) that acquired it
        self.partition = partition
        # the buffer's records come in offset order (a log's order, or a batch's split)
        self.records = list(records) if ordered else sorted(records, key=held_offset)
        self.gaps = sorted(set(gaps))
        self._held: set[int] | None = None  # the records' offsets, made at the first acknowledge() that asks
        self.acks: dict[int, AckType] = dict.fromkeys(self.gaps, AckType.GAP)
        self.lock_from = lock_from  # when the lock counts from: the sending of the ShareFetch, or of a renewal
        self.lock_ms = lock_ms  # the group's lock duration as the answer gave it (None: the spec's default)
        self.lost_why: str | None = None
        self.ack_sent_at: float | None = None
        self.delivered = False  # its records were handed to the application (since it was acquired or renewed)
        self._on_lost = on_lost
        first = self.first_offset
        self.machine = SpecMachine(
            shipped_spec(self.SPEC), self, now=lock_from, instance=f"{partition.topic_id}-{partition.partition}@{first}"
        )

    def __repr__(self) -> str:
        where = f"{self.partition.topic_id}-{self.partition.partition}"
        return f"<ShareBatch {where} {self.first_offset}..{self.last_offset} {self.state}>"

    @property
    def state(self) -> str:
        return self.machine.state

    @property
    def offsets(self) -> list[int]:
        return [r.offset for r in self.records]

    @property
    def first_offset(self) -> int:
        return min([*self.offsets[:1], *self.gaps[:1]], default=-1)

    @property
    def last_offset(self) -> int:
        return max([*self.offsets[-1:], *self.gaps[-1:]], default=-1)

    @property
    def deadline(self) -> float | None:
        """When the lock runs out (None once settled or lost)."""
        return self.machine.timer_deadline("lock")

    def holds(self, offset: int) -> bool:
        if not self.records or not self.records[0].offset <= offset <= self.records[-1].offset:
            return False
        return offset in self.held_offsets()

    def held_offsets(self) -> set[int]:
        """Its records' offsets (made once, when first asked)."""
        if self._held is None:
            self._held = {r.offset for r in self.records}
        return self._held

    def split(self, count: int) -> ShareBatch:
        """Keep the first ``count`` records (and the gaps up to the last of them); return the rest as a batch of
        its own under the same lock, session and lost-callback. Only before the batch is handed out."""
        if self.machine.attribute("hand_out") != "allowed" or not 0 < count < len(self.records):
            raise ValueError(f"cannot split {self!r} after {count} records")
        cut = self.records[count - 1].offset
        rest_records, self.records = self.records[count:], self.records[:count]
        self._held = None
        rest_gaps, self.gaps = [g for g in self.gaps if g > cut], [g for g in self.gaps if g <= cut]
        for g in rest_gaps:
            self.acks.pop(g, None)
        rest = ShareBatch(
            self.node,
            self.generation,
            self.partition,
            rest_records,
            rest_gaps,
            lock_from=self.lock_from,
            lock_ms=self.lock_ms,
            on_lost=self._on_lost,
            ordered=True,
        )
        rest.machine.observer = self.machine.observer
        rest.machine.tick(self.machine.now)
        return rest

    def record_acks(self) -> dict[int, AckType]:
        """The acknowledgement types of its records (gaps left out): what the application is told about."""
        if not self.gaps:
            return self.acks  # holds only its records' offsets then
        held = {r.offset for r in self.records}
        return {o: t for o, t in self.acks.items() if o in held}

    def ack_pairs(self) -> tuple[tuple[int, int], ...]:
        """Its records' (offset, acknowledge type) pairs, in offset order."""
        acks = self.record_acks()
        offsets = sorted(acks)
        return tuple(zip(offsets, map(int, map(acks.__getitem__, offsets)), strict=True))

    # -- hooks named in the spec -------------------------------------------------------------------------
    def lock_duration_ms(self, configured: float) -> float:
        return float(self.lock_ms) if self.lock_ms else configured

    def all_acknowledged(self) -> bool:
        # acks holds the gaps and only offsets of its records (a record acknowledged again replaces its type)
        return len(self.acks) >= len(self.records) + len(self.gaps)

    def renews(self) -> bool:
        return AckType.RENEW in self.acks.values()

    def renew_lock(self) -> None:
        """The renewal was answered OK: the renewed records stay, under a lock counted from the renewal's sending;
        the others are settled (the buffer reported them before firing)."""
        self.records = [r for r in self.records if self.acks.get(r.offset) is AckType.RENEW]
        self._held = None
        self.gaps = []
        self.acks = {}
        self.delivered = False
        if self.ack_sent_at is not None:
            self.lock_from = self.ack_sent_at
            self.machine.restart_timer("lock", self.ack_sent_at)

    def report_lost(self) -> None:
        if self.lost_why is None:
            self.lost_why = "the acquisition lock ran out"
        if self._on_lost is not None:
            self._on_lost(self)
