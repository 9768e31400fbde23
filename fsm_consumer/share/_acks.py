"""The application thread's side of acknowledgements: what explicit mode's acknowledge() records until the next
poll() or commit gives it to the buffer (``LastPoll``), and the error a failed outcome is told as.

acknowledge() runs once per record, so it touches no lock, no clock and no machine: as Java's ShareInFlightBatch,
the records the last poll() handed out are kept on this thread with the type each was given, and are given to
the buffer (its batches' machines) together, under the lock, by the call that sends them.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as ke

from ..errors import AcknowledgementFailedError
from ..managers._share_batch import ShareRecord as Held
from ..managers._share_batch import held_offset
from ..managers._share_buffer import AckOutcome
from ..managers._share_session import TopicIdPartition
from ..structs import TopicPartition


class LastPoll:
    """The partitions the last poll() handed out, as their batches know them (topic id from their ShareFetch); in
    explicit mode also its records by (topic, partition), each with the acknowledge type the application gave it
    (None: none yet; a later acknowledgement of the same record replaces it)."""

    __slots__ = ("_open", "_where")

    def __init__(self) -> None:
        self._open: dict[tuple[str, int], dict[int, Any]] = {}
        self._where: dict[tuple[str, int], TopicIdPartition] = {}

    def handed_out(self, taken: list[tuple[float, list[Held]]], explicit: bool) -> None:
        """A poll() hands these batches' records out; in explicit mode those of the poll before were all
        acknowledged and given (its rule, checked before)."""
        self._open, self._where = {}, {}
        for _, records in taken:
            if records and records[0].record is not None:
                first = records[0]
                key = (first.record.topic, first.partition.partition)
                self._where[key] = first.partition
                if not explicit:
                    continue
                open_ = self._open.get(key)
                if open_ is None:
                    self._open[key] = dict.fromkeys(map(held_offset, records))
                else:
                    open_.update(dict.fromkeys(map(held_offset, records)))

    def where(self, topic: str, partition: int) -> TopicIdPartition | None:
        """The partition as the last poll's batches know it; None when that poll handed none of it out."""
        return self._where.get((topic, partition))

    def record(self, topic: str, partition: int, offset: int, kind: int) -> bool:
        """False when the last poll() did not hand the record out, or its acknowledgement was given already."""
        open_ = self._open.get((topic, partition))
        if open_ is None or offset not in open_:
            return False
        open_[offset] = kind
        return True

    def take(self) -> list[tuple[TopicIdPartition, dict[int, int]]]:
        """The acknowledgements recorded since the last take, by partition; the records they name are let go (a
        later acknowledge() of one goes to the buffer, which refuses it once its batch's acknowledgements are
        taken)."""
        out = []
        for key, open_ in list(self._open.items()):
            acks = {o: k for o, k in open_.items() if k is not None}
            if not acks:
                continue
            out.append((self._where[key], acks))
            if len(acks) == len(open_):
                del self._open[key]
            else:
                self._open[key] = {o: None for o, k in open_.items() if k is None}
        return out


def outcome_error(tp: TopicPartition, outcome: AckOutcome) -> BaseException | None:
    """What the commit callback and commit_sync() are told of an outcome: None when the acknowledgements took
    effect."""
    if outcome.ok:
        return None
    offsets = [o for o, _ in outcome.acks]
    where = (
        f"{tp.topic}-{tp.partition} offsets {offsets[0]}..{offsets[-1]}" if offsets else f"{tp.topic}-{tp.partition}"
    )
    if outcome.reason is not None:
        return AcknowledgementFailedError(
            tp, offsets, f"acknowledgements of {where} failed: {outcome.reason} (the records go back to the group)"
        )
    name = ke.for_code(outcome.error_code).__name__
    return AcknowledgementFailedError(
        tp, offsets, f"acknowledgements of {where} were refused by the broker: {name}", outcome.error_code
    )
