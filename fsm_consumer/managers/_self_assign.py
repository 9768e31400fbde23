"""Subscribing without a group_id: the consumer assigns itself every partition of its topics.

kafka-python's first example, ``KafkaConsumer("topic", bootstrap_servers=...)`` with no group, reads
every partition of the topic and follows metadata: partitions added later (or topics that start
matching a pattern) are picked up at the next metadata refresh (``metadata_max_age_ms``), starting
at ``auto_offset_reset``; with no group there are no committed offsets and no rebalance callbacks.
"""

from __future__ import annotations

from ..fetch._records import TopicPartition
from ._base import FOREVER


class SelfAssignManager:
    def __init__(self, config, subscription, metadata) -> None:
        self._config = config
        self._subs = subscription
        self._metadata = metadata
        self._seen: tuple[int, int] = (-1, -1)

    def poll(self, now: float):
        subs, metadata = self._subs, self._metadata
        if subs.kind not in ("topics", "pattern"):
            return FOREVER, []
        seen = (metadata.version, subs.changes)
        if seen == self._seen:
            return FOREVER, []
        if subs.pattern is not None and not metadata.all_topics_wanted:
            metadata.all_topics_wanted = True
            metadata.request_update(all_topics=True)
        wanted = {TopicPartition(t, p) for t in self._topics() for p in (metadata.partitions(t) or ())}
        if wanted != subs.assignment():
            subs.set_group_assignment(wanted, awaiting_committed=False)
        self._seen = (metadata.version, subs.changes)
        return FOREVER, []

    def _topics(self) -> list[str]:
        subs = self._subs
        if subs.pattern is None:
            return sorted(subs.topics)
        internal = self._config.exclude_internal_topics
        return sorted(t for t, info in self._metadata.topics.items()
                      if subs.pattern.fullmatch(t) and not (internal and info.internal))
