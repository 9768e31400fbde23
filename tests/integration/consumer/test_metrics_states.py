"""metrics_flat() against the real broker: the connections' states, and the errors held for the user
(an ACL error injected into real Fetch answers, as the broker cannot be made to refuse on demand)."""

import threading
import time

import kafka.errors as ke
import pytest

from fsm_consumer import Consumer, TopicPartition
from fsm_consumer._config import ConsumerConfig
from fsm_consumer.transport import KafkaTransport

pytestmark = pytest.mark.integration


class _Refusing(KafkaTransport):
    """Answers every Fetch partition with TOPIC_AUTHORIZATION_FAILED while ``refuse`` is set."""

    refuse = False

    def poll(self, timeout_ms):
        done = super().poll(timeout_ms)
        if self.refuse:
            for p in done:
                if p.response is not None and type(p.request).__name__ == "FetchRequest":
                    for t in p.response.responses:
                        for part in t.partitions:
                            part.error_code, part.records = 29, None
        return done


def test_metrics_show_ready_connections_and_a_held_error_until_released(broker, make_topic, send):
    topic = make_topic(partitions=1)
    send(topic, [{"partition": 0, "value": b"x"}])
    settings = dict(bootstrap_servers=broker.bootstrap_servers, auto_offset_reset="earliest")
    transport = _Refusing(ConsumerConfig.from_kwargs(**settings))
    transport.refuse = True
    c = Consumer(transport=transport, **settings)
    tp = TopicPartition(topic, 0)
    try:
        c.assign([tp])
        deadline = time.monotonic() + 10
        with pytest.raises(ke.TopicAuthorizationFailedError):
            while time.monotonic() < deadline:
                c.poll(timeout_ms=100)
        m = c.metrics_flat()
        assert m["errors-held-count"] == 1
        ((key, text),) = m["errors-held"].items()
        assert key == f"topic/{topic}" and text.startswith("[Error 29] TopicAuthorizationFailedError: ")
        port = broker.bootstrap_servers.split(",")[0].rsplit(":", 1)[1]
        ready = {n: s for n, s in m["connection-states"].items() if s["state"] == "ready"}
        assert m["connections-ready"] == len(ready) >= 1
        assert all(int(n) >= 0 and s["address"].endswith(f":{port}") for n, s in ready.items())
        assert m["connections-failing"] == 0
        # metrics_flat() from another thread while the background thread works: snapshots only
        errors = []

        def read():
            try:
                for _ in range(200):
                    c.metrics_flat()
            except Exception as exc:  # pragma: no cover - the failure is reported below
                errors.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        transport.refuse = False
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            try:
                got = c.poll(timeout_ms=200).get(tp, [])
            except ke.TopicAuthorizationFailedError:
                pass
        reader.join(10)
        assert not errors
        assert [r.value for r in got] == [b"x"]
        m = c.metrics_flat()
        assert m["errors-held"] == {} and m["errors-held-count"] == 0
    finally:
        c.close(timeout_ms=2000)
    after = c.metrics_flat()  # still readable after close: the transport's last states
    assert after["connections-ready"] == 0
