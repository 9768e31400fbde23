"""The Apache Kafka reference tests: every module here is marked ``brokers("kafka")``, so ``broker`` is
the session's Kafka (see tests/conftest.py: skipped with the reason without Java or the jars, a
failure with FSM_REQUIRE_KAFKA=1)."""

from __future__ import annotations

import pytest


@pytest.fixture
def kafka(broker):
    """The session's Apache Kafka (the ``broker`` of this directory's tests)."""
    assert broker.kind == "kafka", "the tests of tests/integration/kafka are marked brokers('kafka')"
    return broker
