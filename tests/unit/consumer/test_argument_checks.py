"""A partition argument that is not one TopicPartition (or a (topic, partition) pair) raises TypeError
on the caller's thread, naming what was given; it never reaches the background thread (where it once
failed the thread with a struct.error); a closed consumer says it is closed before anything else. No broker:
the bootstrap server is a closed port."""

from __future__ import annotations

import socket

import pytest

from fsm_consumer import Consumer, TopicPartition


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def consumer():
    c = Consumer(bootstrap_servers=_closed_port(), group_id="g", api_version=(4, 0))
    try:
        yield c
    finally:
        c.close(timeout_ms=1000)


def test_committed_takes_one_partition(consumer):
    two = {TopicPartition("t", 0), TopicPartition("t", 1)}
    with pytest.raises(TypeError, match="expected a TopicPartition"):
        consumer.committed(two)
    with pytest.raises(TypeError, match="expected a TopicPartition"):
        consumer.committed(("t", "0"))


def test_commit_offsets_keyed_by_partitions(consumer):
    with pytest.raises(TypeError, match="expected a TopicPartition"):
        consumer.commit({"t": 5})
    with pytest.raises(TypeError, match="expected a TopicPartition"):
        consumer.commit_async({("t", 0, 1): 5})


def test_a_closed_consumer_says_so_before_anything_else():
    from fsm_consumer.errors import IllegalStateError

    c = Consumer(bootstrap_servers=_closed_port(), api_version=(4, 0))  # no group_id
    c.close(timeout_ms=1000)
    for call in (c.commit, c.commit_async):
        with pytest.raises(IllegalStateError) as info:
            call()
        assert "closed" in str(info.value) and "group_id" not in str(info.value), str(info.value)
