"""A ShareConsumer's history (``history_path``): the share lines of docs/histories.md, written through the
consumer's HistoryWriter (one lock, one line per write, both clocks).

A share group has no owners and no positions: what a member holds is a record under its acquisition lock.
So its lines say, per partition, which records each poll() handed out with their delivery counts and the
lock's deadline (``share_handed``, application thread), what became of every acknowledgement (``share_ack``,
as the buffer settles it: answered, refused, or failed here because the lock ran out or the session ended),
and which acquired records stopped being this member's (``share_lost``). The checker's share rules (H, N, A,
S) are judged from these alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import kafka.errors as ke

from .._history_writer import HistoryWriter, clock_base

if TYPE_CHECKING:
    from .._config import ConsumerConfig
    from ..managers._share_batch import ShareBatch
    from ..managers._share_batch import ShareRecord as Held
    from ..managers._share_buffer import AckOutcome
    from ..managers._share_membership import ShareMembershipManager
    from ._config import ShareSettings

#: the acknowledge types, as a history names them
ACK_NAMES = {0: "gap", 1: "accept", 2: "release", 3: "reject", 4: "renew"}


def runs(items: Iterable[tuple[int, Any]]) -> list[list[Any]]:
    """(offset, value) in offset order -> ``[first, last, value]`` runs of consecutive offsets of one value."""
    out: list[list[Any]] = []
    for offset, value in items:
        if out and out[-1][1] == offset - 1 and out[-1][2] == value:
            out[-1][1] = offset
        else:
            out.append([offset, offset, value])
    return out


class ShareHistory:
    """The buffer's observer (``acknowledged``, ``lost``) and the consumer's hand-outs, as history lines."""

    def __init__(
        self,
        writer: HistoryWriter,
        membership: ShareMembershipManager,
        name_of: Callable[[str], str | None],
    ) -> None:
        self.writer = writer
        self._membership = membership
        self._name_of = name_of  # topic id -> name, as the metadata knows it

    def _write(self, event: str, **fields: Any) -> None:
        m = self._membership
        self.writer.write(event, member=m.member_id, generation=m.epoch, **fields)

    def _tp(self, topic_id: str, partition: int) -> list[Any]:
        return [self._name_of(topic_id) or topic_id, partition]

    def started(self, config: ConsumerConfig, settings: ShareSettings) -> None:
        self._write(
            "started",
            kind="share",
            group=config.group_id,
            pid=os.getpid(),
            clock=clock_base(),
            config={
                "share_acknowledgement_mode": settings.acknowledgement_mode,
                "share_acquire_mode": settings.acquire_mode,
                "max_poll_records": config.max_poll_records,
            },
        )

    def handed(self, taken: Sequence[tuple[float, Sequence[Held]]], now: float, poll_started: float) -> None:
        """One line per batch a poll() handed out: its records' ``[first, last, delivery count]`` runs and the
        lock's deadline (``lock_until``, ms of the lines' clock). Records the deserializer then failed on are
        handed out too: the member holds them until it acknowledges them."""
        for deadline, records in taken:
            if not records:
                continue
            where = records[0].partition
            self._write(
                "share_handed",
                t=now,
                tp=self._tp(where.topic_id, where.partition),
                records=runs((r.offset, r.delivery_count) for r in records),
                lock_until=round(deadline, 3),
                t_poll_start=round(poll_started, 3),
            )

    # -- the buffer's observer ---------------------------------------------------------------------------
    def acknowledged(self, outcome: AckOutcome, ack_types: tuple[tuple[int, int], ...], now: float) -> None:
        if outcome.reason is not None:
            error: str | None = outcome.reason
        elif outcome.error_code:
            error = f"{ke.for_code(outcome.error_code).__name__} ({outcome.error_code})"
        else:
            error = None
        self._write(
            "share_ack",
            t=now,
            tp=self._tp(outcome.partition.topic_id, outcome.partition.partition),
            acks=runs((o, ACK_NAMES.get(kind, str(kind))) for o, kind in ack_types),
            error=error,
            # False: failed here (the lock ran out, the session ended) - sent, the broker may have applied it
            answered=outcome.reason is None,
            sent_ago_ms=None if outcome.sent_at is None else round(now - outcome.sent_at, 3),
        )

    def lost(self, batch: ShareBatch, now: float) -> None:
        if not batch.records:
            return
        self._write(
            "share_lost",
            t=now,
            tp=self._tp(batch.partition.topic_id, batch.partition.partition),
            offsets=[[a, b] for a, b, _ in runs((r.offset, 0) for r in batch.records)],
            why=batch.lost_why,
        )

    def closed(self) -> None:
        self._write("closed")
        self.writer.close()
