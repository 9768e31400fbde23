"""Every drained background event is handled (issue 12, defect 1): callbacks all run and are
acknowledged, and the first error is raised after all of them."""

from __future__ import annotations

import time

import pytest

from fsm_consumer import Consumer, TopicPartition

pytestmark = pytest.mark.integration


def test_every_failing_commit_callback_runs_and_the_first_error_is_raised(broker, make_topic, produce):
    topic = make_topic()
    produce(topic, 3, partition=0)
    tp = TopicPartition(topic, 0)
    ran = []

    def failing(n):
        def callback(offsets, error):
            ran.append(n)
            raise RuntimeError(f"callback {n}")

        return callback

    with Consumer(
        bootstrap_servers=broker.bootstrap_servers,
        group_id=f"g-{topic}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    ) as consumer:
        consumer.assign([tp])
        for n in range(3):
            consumer.commit_async({tp: n + 1}, callback=failing(n))
        deadline = time.monotonic() + 10
        raised = []
        while len(ran) < 3 and time.monotonic() < deadline:
            try:
                consumer.poll(timeout_ms=50)
            except RuntimeError as exc:
                raised.append(str(exc))
        assert sorted(ran) == [0, 1, 2]
        assert raised and raised[0] == f"callback {ran[0]}"
        assert len(raised) <= len(ran)
