"""Commits under faults while partitions change hands, short (tools/faults --scenario commits is the long run):
three member processes of one group while records flow, their OffsetCommits held back (past the request
timeout: lost) or answered with retriable errors after the broker applied them, members bounced in turn.
The library's auto-commit, and commit_async() after every poll; the classic protocol on both brokers, the
consumer protocol (KIP-848) on Apache Kafka. Every rule holds over every history: no partition released
before its commit landed, no commit overtaken by an older one (the broker's own log on Kafka)."""

from __future__ import annotations

import uuid

import pytest
from scenario_verdict import judged

from fsm_consumer.testing._commits_run import MODES, UNSUPPORTED, run

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", MODES)
def test_commits_held_failed_and_lost_while_partitions_move(broker, tmp_path, mode):
    if (broker.kind, mode) in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[(broker.kind, mode)])
    result = run(
        broker.bootstrap_servers,
        f"commits-{mode}-{uuid.uuid4().hex[:8]}",
        6,
        mode,
        tmp_path,
        duration_s=16,
        members=3,
        commit_log=broker.commit_log if broker.kind == "kafka" else None,
    )
    context, report = judged(result, tmp_path, broker.kind)
    assert context["members_bounced"] >= 2, report
    assert sum(context["commit_faults"].values()) >= 10, report  # the commits did meet faults
    failed = result.summary["commits_failed"]
    assert failed >= 1, report  # and some failed (the held ones past the request timeout, the error answers)
