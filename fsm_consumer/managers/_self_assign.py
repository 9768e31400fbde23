"""Subscribing without a group_id: the consumer assigns itself every partition of its topics.

kafka-python's first example, ``KafkaConsumer("topic", bootstrap_servers=...)`` with no group, reads
every partition of the topic and follows metadata: partitions added later (or topics that start
matching a pattern) are picked up at the next metadata refresh (``metadata_max_age_ms``), starting
at ``auto_offset_reset``; with no group there are no committed offsets and no rebalance callbacks.

A partition leaves only when its topic is gone (the metadata layer keeps what it knew through an
answer that carried a transient error); if it comes back (a topic briefly reported unknown), it
resumes at the position it had, never at ``auto_offset_reset`` past the records in between. A topic
deleted and recreated shorter is then answered OFFSET_OUT_OF_RANGE and reset by policy.
"""

from __future__ import annotations

from ..structs import TopicPartition
from ._base import FOREVER


class SelfAssignManager:
    def __init__(self, config, subscription, metadata) -> None:
        self._config = config
        self._subs = subscription
        self._metadata = metadata
        self._seen: tuple[int, int] = (-1, -1)
        self._retired: dict[TopicPartition, int] = {}  # positions of partitions whose topic went away

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
            leaving = subs.assignment() - wanted
            self._retired.update({tp: pos for tp, pos in subs.positions().items() if tp in leaving})
            subs.set_group_assignment(wanted, awaiting_committed=False, by="subscribe")
            for tp in wanted & self._retired.keys():
                subs.seek(tp, self._retired.pop(tp))
        self._seen = (metadata.version, subs.changes)
        return FOREVER, []

    def _topics(self) -> list[str]:
        subs = self._subs
        if subs.pattern is None:
            return sorted(subs.topics)
        internal = self._config.exclude_internal_topics
        return sorted(
            t
            for t, info in self._metadata.topics.items()
            if subs.pattern.fullmatch(t) and not (internal and info.internal)
        )
