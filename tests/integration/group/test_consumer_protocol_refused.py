"""A broker without the consumer group protocol (KIP-848): Tansu 0.6 lists no ConsumerGroupHeartbeat API.
A member asking for it gets a clear error from poll() within 2 s, naming group_protocol="classic"; no hang."""

import time

import kafka.errors as ke
import pytest

from fsm_consumer import Consumer

pytestmark = [pytest.mark.integration, pytest.mark.brokers("tansu")]


def test_a_broker_without_kip_848_is_told_from_poll_with_the_fix(broker, make_topic):
    topic = make_topic(partitions=1)
    consumer = Consumer(bootstrap_servers=broker.bootstrap_servers, group_id=f"g-{topic}", group_protocol="consumer")
    try:
        consumer.subscribe([topic])
        started = time.monotonic()
        with pytest.raises(ke.UnsupportedVersionError, match="group_protocol='classic'") as raised:
            while time.monotonic() - started < 10:
                consumer.poll(timeout_ms=100)
        took = time.monotonic() - started
        assert took < 2.0, f"told after {took:.1f} s"
        assert "KIP-848" in str(raised.value)
        with pytest.raises(ke.UnsupportedVersionError):  # held: every call says it again until close()
            consumer.poll(timeout_ms=0)
    finally:
        consumer.close(timeout_ms=2000)
