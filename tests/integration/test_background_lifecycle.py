"""The background thread's lifecycle against the real broker: discovery timing out, close running out of
budget, and a crash of the loop surfacing as a typed error instead of a traceback from a thread."""

import time

import pytest

from fsm_consumer import BackgroundThreadError, Consumer, TopicPartition
from fsm_consumer._config import ConsumerConfig
from fsm_consumer.transport import FaultyTransport, KafkaTransport

pytestmark = pytest.mark.integration


def _faulty(**settings):
    return FaultyTransport(KafkaTransport(ConsumerConfig.from_kwargs(**settings)))


def _wait(pred, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_discovery_times_out_then_finds_the_coordinator(broker, make_topic):
    topic = make_topic(partitions=1)
    settings = dict(bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{topic}", request_timeout_ms=500)
    transport = _faulty(**settings)
    with Consumer(transport=transport, **settings) as c:
        transport.add_latency(None, 800)  # FindCoordinator answers later than discovery_timeout
        c.assign([TopicPartition(topic, 0)])  # with a group, positions come from committed offsets
        bg = c._background_machine
        _wait(lambda: any(r.trigger == "discovery_timed_out" for r in bg.log), 10, "discovery to time out")
        transport.clear()
        assert c.position(TopicPartition(topic, 0), timeout_ms=10_000) == 0
        assert bg.state == "stable"


def test_close_within_its_budget_when_the_coordinator_is_gone(broker, make_topic, produce):
    topic = make_topic(partitions=1)
    produce(topic, count=5)
    settings = dict(
        bootstrap_servers=broker.bootstrap_servers,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        request_timeout_ms=5000,
    )
    transport = _faulty(**settings)
    c = Consumer(transport=transport, **settings)
    c.assign([TopicPartition(topic, 0)])
    got = 0
    deadline = time.monotonic() + 10
    while got < 5 and time.monotonic() < deadline:
        got += sum(len(v) for v in c.poll(timeout_ms=200).values())
    assert got == 5
    transport.blackhole(None)  # the final auto-commit cannot get through
    t = time.monotonic()
    c.close(timeout_ms=700)
    took = time.monotonic() - t
    assert took < 1.5, f"close took {took:.2f} s"
    triggers = [r.trigger for r in c._background_machine.log]
    assert triggers[-1] == "close_timed_out" and c._background_machine.state == "closed"
    assert not c._thread.alive


class _Exploding(FaultyTransport):
    """Raises from poll() once armed: an unexpected bug inside the background loop."""

    armed = False

    def poll(self, timeout_ms):
        if self.armed:
            raise RuntimeError("boom inside the loop")
        return super().poll(timeout_ms)


def test_a_crash_in_the_loop_is_raised_typed_from_poll(broker, make_topic):
    topic = make_topic(partitions=1)
    settings = dict(bootstrap_servers=broker.bootstrap_servers)
    transport = _Exploding(KafkaTransport(ConsumerConfig.from_kwargs(**settings)))
    c = Consumer(transport=transport, **settings)
    try:
        c.assign([TopicPartition(topic, 0)])
        c.poll(timeout_ms=100)
        transport.armed = True
        transport.wakeup()
        with pytest.raises(BackgroundThreadError) as info:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                c.poll(timeout_ms=100)
        assert isinstance(info.value.__cause__, RuntimeError)
        assert c._background_machine.state == "failed"
        _wait(lambda: not c._thread.alive, 5, "the background thread to end")
        with pytest.raises(BackgroundThreadError):
            c.poll(timeout_ms=0)  # every later call says why
    finally:
        c.close(timeout_ms=1000)
