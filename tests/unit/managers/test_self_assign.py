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
        self.topics = {
            t: SimpleNamespace(leaders={p: 1 for p in range(n)}, internal=t.startswith("__")) for t, n in topics.items()
        }
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


# -- issue 23: a Metadata answer with an error is not "the topic is gone" -------------------------------------


def _metadata_answer(topic_error: int, partitions: int, topic_id=None):
    from kafka.protocol.metadata import MetadataResponse

    P = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
    topic = MetadataResponse.MetadataResponseTopic(
        error_code=topic_error,
        name="a",
        topic_id=topic_id,
        is_internal=False,
        partitions=[
            P(
                error_code=0,
                partition_index=p,
                leader_id=1,
                leader_epoch=0,
                replica_nodes=[1],
                isr_nodes=[1],
                offline_replicas=[],
            )
            for p in range(partitions)
        ],
    )
    return SimpleNamespace(
        error=None,
        response=SimpleNamespace(
            brokers=[SimpleNamespace(node_id=1, host="127.0.0.1", port=1)], cluster_id="c", topics=[topic]
        ),
    )


def test_a_metadata_answer_with_a_transient_topic_error_keeps_the_partitions_and_their_positions():
    """Without a group: LEADER_NOT_AVAILABLE for the whole topic must not retire its partitions (they
    would come back at auto_offset_reset="latest", silently skipping every record in between)."""
    from fsm_consumer.managers import MetadataManager

    config = ConsumerConfig.from_kwargs(bootstrap_servers="127.0.0.1:1", auto_offset_reset="latest")
    subs = SubscriptionState("latest")
    subs.subscribe(["a"], None)
    meta = MetadataManager(config, lambda: {"a"})
    manager = SelfAssignManager(config, subs, meta)
    meta.poll(0.0)  # the request goes out (the manager remembers what it asked)
    meta.on_response(_metadata_answer(0, 2), 0.0)
    manager.poll(0.0)
    t0 = TopicPartition("a", 0)
    subs.seek(t0, 40)
    meta._need = True
    meta.poll(1.0)
    meta.on_response(_metadata_answer(5, 0), 1.0)  # LEADER_NOT_AVAILABLE, no partitions listed
    manager.poll(1.0)
    assert subs.assignment() == {t0, TopicPartition("a", 1)} and subs.positions()[t0] == 40
    assert meta.partitions("a") == [0, 1]  # what partitions_for_topic and the Spark source read


def test_a_partition_whose_topic_briefly_went_away_resumes_at_its_position():
    manager, subs, meta = make(["a"], a=2)
    manager.poll(0.0)
    t0 = TopicPartition("a", 0)
    subs.seek(t0, 40)
    meta.set({})  # an answer said UNKNOWN_TOPIC_OR_PARTITION
    manager.poll(1.0)
    assert subs.assignment() == set()
    meta.set({"a": 2})
    manager.poll(2.0)
    assert subs.positions()[t0] == 40  # not reset to the policy past the records in between
    assert subs.needing_reset() == {TopicPartition("a", 1): "earliest"}


def test_a_topic_deleted_and_created_again_resets_its_positions_by_policy(caplog):
    """The review's case: a topic deleted and created again under its name, and the member fetched the new log
    from the old position (its first records never handed out). Java reads it the same way; here the topic id
    behind the name changed, so the positions are reset by auto_offset_reset, with a warning saying why."""
    import logging
    import uuid

    from fsm_consumer.consumer._wiring import _recreated
    from fsm_consumer.managers import MetadataManager

    config = ConsumerConfig.from_kwargs(bootstrap_servers="127.0.0.1:1", auto_offset_reset="earliest")
    subs = SubscriptionState("earliest")
    subs.subscribe(["a"], None)
    meta = MetadataManager(config, lambda: {"a"})
    meta.on_recreated = lambda topic, old, new: _recreated(subs, config, topic, old, new)
    manager = SelfAssignManager(config, subs, meta)
    first, second = uuid.uuid4(), uuid.uuid4()
    meta.poll(0.0)
    meta.on_response(_metadata_answer(0, 2, first), 0.0)
    manager.poll(0.0)
    t0 = TopicPartition("a", 0)
    subs.seek(t0, 40)
    meta._need = True
    meta.poll(1.0)
    meta.on_response(_metadata_answer(0, 2, first), 1.0)  # the same topic: nothing happens
    assert subs.positions()[t0] == 40
    meta._need = True
    meta.poll(2.0)
    with caplog.at_level(logging.WARNING, logger="fsm_consumer.metadata"):
        meta.on_response(_metadata_answer(0, 2, second), 2.0)  # deleted and created again
    assert t0 not in subs.positions() and subs.state(t0).reset_strategy == "earliest"
    assert "was deleted and created again" in caplog.text and "reset by auto_offset_reset='earliest'" in caplog.text
