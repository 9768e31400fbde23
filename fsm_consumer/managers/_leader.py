"""The group's topics as this member sees them in the metadata, and the leader's part of a round: the
members' subscriptions decoded, the assignment computed once the metadata of every topic they subscribe
to has come, and what it was computed from, so that a later change of those topics is noticed.

Sans-IO: it reads the ``MetadataManager``'s view and asks it for topics; time comes in as ``now``.
"""

from __future__ import annotations

import logging
from typing import Any

from ..assignors import Assignment, ConsumerProtocolError, Subscription, decode_subscription

log = logging.getLogger("fsm_consumer.membership")


def subscribed_topics(subs: Any, metadata: Any, exclude_internal: bool) -> tuple[str, ...]:
    """The topics a subscription names now: its list, or what its pattern matches in the metadata."""
    if subs.pattern is not None:
        return tuple(
            sorted(
                t
                for t, info in metadata.topics.items()
                if subs.pattern.fullmatch(t) and not (exclude_internal and info.internal)
            )
        )
    return tuple(sorted(subs.topics))


def partition_counts(metadata: Any, topics: Any) -> dict[str, int]:
    """How many partitions each of ``topics`` known to the metadata has."""
    return {t: len(metadata.topics[t].leaders) for t in topics if t in metadata.topics}


class LeaderRound:
    """The members of the generation just joined and, when this member leads, the assignment's inputs."""

    def __init__(self, group_id: str | None, metadata: Any, request_timeout_ms: float) -> None:
        self._group_id = group_id
        self._metadata = metadata
        self._request_timeout_ms = request_timeout_ms
        self.members: list = []
        self._asked: float | None = None  # when the leader asked for topics it lacked
        self._counts: dict[str, int] | None = None  # the partitions it assigned by

    def joined(self, members: list) -> None:
        """A JoinGroup answer: its members (empty for a follower); nothing assigned by this member yet."""
        self.members = list(members)
        self._counts = None

    def assign(self, assignor: Any, now: float) -> dict[str, Assignment] | None:
        """The assignment of this round, or None while the metadata of a subscribed topic is awaited."""
        subscriptions = {}
        for m in self.members:
            data = m.metadata if isinstance(m.metadata, bytes) else bytes(m.metadata)
            try:  # static members (group_instance_id) are ordered first by the assignors
                subscriptions[m.member_id] = decode_subscription(data, group_instance_id=m.group_instance_id)
            except ConsumerProtocolError as exc:
                log.error(
                    "group %s: member %s sent a subscription that cannot be read (%s); it gets no partitions",
                    self._group_id,
                    m.member_id,
                    exc,
                )
                subscriptions[m.member_id] = Subscription(topics=())
        topics = {t for s in subscriptions.values() for t in s.topics}
        missing = {t for t in topics if t not in self._metadata.topics}
        if missing:
            # wait for an answer that came after the ask (a prompt JoinGroup can beat the first Metadata
            # answer): a topic still missing then does not exist; the wait is bounded all the same
            if self._asked is None:
                self._asked = now
                self._metadata.request_update(missing)
                return None
            if self._metadata.refreshed_at <= self._asked and now - self._asked < self._request_timeout_ms:
                return None
        self._asked = None
        counts = partition_counts(self._metadata, topics)
        # what this assignment was made from: metadata that differs later means a new one (Java's
        # assignment snapshot), also when it changed while the round was still under way
        self._counts = {t: counts.get(t, 0) for t in topics}
        return assignor.assign(counts, subscriptions)

    def outdated(self) -> bool:
        """The group's topics now have other partition counts than this member assigned by."""
        if self._counts is None:
            return False
        now = partition_counts(self._metadata, self._counts)
        return any(now.get(t, 0) != n for t, n in self._counts.items())
