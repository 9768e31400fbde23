"""SelfAssignManager: a consumer subscribed without a group_id assigns itself every partition of its
topics and follows metadata (a partition added, a topic that starts matching the pattern)."""

from __future__ import annotations

import re
from types import SimpleNamespace

from fsm_consumer._config import ConsumerConfig
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.managers import SelfAssignManager
from fsm_consumer.state import SubscriptionState


class Metadata:
    def __init__(self, topics: dict[str, int]) -> None:
        self.version = 1
        self.all_topics_wanted = False
        self.updates = []
        self.topics = {}
        self.set(topics)

    def set(self, topics: dict[str, int]) -> None:
        self.topics = {t: SimpleNamespace(leaders={p: 1 for p in range(n)}, internal=t.startswith("__"))
                       for t, n in topics.items()}
        self.version += 1

    def partitions(self, topic):
        info = self.topics.get(topic)
        return None if info is None else sorted(info.leaders)

    def request_update(self, topics=None, *, all_topics=False):
        self.updates.append((topics, all_topics))


def make(topics=(), pattern=None, **metadata):
    config = ConsumerConfig.from_kwargs(bootstrap_servers="127.0.0.1:1", auto_offset_reset="earliest")
    subs = SubscriptionState("earliest")
    subs.subscribe(topics, pattern)
    meta = Metadata(metadata)
    return SelfAssignManager(config, subs, meta), subs, meta


def test_assigns_every_partition_and_follows_a_partition_added():
    manager, subs, meta = make(["a"], a=2, b=3)
    manager.poll(0.0)
    assert subs.assignment() == {TopicPartition("a", 0), TopicPartition("a", 1)}
    subs.set_reset_position(TopicPartition("a", 0), "earliest", 4)
    meta.set({"a": 3, "b": 3})  # a partition added to "a"
    manager.poll(1.0)
    assert subs.assignment() == {TopicPartition("a", p) for p in range(3)}
    assert subs.positions() == {TopicPartition("a", 0): 4}  # kept; the new one starts at the reset policy
    assert subs.needing_reset() == {TopicPartition("a", 1): "earliest", TopicPartition("a", 2): "earliest"}
    assert subs.awaiting_committed() == set()  # no group: nothing to look up


def test_pattern_follows_matching_topics_and_skips_internal_ones():
    manager, subs, meta = make(pattern=re.compile("e.*"), events=1, __e=1, other=1)
    manager.poll(0.0)
    assert meta.all_topics_wanted and meta.updates == [(None, True)]
    assert subs.assignment() == {TopicPartition("events", 0)}
    meta.set({"events": 1, "errors": 2, "other": 1})
    manager.poll(1.0)
    assert {tp.topic for tp in subs.assignment()} == {"events", "errors"}


def test_nothing_after_unsubscribe_and_nothing_redone_without_changes():
    manager, subs, meta = make(["a"], a=1)
    manager.poll(0.0)
    changes = subs.changes
    manager.poll(1.0)
    assert subs.changes == changes  # metadata and subscription unchanged: no reassignment
    subs.unsubscribe()
    manager.poll(2.0)
    assert subs.assignment() == set()
