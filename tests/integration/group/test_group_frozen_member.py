"""Issue 12's acceptance point, short: three member processes in one cooperative-sticky group, one frozen
(SIGSTOP) for twice the session timeout again and again while records flow; the history checker
(fsm_consumer.history) over the histories their consumers wrote finds nothing lost (L), one owner at a
time (E), no re-read below a commit (D), positions without gaps (M) and no commit backwards (C).
tools/group-freeze-check is the long run."""

import time

import pytest

from fsm_consumer.testing._freeze_run import run

pytestmark = pytest.mark.integration


@pytest.mark.timeout(120)
def test_a_member_frozen_past_its_session_again_and_again(broker, make_topic, tmp_path):
    topic = make_topic(partitions=6)  # run() accepts an existing topic
    began = time.monotonic()
    # steady 3 s, frozen 6 s, steady 3 s and until m0 owns partitions again, frozen 6 s: two freezes in 30 s
    result = run(
        broker.bootstrap_servers,
        topic,
        6,
        duration_s=30,
        session_timeout_ms=3000,
        freeze_every_s=3,
        out_dir=tmp_path,
        produce_rate=300,
        members=3,
        heartbeat_interval_ms=300,
        drain_timeout_s=10,
    )
    report = f"{result.format()}\n{result.summary['context']}"
    print(report, f"\nrun took {time.monotonic() - began:.1f} s")
    s = result.summary
    assert s["context"]["freezes_owning"] >= 2, report  # each a member with partitions to lose
    assert result.violations == [] and result.ok, report
    read = {c["client"]: c["records_read"] for c in s["consumers"].values()}
    assert sorted(read) == ["m0", "m1", "m2"] and all(read.values()), report
    assert s["context"]["produced"] > 0 and result.status("L") == "passed", report


@pytest.mark.timeout(150)
def test_members_frozen_in_turn_two_at_once(broker, make_topic, tmp_path):
    """Issue 23's scenario, short: every member frozen past its session in turn, a freeze beginning every
    2 s and lasting 4 s (session 1.5 s), so two are often frozen at once. Rule E compares owners by the
    clock whatever their generations: a thawed member must not read a partition another member holds
    (but for the one poll under way when it froze); nothing is lost, no commit goes backwards."""
    topic = make_topic(partitions=6)
    result = run(
        broker.bootstrap_servers,
        topic,
        6,
        duration_s=24,
        session_timeout_ms=1500,
        freeze_every_s=2,
        out_dir=tmp_path,
        produce_rate=500,
        members=3,
        heartbeat_interval_ms=150,
        drain_timeout_s=30,
        rotate=True,
        freeze_s=4,
        create_topic=False,
        # on Apache Kafka rule C judges commits by the broker's own log (__consumer_offsets)
        commit_log=broker.commit_log if broker.kind == "kafka" else None,
    )
    assert_clean_rotation(result, freezes_owning=4, broker_log=broker.kind == "kafka")


@pytest.mark.brokers("kafka")
@pytest.mark.timeout(120)
def test_consumer_protocol_members_frozen_in_turn_past_the_groups_session(broker, make_topic, tmp_path):
    """The same under the consumer protocol (KIP-848), whose session the broker owns: the group's own
    consumer.session.timeout.ms (2 s, heartbeats every 200 ms, set on the group before it forms) is what each
    member reads back for its lease. A thawed member hands out nothing of partitions it may have lost."""
    topic = make_topic(partitions=6)
    result = run(
        broker.bootstrap_servers,
        topic,
        6,
        duration_s=20,
        session_timeout_ms=2000,  # set on the group (and heartbeats every 200 ms) before it forms
        freeze_every_s=3,
        out_dir=tmp_path,
        produce_rate=500,
        members=3,
        drain_timeout_s=30,
        rotate=True,
        freeze_s=4,
        create_topic=False,
        strategy="consumer",
        commit_log=broker.commit_log,
    )
    assert_clean_rotation(result, freezes_owning=3, broker_log=True)


def assert_clean_rotation(result, *, freezes_owning: int, broker_log: bool) -> None:
    """Members frozen in turn: enough freezes of an owner, every rule clean, nothing lost; on Apache Kafka
    rule C judged from the broker's own commit log."""
    report = f"{result.format()}\n{result.summary['context']}"
    print(report)
    context = result.summary["context"]
    if broker_log:
        assert context["broker_commit_log_entries"], report
    assert context["freezes_owning"] >= freezes_owning, report
    assert result.violations == [] and result.ok, report
    assert context["produced"] > 0 and result.status("L") == "passed", report
