"""A transport blocked in poll costs (almost) no CPU, and wakeup() gets it out quickly."""

from __future__ import annotations

import threading
import time

import pytest
from kafka.protocol.metadata import MetadataRequest

from fsm_consumer.transport import KafkaTransport, Pending

pytestmark = pytest.mark.integration

IDLE_SECONDS = 2.0


def test_idle_poll_uses_almost_no_cpu_and_wakeup_interrupts_it(broker):
    t = KafkaTransport({"bootstrap_servers": broker.bootstrap_servers})
    results: dict[str, float] = {}
    failures: list[BaseException] = []

    def loop() -> None:
        try:
            # A ready connection and a request with a far deadline: nothing is due for 60 s.
            warm = t.send(MetadataRequest(topics=None, allow_auto_topic_creation=False))
            while not warm.done:
                t.poll(100)
            assert warm.error is None and t.ready(-1)
            t.send(MetadataRequest(topics=[], allow_auto_topic_creation=False), timeout_ms=60_000)
            ready = t.poll(1000)  # collects that answer, then the connection is idle
            started_cpu, started = time.thread_time(), time.monotonic()
            results["polled"] = len(ready)
            done: list[Pending] = t.poll(10_000)
            results["returned"] = time.monotonic()
            results["wall"] = results["returned"] - started
            results["cpu"] = time.thread_time() - started_cpu
            results["after_wakeup"] = len(done)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    worker = threading.Thread(target=loop, name="transport-io")
    try:
        worker.start()
        time.sleep(IDLE_SECONDS + 0.5)  # the first 0.5 s covers the warm-up round trips
        woke_at = time.monotonic()
        t.wakeup()
        worker.join(5)
        assert not worker.is_alive() and not failures, failures
        latency_ms = (results["returned"] - woke_at) * 1000
        share = results["cpu"] / results["wall"]
        print(
            f"idle poll: {results['cpu'] * 1000:.2f} ms CPU over {results['wall']:.2f} s "
            f"({share:.3%} of a core); wakeup latency {latency_ms:.1f} ms"
        )
        assert results["wall"] > 1.0, "poll(10_000) returned long before the wakeup"
        assert share < 0.10
        assert latency_ms < 100
    finally:
        worker.join(5)
        t.close()
