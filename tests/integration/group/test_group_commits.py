"""Commits: sync and async, committed(), auto-commit for manual assignment and groups, resuming from them."""

import time

import pytest
from group_harness import FAST, wait_until

from fsm_consumer import CommitFailedError, Consumer, OffsetAndMetadata, TopicPartition
from fsm_consumer.managers._commit_entry import commit_request

pytestmark = pytest.mark.integration


def _read(c, n, timeout_s=10):
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=100, max_records=n - len(got)).values():
            got.extend(records)
    return got


def test_commit_and_committed_with_metadata(broker, make_topic, produce):
    topic = make_topic(partitions=1)
    produce(topic, count=10)
    tp = TopicPartition(topic, 0)
    with Consumer(
        bootstrap_servers=broker.bootstrap_servers,
        group_id=f"g-{topic}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    ) as c:
        c.assign([tp])
        assert c.committed(tp) is None
        assert len(_read(c, 4)) == 4
        c.commit()  # the position: 4
        assert c.committed(tp) == 4
        c.commit({tp: OffsetAndMetadata(7, "worker-3", -1)})  # per-partition metadata strings travel...
        commits = c._group.commits
        sent = commit_request(commits._config, commits.membership, {tp: OffsetAndMetadata(7, "worker-3", -1)}, (-1, ""))
        assert sent.topics[0].partitions[0].committed_metadata == "worker-3"
        # ...Apache Kafka stores them; Tansu 0.6 does not (confluent-kafka reads back None there too)
        stored = c.committed(tp, metadata=True)
        assert stored.offset == 7
        if broker.kind == "kafka":
            assert stored.metadata == "worker-3"
        done = []
        c.commit_async({tp: 9}, callback=lambda offsets, error: done.append((offsets, error)))
        deadline = time.monotonic() + 5
        while not done and time.monotonic() < deadline:
            c.poll(timeout_ms=50)  # the callback runs on this thread, inside poll()
        assert done and done[0][1] is None and done[0][0][tp].offset == 9
    with Consumer(bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{topic}", auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert c.position(tp) == 9  # a new consumer starts from the committed offset
        assert [r.offset for r in _read(c, 1)] == [9]


def test_auto_commit_manual_assignment_and_on_close(broker, make_topic, produce):
    topic = make_topic(partitions=2)
    produce(topic, count=20)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    c = Consumer(
        bootstrap_servers=broker.bootstrap_servers,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        auto_commit_interval_ms=100,
    )
    c.assign(tps)
    assert len(_read(c, 20)) == 20
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sum(c.committed(tp) or 0 for tp in tps) < 20:
        c.poll(timeout_ms=100)
    assert sum(c.committed(tp) for tp in tps) == 20, "auto-commit from the background thread"
    produce(topic, count=4, partition=0)
    assert len(_read(c, 4)) == 4
    c.close()  # commits the last positions
    with Consumer(bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{topic}", enable_auto_commit=False) as d:
        assert d.committed(tps[0]) + d.committed(tps[1]) == 24


def test_group_member_resumes_where_the_last_one_committed(broker, make_topic, produce):
    topic = make_topic(partitions=2)
    produce(topic, count=30)
    group = f"g-{topic}"
    c = Consumer(bootstrap_servers=broker.bootstrap_servers, group_id=group, **FAST)
    c.subscribe([topic])
    first = _read(c, 30, timeout_s=20)
    assert len(first) == 30
    c.close()  # revokes with an auto-commit, then leaves
    produce(topic, count=6)
    d = Consumer(bootstrap_servers=broker.bootstrap_servers, group_id=group, **FAST)
    d.subscribe([topic])
    second = _read(d, 6, timeout_s=20)
    d.close()
    assert len(second) == 6
    assert not {(r.partition, r.offset) for r in first} & {(r.partition, r.offset) for r in second}


def test_commit_of_a_fenced_generation_fails(broker, make_topic):
    topic = make_topic(partitions=1)
    from fsm_consumer._config import ConsumerConfig
    from fsm_consumer.transport import FaultyTransport, KafkaTransport

    settings = dict(bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{topic}", enable_auto_commit=False, **FAST)
    faults = FaultyTransport(KafkaTransport(ConsumerConfig.from_kwargs(**settings)))
    c = Consumer(transport=faults, **settings)
    try:
        c.subscribe([topic])
        wait_until(
            lambda: c.poll(timeout_ms=50) is not None and c._group.membership.machine.state == "stable",
            20,
            "a stable member",
        )
        faults.fail("OffsetCommit", 22, times=1)  # ILLEGAL_GENERATION: the group moved on
        with pytest.raises(CommitFailedError):
            c.commit({TopicPartition(topic, 0): 0})
    finally:
        c.close()


def test_member_history_as_json_lines(broker, make_topic, produce, tmp_path):
    """history_path: the lines of docs/histories.md, checked by fsm_consumer.history (every rule holds)."""
    import json

    from fsm_consumer import ConsumerRebalanceListener
    from fsm_consumer.history import check, load

    topic = make_topic(partitions=2)
    produce(topic, count=10)
    path = tmp_path / "history.jsonl"
    c = Consumer(
        bootstrap_servers=broker.bootstrap_servers,
        group_id=f"h-{topic}",
        history_path=str(path),
        **{**FAST, "auto_commit_interval_ms": 100},
    )
    c.subscribe([topic], listener=ConsumerRebalanceListener())
    assert len(_read(c, 10, timeout_s=20)) == 10
    ends = c.end_offsets([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    c.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    events = [e["event"] for e in lines]
    assert events[0] == "started" and events[-1] == "closed"
    assert {"assigned", "read", "commit", "revoked", "callback", "transition", "reset"} <= set(events)
    assert len({e["consumer"] for e in lines}) == 1
    assigned = next(e for e in lines if e["event"] == "assigned")
    assert sorted(map(tuple, assigned["partitions"])) == [(topic, 0), (topic, 1)] and assigned["generation"] >= 0
    reads = [e for e in lines if e["event"] == "read"]
    assert sum(e["count"] for e in reads) == 10
    for e in reads:  # every record of a plain producer: offsets contiguous, the position after the last
        first, last = e["offsets"]
        assert e["count"] == last - first + 1 and e["to"] == last + 1 and e["from"] <= first
        assert e["t_poll_start"] <= e["t"] and e["generation"] == assigned["generation"]
    commits = [e for e in lines if e["event"] == "commit" and e["error"] is None]
    assert any(sum(o[2] for o in e["offsets"]) == 10 for e in commits)
    machines = {e["machine"].split("/")[0] for e in lines if e["event"] == "transition"}
    assert {"background", "membership", "connection"} <= machines
    callbacks = [e["name"] for e in lines if e["event"] == "callback"]
    assert "on_partitions_assigned" in callbacks and "on_partitions_revoked" in callbacks
    histories = load([path])
    assert sum(ends.values()) == 10
    result = check(histories, produced={topic: {tp.partition: end for tp, end in ends.items()}})
    assert result.ok, result.format()


def test_commits_during_a_cooperative_rebalance_are_retriable_not_fatal(broker, make_topic, produce, members):
    """Issue 11, defect 7: a member committing after every poll while a second member joins
    (cooperative-sticky) sees RebalanceInProgressError while it rejoins (never CommitFailedError), keeps
    its partitions, and its commits succeed again once the group is stable."""
    from group_harness import Member  # noqa: F401 (members() builds them)

    topic = make_topic(partitions=4)
    produce(topic, 400, key=lambda i: b"k%d" % i)
    group = f"coop-commit-{topic}"
    first = members(
        broker.bootstrap_servers, group, topic, "first", partition_assignment_strategy=["cooperative-sticky"]
    )
    wait_until(lambda: first.state == "stable" and len(first.owned()) == 4, 30, "the first member to own everything")
    first.commit_each_poll = True
    wait_until(lambda: first.commits_done > 0, 10, "a first commit")
    second = members(
        broker.bootstrap_servers, group, topic, "second", partition_assignment_strategy=["cooperative-sticky"]
    )
    wait_until(
        lambda: (
            first.state == second.state == "stable"
            and second.owned()
            and first.owned() | second.owned() == {0, 1, 2, 3}
        ),
        40,
        "the group to settle",
        lambda: f"first {first.state} {first.owned()}, second {second.state} {second.owned()}",
    )
    done_before = first.commits_done
    wait_until(lambda: first.commits_done > done_before, 10, "commits after the rebalance")
    assert not [e for e in first.errors if isinstance(e, CommitFailedError)], first.errors
    assert not first.errors, first.errors
    assert first.commits_refused > 0, "the member committed while rejoining: those commits must be refused"
    assert len(first.owned()) == 2  # it kept half of its partitions through the rebalance
