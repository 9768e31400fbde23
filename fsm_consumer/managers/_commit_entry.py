"""A commit waiting to go out (the CommitManager's queue): its offsets, how it is retried, its place among the
commits accepted, and the membership it was accepted under."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kafka.protocol.consumer import OffsetCommitRequest

from ..policy import Action, classify

#: how a commit is retried (see _commit's docstring)
SYNC, ASYNC, AUTO, FRESH = "sync", "async", "auto", "fresh"
UNKNOWN_TOPIC_OR_PARTITION = 3
GENERATION_MOVED = frozenset({22, 25, 110})  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH
REBALANCE_IN_PROGRESS = 27


class PendingCommit:
    __slots__ = (
        "kind",
        "seq",
        "refresh",
        "offsets",
        "deadline",
        "timeout_ms",
        "started",
        "on_done",
        "retry_at",
        "sent_at",
        "in_flight",
        "event",
        "last_error",
        "stamp",
    )

    def __init__(
        self,
        offsets,
        on_done,
        *,
        stamp,
        kind: str,
        seq: int,
        deadline=None,
        timeout_ms=None,
        started=None,
        event=None,
        refresh=None,
    ) -> None:
        self.kind = kind  # SYNC, ASYNC, AUTO or FRESH: how it is retried
        self.seq = seq  # its place among the commits accepted: per partition, never sent after a newer one
        self.refresh = refresh  # FRESH: () -> the offsets to send now (the positions of each attempt)
        self.stamp = stamp  # (generation, member id) when accepted: sent only under it
        self.offsets = offsets  # tp -> OffsetAndMetadata
        self.deadline = deadline  # None: now + timeout_ms at the first poll
        self.timeout_ms = timeout_ms
        self.started = started
        self.on_done = on_done  # (error or None) -> None, on the background thread
        self.retry_at = 0.0
        self.sent_at = 0.0
        self.in_flight = False
        self.event = event  # the CommitEvent, if the user asked: its cause says why it waits
        self.last_error: BaseException | None = None

    def start(self, now: float) -> None:
        if self.started is None:
            self.started = now
        if self.deadline is None:
            self.deadline = now + self.timeout_ms


def describe(offsets) -> str:
    tps = sorted(offsets)
    names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps[:5])
    return names + (f" and {len(tps) - 5} more" if len(tps) > 5 else "")


def error_name(error: BaseException) -> str:
    return type(error).__name__


def worst(failed: dict[int, list]) -> int:
    """The code that decides a commit: a moved generation, then what the user must fix, then the rest."""

    def rank(code: int) -> int:
        if code in GENERATION_MOVED or code == REBALANCE_IN_PROGRESS:
            return 0
        return 1 if classify(code) in (Action.FATAL, Action.RESET, Action.FENCED) else 2

    return min(failed, key=rank)


def commit_request(config: Any, membership: Any, offsets, stamp: tuple[int, str]) -> OffsetCommitRequest:
    """The OffsetCommit of ``offsets`` under ``stamp`` (generation or joins, member id); the epoch is read now
    (the consumer protocol's moves on while the membership stays; classic: the stamp's)."""
    member_id = stamp[1]
    generation = membership.commit_epoch() if membership is not None and member_id else stamp[0]
    instance = config.group_instance_id if membership is not None else None
    topics: dict[str, list] = defaultdict(list)
    for tp, om in offsets.items():
        topics[tp.topic].append(
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=tp.partition,
                committed_offset=om.offset,
                committed_leader_epoch=getattr(om, "leader_epoch", -1),
                committed_metadata=om.metadata or "",
            )
        )
    return OffsetCommitRequest(
        group_id=config.group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance,
        retention_time_ms=-1,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )
