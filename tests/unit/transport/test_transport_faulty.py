"""FaultyTransport's bookkeeping over a scripted inner transport and a fake clock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from fsm_consumer.machines import FakeClock
from fsm_consumer.transport import (
    ConnectionLost,
    FaultyTransport,
    Pending,
    ProtocolDecodeError,
    RequestTimedOut,
    Transport,
)
from fsm_consumer.transport._faulty import set_error_codes


class ScriptedTransport(Transport):
    """Completes every request on the next poll with ``answer(request)``, as node 1."""

    def __init__(self, clock: FakeClock, answer) -> None:
        self.clock = clock
        self.answer = answer
        self.pending: list[Pending] = []
        self.disconnected: list[int] = []
        self.closed = False

    def send(self, request, node=None, *, timeout_ms=None, tag=None, min_version=0, max_version=None) -> Pending:
        p = Pending(request, node, self.clock.now_ms() + (timeout_ms or 1000), tag, min_version, max_version)
        self.pending.append(p)
        return p

    def poll(self, timeout_ms: float) -> list[Pending]:
        done, self.pending = self.pending, []
        for p in done:
            p.sent_to = 1 if p.node is None else p.node
            request = p.request
            request.API_VERSION = 12
            p.response, p.done = self.answer(request), True
        return done

    def wakeup(self) -> None: ...
    def update_brokers(self, brokers: Mapping[int, tuple[str, int]]) -> None: ...
    def ready(self, node: int) -> bool:
        return True

    def least_loaded_node(self) -> int | None:
        return 1

    def disconnect(self, node: int) -> None:
        self.disconnected.append(node)

    def next_wakeup_ms(self) -> float | None:
        return None

    def close(self) -> None:
        self.closed = True


def metadata_answer(request: Any) -> MetadataResponse:
    topic = MetadataResponse.MetadataResponseTopic
    part = topic.MetadataResponsePartition(
        error_code=0,
        partition_index=0,
        leader_id=1,
        leader_epoch=0,
        replica_nodes=[1],
        isr_nodes=[1],
        offline_replicas=[],
    )
    return MetadataResponse[12](
        throttle_time_ms=0,
        brokers=[],
        cluster_id="c",
        controller_id=1,
        topics=[topic(error_code=0, name="t", partitions=[part, part])],
    )


@pytest.fixture
def setup():
    clock = FakeClock()
    inner = ScriptedTransport(clock, metadata_answer)
    return clock, inner, FaultyTransport(inner, request_timeout_ms=1000)


def request() -> MetadataRequest:
    return MetadataRequest(topics=None, allow_auto_topic_creation=False)


def test_latency_hides_the_answer_until_released(setup):
    clock, inner, faulty = setup
    faulty.add_latency(1, 200)
    p = faulty.send(request(), 1)
    assert faulty.poll(0) == [] and not p.done and p.response is None and p.sent_to == 1
    assert faulty.next_wakeup_ms() == 200
    clock.advance(199)
    assert faulty.poll(0) == []
    clock.advance(1)
    assert faulty.poll(0) == [p] and p.done and p.error is None and p.response.topics[0].name == "t"


def test_delay_holds_back_the_next_answers_of_one_api_only(setup):
    clock, inner, faulty = setup
    faulty.delay("Metadata", 200, times=1)
    held, prompt = faulty.send(request(), 1), faulty.send(request(), 1)
    assert faulty.poll(0) == [prompt] and not held.done  # the rule was used up by the first answer
    clock.advance(200)
    assert faulty.poll(0) == [held] and held.error is None and held.response.topics[0].name == "t"


def test_latency_past_the_deadline_is_a_timeout_at_the_deadline(setup):
    clock, inner, faulty = setup
    faulty.add_latency(None, 5000)
    p = faulty.send(request(), timeout_ms=300)
    faulty.poll(0)
    clock.advance(300)
    assert faulty.poll(0) == [p] and isinstance(p.error, RequestTimedOut) and p.response is None


def test_blackhole_holds_without_sending_and_clear_does_not_release(setup):
    clock, inner, faulty = setup
    faulty.blackhole(1)
    p = faulty.send(request(), 1, timeout_ms=500)
    unrouted = faulty.send(request())  # resolved to the least-loaded node, which is 1
    assert inner.pending == []
    faulty.clear()
    clock.advance(500)
    assert faulty.poll(0) == [p]
    clock.advance(500)
    assert faulty.poll(0) == [unrouted]
    assert all(isinstance(x.error, RequestTimedOut) for x in (p, unrouted))
    assert faulty.injected["blackhole"] == 2


def test_fail_sets_nested_error_codes_a_limited_number_of_times(setup):
    _, _, faulty = setup
    faulty.fail(MetadataRequest, 5, times=1, node=1)
    first, second = faulty.send(request(), 1), faulty.send(request(), 1)
    faulty.poll(0)
    assert {p.error_code for p in first.response.topics[0].partitions} == {5}
    assert first.response.topics[0].error_code == 5
    assert second.response.topics[0].error_code == 0
    assert set_error_codes(FetchResponse[12](responses=[]), 1) == 1  # only the top-level field


def test_corrupt_frame_that_no_longer_decodes(setup):
    _, inner, faulty = setup
    faulty.corrupt("Metadata", lambda body: body + b"trailing garbage")
    p = faulty.send(request(), 1)
    assert faulty.poll(0) == [p]
    assert isinstance(p.error, ProtocolDecodeError) and p.response is None
    assert "corrupted" in str(p.error) and p.error.node_id == 1
    assert inner.disconnected == [1]


def test_corrupt_frame_that_still_decodes_replaces_the_response(setup):
    _, inner, faulty = setup
    faulty.corrupt("Metadata", lambda body: body.replace(b"\x02t", b"\x02u"))  # compact string "t" -> "u"
    p = faulty.send(request(), 1)
    faulty.poll(0)
    assert p.error is None and p.response.topics[0].name == "u" and inner.disconnected == []


def test_corrupt_rejects_unknown_targets_and_close_fails_held(setup):
    _, inner, faulty = setup
    with pytest.raises(ValueError):
        faulty.corrupt("Fetch", bytes, target="everything")  # type: ignore[arg-type]
    faulty.add_latency(None, 100)
    p = faulty.send(request())
    faulty.poll(0)
    faulty.close()
    assert inner.closed and p.done and isinstance(p.error, ConnectionLost)
