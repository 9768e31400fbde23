"""Issue 25's broker crashes, short (tools/faults --scenario broker-kill is the long run, five crashes): a
broker of the test's kind of its own (Tansu on S3 storage, Apache Kafka with its log directory) killed with
SIGKILL three times under three member processes of one group while records flow, and started again on the
same port and data. Every rule holds over every history: nothing the broker acknowledged is lost, no
partition is read by two members at once, no commit goes backwards or is acknowledged falsely; the group
recovers each time."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from scenario_verdict import judged

from fsm_consumer.broker import start_broker
from fsm_consumer.broker._admin import LoopbackBroker
from fsm_consumer.testing._broker_kill_run import run

pytestmark = pytest.mark.integration


@pytest.fixture
def crashable(broker: LoopbackBroker) -> Iterator[LoopbackBroker]:
    """A broker of ``broker``'s kind of its own, whose data outlives a kill."""
    own = start_broker(broker.kind, **({"storage": "s3"} if broker.kind == "tansu" else {}))
    try:
        yield own
    finally:
        own.stop()


@pytest.mark.timeout(300)
def test_broker_killed_and_restarted(crashable, tmp_path):
    result = run(
        crashable,
        f"broker-kill-{uuid.uuid4().hex[:8]}",
        6,
        tmp_path,
        kills=3,
        every_s=4.0,
        commit_log=crashable.commit_log if crashable.kind == "kafka" else None,
    )
    context, report = judged(result, tmp_path, crashable.kind)
    assert len(context["crashes"]) == 3 and all(s is not None for s in context["recovery_s"]), report
    assert context["rereads"] <= context["reread_bound"], report
