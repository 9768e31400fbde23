"""NodeHealth: which connection failures and recoveries become log lines (no sockets, no clock)."""

from __future__ import annotations

from fsm_consumer.transport._health import WARN_INTERVAL_MS, NodeHealth

WHERE = "node 1 (127.0.0.1:9092)"


def test_one_warning_then_one_per_interval_counting_the_rest():
    h = NodeHealth()
    first = h.failed(WHERE, "connect to 127.0.0.1:9092 failed: Connection refused", 1000.0)
    assert first == "connection to node 1 (127.0.0.1:9092) failed: connect to 127.0.0.1:9092 failed: Connection refused"
    # Twelve more within the interval: counted, not logged.
    assert [h.failed(WHERE, f"attempt {i}", 1000.0 + i * 2000) for i in range(12)] == [None] * 12
    assert h.failures == 13 and h.last_error == "attempt 11"
    assert h.failed(WHERE, "still refused", 1000.0 + WARN_INTERVAL_MS - 1) is None  # 1 ms short
    again = h.failed(WHERE, "still refused", 1000.0 + WARN_INTERVAL_MS + 1999)
    assert again == f"connection to {WHERE} failed: still refused (failed 13 more times since the last warning)"
    # The interval runs from the last warning, not from the first failure.
    assert h.failed(WHERE, "x", 1000.0 + WARN_INTERVAL_MS + 2000) is None
    assert h.failed(WHERE, "y", 1000.0 + 2 * WARN_INTERVAL_MS + 1999) == (
        f"connection to {WHERE} failed: y (failed 1 more time since the last warning)"
    )


def test_recovery_after_a_warning_is_one_info_and_resets_the_count():
    h = NodeHealth()
    h.failed(WHERE, "refused", 0.0)
    h.failed(WHERE, "refused", 100.0)
    h.failed(WHERE, "refused", 200.0)
    assert h.ready(WHERE) == "node 1 (127.0.0.1:9092) is reachable again after 3 failures"
    assert h.failures == 0 and h.last_error is None
    assert h.ready(WHERE) is None  # ready again without failures in between: nothing to say


def test_a_flapping_node_logs_at_most_a_warning_and_an_info_per_interval():
    h = NodeHealth()
    assert h.failed(WHERE, "reset", 0.0) is not None
    assert h.ready(WHERE) == f"{WHERE} is reachable again after 1 failure"
    # Fails and recovers again and again within the interval: silent, since the last line
    # about the node ("reachable again") is true again each time it recovers.
    for t in range(1, 10):
        assert h.failed(WHERE, "reset", t * 1000.0) is None
        assert h.failures == 1 and h.last_error == "reset"
        assert h.ready(WHERE) is None
    assert h.failed(WHERE, "reset", WARN_INTERVAL_MS) == (
        f"connection to {WHERE} failed: reset (failed 9 more times since the last warning)"
    )
    assert h.ready(WHERE) == f"{WHERE} is reachable again after 1 failure"


def test_without_failures_there_is_nothing_to_report():
    h = NodeHealth()
    assert h.ready(WHERE) is None
    assert h.failures == 0 and h.last_error is None
