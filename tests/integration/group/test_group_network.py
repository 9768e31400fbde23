"""Issue 25's network faults, short (tools/faults --scenario network is the long run): a broker of the test's
kind that advertises a FaultProxy (fsm_consumer.testing._proxy), three member processes of one group going
through it while records flow.

* resets: connections reset in the middle of OffsetCommit, Fetch, JoinGroup, SyncGroup and Heartbeat
  frames (requests and answers), then a stretch of latency: every rule holds, and never a false commit
  success (rule C's broker checks: every acknowledged commit is in Kafka's commit log; none is above what
  the broker holds in the end);
* blackhole: one member's traffic swallowed for two sessions: it loses its partitions (lost, not revoked),
  the others take them over, nothing it commits while out is acknowledged, and it rejoins once healed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from scenario_verdict import judged

from fsm_consumer.broker import start_broker
from fsm_consumer.broker._admin import LoopbackBroker
from fsm_consumer.testing._network_run import run
from fsm_consumer.testing._proxy import FaultProxy

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def proxied(broker: LoopbackBroker) -> Iterator[tuple[FaultProxy, LoopbackBroker]]:
    """A broker of ``broker``'s kind of its own, advertising a FaultProxy in front of it."""
    with FaultProxy() as proxy:
        options = {"storage": "memory"} if broker.kind == "tansu" else {}
        behind = start_broker(broker.kind, advertised_port=proxy.port, **options)
        try:
            proxy.forward_to(behind.host, behind.port)
            yield proxy, behind
        finally:
            behind.stop()


def _run(proxied, tmp_path, mode, **kw):
    proxy, behind = proxied
    proxy.resets_done.clear()
    topic = f"network-{mode}-{uuid.uuid4().hex[:8]}"  # run() creates it
    result = run(
        proxy,
        behind.bootstrap_servers,
        topic,
        6,
        mode,
        tmp_path,
        commit_log=behind.commit_log if behind.kind == "kafka" else None,
        **kw,
    )
    context, report = judged(result, tmp_path, behind.kind)
    assert context["broker_committed"], report  # the broker's word was read and judged
    return result, context, report


@pytest.mark.timeout(240)
def test_connections_reset_mid_frame_and_latency(proxied, tmp_path):
    result, context, report = _run(proxied, tmp_path, "resets", rounds=5, session_timeout_ms=6000)
    done = context["resets_done"]
    # the faults the scenario claims were carried out
    for fault in ("OffsetCommit response", "OffsetCommit request", "Fetch response", "Heartbeat response"):
        assert done.get(fault), (fault, report)
    assert done.get("JoinGroup response") or done.get("SyncGroup response"), report
    assert all(r["settled"] for r in context["rounds"]), report
    assert context["rereads"] <= context["reread_bound"], report


@pytest.mark.timeout(240)
def test_a_blackholed_member_is_lost_not_revoked_and_rejoins(proxied, tmp_path):
    result, context, report = _run(proxied, tmp_path, "blackhole", session_timeout_ms=4000)
    bh = context["blackhole"]
    assert context["swallowed"].get("m1"), report
    assert bh["others_took_over_s"] is not None and bh["victim_gave_up_s"] is not None, report
    assert bh["gave_up_by"] == ["lost"], report  # it could not reach the group to revoke
    assert bh["commits_acknowledged_while_out"] == 0, report
    assert bh["rejoined_s"] is not None, report
    assert context["rereads"] <= context["reread_bound"], report
