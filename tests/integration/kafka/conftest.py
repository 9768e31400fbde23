"""The Apache Kafka reference broker for these tests: one per session, started from the jar cache.

Without Java or the jars the tests are skipped with the reason (run `fsm-consumer broker fetch --kind
kafka` once); with FSM_REQUIRE_KAFKA=1 (CI sets it) a broker that cannot start fails the run instead.
"""

from __future__ import annotations

import os

import pytest

from fsm_consumer.broker import KafkaBroker, KafkaNotFoundError


@pytest.fixture(scope="session")
def kafka():
    try:
        broker = KafkaBroker()
    except KafkaNotFoundError as exc:
        if os.environ.get("FSM_REQUIRE_KAFKA") == "1":
            pytest.fail(f"Apache Kafka is required here (FSM_REQUIRE_KAFKA=1) but: {exc}")
        pytest.skip(f"Apache Kafka tests skipped: {exc}")
    try:
        yield broker
    finally:
        broker.stop()
