"""OffsetsManager under the error policy, driven sans-IO: a fake ``now`` and kafka-python ListOffsets
answers. Retriable codes back off per partition (exponential, capped); TOPIC_AUTHORIZATION_FAILED on a
reset is held for the topic, not sent again while held, and fails the lookups waiting on the topic."""

from __future__ import annotations

from types import SimpleNamespace

import kafka.errors as ke
import pytest
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from fsm_consumer._config import ConsumerConfig
from fsm_consumer.events import ListOffsetsEvent
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.managers import OffsetsManager
from fsm_consumer.state import HeldErrors, SubscriptionState

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
RTT = 2.0


class Metadata:
    def __init__(self):
        self.updates = 0

    def leader(self, tp):
        return 1

    def request_update(self, topics=None, **kw):
        self.updates += 1

    def explain_missing(self, tp):
        return "no leader"


class Rig:
    def __init__(self, reset="earliest"):
        self.config = ConsumerConfig.from_kwargs(bootstrap_servers="127.0.0.1:1", auto_offset_reset=reset)
        self.subs = SubscriptionState(reset)
        self.metadata = Metadata()
        self.held = HeldErrors()
        self.offsets = OffsetsManager(self.config, self.subs, self.metadata, [], self.held)
        self.now = 0.0
        self.sent: list[tuple[float, ListOffsetsRequest]] = []

    def run(self, until: float, code) -> None:
        """Poll and answer every ListOffsets after RTT with ``code(tp)`` for each partition (offset 0)."""
        while self.now <= until:
            wait, out = self.offsets.poll(self.now)
            for o in out:
                self.sent.append((self.now, o.request))
            if out:
                self.now += RTT
                for o in out:
                    o.handler(SimpleNamespace(error=None, response=answer(o.request, code), sent_to=1), self.now)
                continue
            if self.now == until:
                return
            self.now = min(until, self.now + max(1.0, min(wait, 5_000.0)))

    def asked(self, tp) -> int:
        return sum(
            any(t.name == tp.topic and any(p.partition_index == tp.partition for p in t.partitions) for t in r.topics)
            for _, r in self.sent
        )

    def lookup(self, *tps, ts=-2) -> ListOffsetsEvent:
        event = ListOffsetsEvent(timestamps={tp: ts for tp in tps}, deadline_ms=60_000)
        self.offsets.add_event(event, self.now)
        return event


def answer(request, code):
    R = ListOffsetsResponse
    return R(
        throttle_time_ms=0,
        topics=[
            R.ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=code(TopicPartition(t.name, p.partition_index)),
                        timestamp=-1,
                        offset=0 if not code(TopicPartition(t.name, p.partition_index)) else -1,
                        leader_epoch=-1,
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def test_reset_answered_topic_authorization_failed_is_held_and_not_sent_again():
    rig = Rig()
    rig.subs.assign([T0, T1, U0])
    rig.subs.request_reset([T0, T1, U0], "earliest")
    waiting = rig.lookup(T1, ts=1234)  # offsets_for_times on the topic, waiting meanwhile
    rig.run(10_000.0, lambda tp: 29 if tp.topic == "t" else 0)
    assert rig.asked(T0) == 1 and rig.asked(T1) <= 2  # the lookup may have gone out with the reset
    assert rig.held.holds(("topic", "t"))
    with pytest.raises(ke.TopicAuthorizationFailedError, match="topic 't' failed: grant this principal READ"):
        rig.held.raise_first()
    with pytest.raises(ke.TopicAuthorizationFailedError, match="grant this principal READ"):
        waiting.future.result()
    assert rig.subs.positions() == {U0: 0}  # the other topic was reset meanwhile
    late = rig.lookup(T0)  # a new lookup on the held topic fails at once, unsent
    sent = len(rig.sent)
    rig.run(10_100.0, lambda tp: 29)
    assert len(rig.sent) == sent and late.future.done
    with pytest.raises(ke.TopicAuthorizationFailedError):
        late.future.result()


def test_the_hold_goes_once_nothing_needs_the_reset():
    rig = Rig()
    rig.subs.assign([T0])
    rig.subs.request_reset([T0], "earliest")
    rig.run(1_000.0, lambda tp: 29)
    assert rig.held.holds(("topic", "t"))
    rig.subs.seek(T0, 5)  # the user acted
    rig.run(1_100.0, lambda tp: 29)
    assert not rig.held.holds(("topic", "t")) and rig.asked(T0) == 1


def test_released_elsewhere_the_reset_goes_again_after_its_backoff():
    rig = Rig()
    rig.subs.assign([T0])
    rig.subs.request_reset([T0], "earliest")
    rig.run(1_000.0, lambda tp: 29)
    rig.held.release(("topic", "t"))  # a Metadata answer found the topic authorized
    rig.run(2_000.0, lambda tp: 0)
    assert rig.asked(T0) == 2 and rig.subs.positions() == {T0: 0} and not rig.held.holds(("topic", "t"))


@pytest.mark.parametrize("code", [6, 15, 7])  # NOT_LEADER (metadata), a retriable one, a timeout
def test_retriable_reset_errors_are_paced_per_partition(code):
    rig = Rig()
    rig.subs.assign([T0, U0])
    rig.subs.request_reset([T0, U0], "earliest")
    rig.run(10_000.0, lambda tp: code if tp == T0 else 0)
    assert 5 <= rig.asked(T0) <= 20, rig.asked(T0)  # <= ~10/s, fewer as the backoff grows
    assert rig.asked(U0) == 1 and rig.subs.positions() == {U0: 0}
    times = [t for t, r in rig.sent if any(t_.name == "t" for t_ in r.topics)]
    assert all(800 <= b - a <= 1200 + RTT for a, b in zip(times[5:], times[6:], strict=False))  # capped at 1 s
    if code == 6:
        assert rig.metadata.updates >= rig.asked(T0)
    assert not rig.held.holds(("topic", "t"))
    rig.run(12_000.0, lambda tp: 0)
    assert rig.subs.positions() == {T0: 0, U0: 0}


def test_a_lookup_answered_topic_authorization_failed_fails_at_once_and_is_not_retried():
    rig = Rig()
    event = rig.lookup(T0, U0, ts=-1)
    rig.run(5_000.0, lambda tp: 29 if tp == T0 else 0)
    assert len(rig.sent) == 1
    with pytest.raises(ke.TopicAuthorizationFailedError, match="ListOffsets for t-0 failed: grant"):
        event.future.result()
    assert not rig.held.holds(("topic", "t"))  # the caller got it; the consumer does not read the topic


def test_a_lookup_with_retriable_errors_backs_off_then_completes():
    rig = Rig()
    event = rig.lookup(T0, ts=1234)
    rig.run(3_000.0, lambda tp: 6)
    assert 3 <= len(rig.sent) <= 8 and not event.future.done
    assert "NotLeaderForPartitionError" in event.cause or "NotLeaderOrFollower" in event.cause
    rig.run(5_000.0, lambda tp: 0)
    assert event.future.done
