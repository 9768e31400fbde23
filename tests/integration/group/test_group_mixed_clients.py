"""One group of this library's members and a librdkafka member (confluent-kafka, its history written by
fsm_consumer.testing._librdkafka_member from what the application sees), bounced in turn while records
flow: the two clients' cooperative-sticky assignors share the group whoever leads it, and every rule holds
over all the histories together (a user moving a group from confluent-kafka to fsm_consumer member by
member relies on exactly this). tools/faults --client librdkafka runs every scenario with librdkafka
members."""

from __future__ import annotations

import uuid

import pytest
from scenario_verdict import judged

from fsm_consumer.testing._bounce_run import run

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_a_mixed_group_bounced_in_turn(broker, tmp_path):
    result = run(
        broker.bootstrap_servers,
        f"mixed-{uuid.uuid4().hex[:8]}",
        6,
        "dynamic",
        tmp_path,
        members=3,
        session_timeout_ms=10_000,
        commit_log=broker.commit_log if broker.kind == "kafka" else None,
        client=("fsm", "librdkafka", "fsm"),
    )
    context, report = judged(result, tmp_path, broker.kind)
    assert len(context["bounces"]) == 3 and all(b["settled"] for b in context["bounces"]), report
    consumers = result.summary["consumers"].values()
    # six histories (three members and their replacements); m1's two are librdkafka's, and read records
    assert len(consumers) == 6, report
    librdkafka = [c for c in consumers if c["client"] == "m1"]
    assert len(librdkafka) == 2 and all(c["records_read"] > 0 for c in librdkafka), report
    assert all(c["records_read"] > 0 for c in consumers), report
