"""Issue 25's member churn, short (tools/faults --scenario churn is the long run): three member processes of
one group while records flow; every 6 s, once the group has settled, one is killed with SIGKILL and a
replacement started under its name (for static members, its group_instance_id). The history checker
(fsm_consumer.history) over every consumer's history, the killed ones' too, finds nothing lost (L), one
owner at a time (E), no re-read below a commit (D), positions without gaps (M), no commit backwards (C;
on Apache Kafka by the broker's own commit log) and, under a ParallelConsumer, key order (K); every killed
member's partitions were taken over by live members."""

import pytest
from scenario_verdict import judged

from fsm_consumer.testing._churn_run import MODES, UNSUPPORTED, run

pytestmark = pytest.mark.integration


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", list(MODES))
def test_members_killed_and_replaced(broker, make_topic, tmp_path, mode):
    if (broker.kind, mode) in UNSUPPORTED:
        pytest.skip(UNSUPPORTED[(broker.kind, mode)])
    topic = make_topic(partitions=6)  # run() accepts an existing topic
    # settled, then a kill every 6 s (and once the group has settled again): 2 kills in 18 s on Apache
    # Kafka, where a dynamic member's partitions wait for its session (3 s) to run out and a static
    # member's replacement takes them back before that; 2 in 24 s on Tansu, whose rounds take 5-12 s
    result = run(
        broker.bootstrap_servers,
        topic,
        6,
        mode,
        duration_s=18 if broker.kind == "kafka" else 24,
        kill_every_s=6,
        out_dir=tmp_path,
        produce_rate=300,
        members=3,
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
        recovery_timeout_s=20,
        drain_timeout_s=20,
        create_topic=False,
        commit_log=broker.commit_log if broker.kind == "kafka" else None,
    )
    context, report = judged(result, tmp_path, broker.kind, "LEDMCK" if mode == "parallel" else "LEDMC")
    if mode == "parallel":
        assert result.summary["handled"] > 0, report  # K had handler calls to judge
    assert context["kills"] >= 2 and context["kills_owning"] == context["kills"], report
    for kill in context["kill_log"]:  # a killed member's partitions were taken over by live members
        assert kill["recovered_s"] is not None, report
        assert kill["owned"] and all(kill["taken_over_by"][p] for p in kill["owned"]), report
        assert not any(kill["victim"] in owners for owners in kill["taken_over_by"].values()), report
    # the killed ones' histories were checked with the rest: one consumer per process started
    assert len(result.summary["consumers"]) == 3 + context["kills"], report
    assert context["rereads"] <= context["reread_bound"], report
