"""tools/faults' share scenario, short (fsm_consumer.testing._share_run): share members on one partition of
Apache Kafka while records flow, killed with SIGKILL, frozen past their record lock, or the broker restarted
under them; every record produced is settled and the histories pass the share rules (H N A S), then every
mutant of them is caught. The long runs are tools/faults --scenario share."""

from __future__ import annotations

import pytest

from fsm_consumer.broker import start_broker
from fsm_consumer.history import mutation_report
from fsm_consumer.testing import _share_run

pytestmark = pytest.mark.brokers("kafka")


def _judged(result) -> dict:
    context = result.summary["context"]
    report = f"{result.format()}\n{ {k: v for k, v in context.items() if k != 'produced_counts'} }"
    print(report)
    assert context["produced"] > 0 and context["drained"], report
    assert result.ok and [result.status(r) for r in "HNAS"] == ["passed"] * 4, report
    mutated = mutation_report(result, rounds=1)
    print(mutated.format())
    assert mutated.all_caught, mutated.format()
    return context


@pytest.mark.parametrize("mode", ["kill", "freeze"])
def test_share_members_killed_or_frozen_while_records_flow(broker, mode, tmp_path):
    result = _share_run.run(
        broker.bootstrap_servers,
        f"share-{mode}-{tmp_path.name[-8:]}",
        1,
        mode,
        tmp_path,
        members=3,
        duration_s=10 if mode == "kill" else 17,  # a freeze is 5 s (2.5 locks) after every 3 s
        every_s=3,
        rate=150,
    )
    context = _judged(result)
    assert context["faults"] >= 2 and context["redeliveries"] > 0, context


def test_share_members_through_broker_restarts(broker, tmp_path):
    own = start_broker("kafka")
    try:
        result = _share_run.run(
            own.bootstrap_servers,
            f"share-restart-{tmp_path.name[-8:]}",
            1,
            "restart",
            tmp_path,
            members=3,
            duration_s=14,
            every_s=6,
            rate=150,
            restart=own.restart,
        )
    finally:
        own.stop()
    context = _judged(result)
    assert context["faults"] >= 1, context
