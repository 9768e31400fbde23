"""Issue 25's clean rolling bounce, short (tools/faults --scenario bounce is the long run): three member
processes of one group while records flow; each in turn stopped cleanly (SIGTERM: close()) and started again
under its name once the group has settled. Dynamic members: each bounce costs a bounded number of
rebalances; static members: none at all. Every rule holds over every history."""

from __future__ import annotations

import uuid

import pytest
from scenario_verdict import judged

from fsm_consumer.testing._bounce_run import MODES, UNSUPPORTED, run

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", MODES)
def test_rolling_bounce(broker, tmp_path, mode):
    if (broker.kind, mode) in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[(broker.kind, mode)])
    topic = f"bounce-{mode}-{uuid.uuid4().hex[:8]}"
    result = run(
        broker.bootstrap_servers,
        topic,
        6,
        mode,
        tmp_path,
        members=3,
        session_timeout_ms=10_000,
        commit_log=broker.commit_log if broker.kind == "kafka" else None,
    )
    context, report = judged(result, tmp_path, broker.kind)
    assert len(context["bounces"]) == 3 and all(b["settled"] for b in context["bounces"]), report
    assert context["max_rebalances_per_bounce"] <= context["allowed_rebalances_per_bounce"], report
    if mode == "dynamic":
        assert all(b["rebalances"] >= 1 for b in context["bounces"]), report  # a leave is seen by the group
    # every consumer's history was judged: the three first and their three replacements
    assert len(result.summary["consumers"]) == 6, report
