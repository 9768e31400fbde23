"""Errors that repeat are paced and held, never stormed or queued (issue 12, defects 3 and 4).

The broker cannot be made to answer TOPIC_AUTHORIZATION_FAILED or OFFSET_OUT_OF_RANGE on demand,
so the test injects them into real Fetch answers at the transport (the partition's error code set,
its records dropped) for as long as the test says, and counts every request the consumer sends.
Before the error policy: 8,789 Fetch requests in 2 s, 5,384 ListOffsets, 16,072 Metadata in 3 s.
"""

import time
from collections import Counter

import kafka.errors as ke
import pytest

from fsm_consumer import Consumer, TopicPartition
from fsm_consumer._config import ConsumerConfig
from fsm_consumer.transport import KafkaTransport

pytestmark = pytest.mark.integration
HOLD_S = 10.0
MAX_PER_S = 12  # "about 10 a second per node" (retry_backoff_ms=100, growing to retry_backoff_max_ms)


class Counting(KafkaTransport):
    """The real transport, counting requests by API and, while ``until`` lies ahead, answering every
    Fetch partition with ``code`` (records dropped): fault injection where the broker cannot help."""

    def __init__(self, config, code=None):
        super().__init__(config)
        self.sent = Counter()
        self.code = code
        self.until = 0.0

    def send(self, request, *args, **kw):
        self.sent[type(request).__name__.removesuffix("Request")] += 1
        return super().send(request, *args, **kw)

    def poll(self, timeout_ms):
        done = super().poll(timeout_ms)
        if self.code is not None and time.monotonic() < self.until:
            for p in done:
                if p.response is not None and type(p.request).__name__ == "FetchRequest":
                    for t in p.response.responses:
                        for part in t.partitions:
                            part.error_code, part.records = self.code, None
        return done


def _consumer(broker, code=None, **config):
    settings = {"bootstrap_servers": broker.bootstrap_servers, "auto_offset_reset": "earliest", **config}
    transport = Counting(ConsumerConfig.from_kwargs(**settings), code)
    return Consumer(transport=transport, **settings), transport


def _rates(sent, seconds):
    return {api: n / seconds for api, n in sent.items()}


def test_unauthorized_topic_is_raised_from_poll_within_2s_and_paced(broker, make_topic, send):
    topic = make_topic(partitions=2)
    send(topic, [{"partition": p, "value": b"x"} for p in (0, 1)])
    c, t = _consumer(broker, code=29)
    try:
        c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        t.until = time.monotonic() + HOLD_S
        start = time.monotonic()
        with pytest.raises(ke.TopicAuthorizationFailedError) as info:
            while time.monotonic() - start < 5:
                c.poll(timeout_ms=100)
        assert time.monotonic() - start < 2.0
        assert "grant this principal READ" in str(info.value) and repr(topic) in str(info.value)
        before = Counter(t.sent)
        errors = 0
        while time.monotonic() < t.until:  # held: every poll raises it, nothing is queued
            try:
                c.poll(timeout_ms=100)
            except ke.TopicAuthorizationFailedError:
                errors += 1
        took = time.monotonic() - start
        rates = _rates(t.sent - before, took)
        assert errors > 10
        assert all(r <= MAX_PER_S for r in rates.values()), rates
        assert len(c._bg_queue) == 0  # nothing queued per failure
        # the broker answers again: the error is released and records flow
        deadline = time.monotonic() + 10
        got = {}
        while time.monotonic() < deadline and len(got) < 2:
            try:
                got.update(c.poll(timeout_ms=200))
            except ke.TopicAuthorizationFailedError:
                pass
        assert len(got) == 2
    finally:
        c.close(timeout_ms=2000)


def test_out_of_range_with_reset_none_is_held_until_seek(broker, make_topic, send):
    topic = make_topic(partitions=1)
    send(topic, [{"partition": 0, "value": b"x%d" % i} for i in range(3)], each=True)
    c, t = _consumer(broker, code=1, auto_offset_reset="none")
    tp = TopicPartition(topic, 0)
    try:
        c.assign([tp])
        c.seek(tp, 0)
        t.until = time.monotonic() + HOLD_S
        start = time.monotonic()
        raised = 0
        while time.monotonic() - start < HOLD_S:
            try:
                c.poll(timeout_ms=100)
            except ke.OffsetOutOfRangeError as exc:
                raised += 1
                assert "seek()" in str(exc)
        rates = _rates(t.sent, time.monotonic() - start)
        assert raised > 10
        assert rates.get("Fetch", 0) <= MAX_PER_S, rates
        t.until = 0
        c.seek(tp, 1)  # the user's fix clears it
        deadline = time.monotonic() + 10
        records = []
        while time.monotonic() < deadline and not records:
            records = c.poll(timeout_ms=200).get(tp, [])
        assert [r.offset for r in records][:1] == [1]
    finally:
        c.close(timeout_ms=2000)


def test_out_of_range_with_reset_earliest_is_paced(broker, make_topic, send):
    topic = make_topic(partitions=1)
    send(topic, [{"partition": 0, "value": b"x"}])
    c, t = _consumer(broker, code=1)
    try:
        c.assign([TopicPartition(topic, 0)])
        t.until = time.monotonic() + HOLD_S
        start = time.monotonic()
        while time.monotonic() - start < HOLD_S:
            assert c.poll(timeout_ms=100) == {}
        rates = _rates(t.sent, time.monotonic() - start)
        assert rates.get("Fetch", 0) <= MAX_PER_S and rates.get("ListOffsets", 0) <= MAX_PER_S, rates
    finally:
        c.close(timeout_ms=2000)


def test_unknown_topic_is_paced(broker):
    c, t = _consumer(broker, allow_auto_create_topics=False)
    try:
        c.assign([TopicPartition("no-such-topic-here", 0)])
        start = time.monotonic()
        while time.monotonic() - start < HOLD_S / 2:
            assert c.poll(timeout_ms=100) == {}
        rates = _rates(t.sent, time.monotonic() - start)
        assert rates.get("Metadata", 0) <= MAX_PER_S, rates
        assert len(c._bg_queue) == 0
    finally:
        c.close(timeout_ms=2000)
