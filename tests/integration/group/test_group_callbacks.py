"""Issue 25's slow rebalance callbacks (tools/faults --scenario callbacks is the long run): two member
processes whose on_partitions_revoked sleeps, then commits; a third joins and takes partitions from them.
A callback longer than the session but shorter than max_poll_interval_ms keeps the member in the group and
its commit succeeds; one longer than max_poll_interval_ms costs the member its partitions (lost) and its
commit fails. Every rule holds over every history."""

from __future__ import annotations

import uuid

import pytest
from scenario_verdict import judged

from fsm_consumer.testing._callbacks_run import MODES, UNSUPPORTED, run

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", MODES)
def test_slow_revocation_callbacks(broker, tmp_path, mode):
    if (broker.kind, mode) in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[(broker.kind, mode)])
    topic = f"callbacks-{mode}-{uuid.uuid4().hex[:8]}"
    result = run(
        broker.bootstrap_servers,
        topic,
        6,
        mode,
        tmp_path,
        session_timeout_ms=3000,
        commit_log=broker.commit_log if broker.kind == "kafka" else None,
    )
    context, report = judged(result, tmp_path, broker.kind)
    assert context["settled"], report
    seen = context["callbacks"].values()
    slow = [s for s in seen if s["revoked"]]  # the members that gave partitions to the joiner
    assert slow, report
    if mode == "within":
        assert all(s["commits_in_callback"] and not s["failed_in_callback"] for s in slow), report
        assert not any(s["lost"] for s in seen), report
    else:
        assert any(s["lost"] for s in seen), report
        assert all(not s["commits_in_callback"] for s in slow), report
