"""Incremental fetch sessions (KIP-227): FetchSession alone, then FetchManager driven sans-IO.

No broker, no threads: requests come out of poll(now), kafka-python FetchResponses go into the handlers.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse

from fsm_consumer._config import ConsumerConfig
from fsm_consumer._metrics import Metrics
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.fetch._buffer import FetchBuffer
from fsm_consumer.managers._fetch import FetchManager
from fsm_consumer.managers._fetch_session import FetchSession, PartitionData, next_epoch
from fsm_consumer.state import HeldErrors, SubscriptionState

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
PMAX = 1_048_576
HW = 1_000  # high watermark in answers: far above the positions, so nothing counts as caught up


def part(offset: int, leader_epoch: int = -1) -> PartitionData:
    return PartitionData(offset, leader_epoch, PMAX)


def answer(*parts, session_id: int = 0, error_code: int = 0, throttle_ms: int = 0) -> FetchResponse:
    """A v12 FetchResponse; ``parts`` are (tp, records) or (tp, records, error_code)."""
    topics: dict[str, list] = defaultdict(list)
    for tp, records, *err in parts:
        topics[tp.topic].append(
            FetchResponse.FetchableTopicResponse.PartitionData(
                partition_index=tp.partition,
                error_code=err[0] if err else 0,
                high_watermark=HW,
                last_stable_offset=HW,
                log_start_offset=0,
                records=records,
            )
        )
    return FetchResponse[12](
        throttle_time_ms=throttle_ms,
        error_code=error_code,
        session_id=session_id,
        responses=[FetchResponse.FetchableTopicResponse(topic=t, partitions=ps) for t, ps in topics.items()],
    )


# -- FetchSession alone ----------------------------------------------------------------------------


def opened(session_id: int = 42, parts=None) -> FetchSession:
    """A session the broker opened on a full fetch of ``parts``."""
    parts = parts or {T0: part(0), T1: part(0)}
    s = FetchSession(node=1)
    plan = s.build(parts)
    assert s.handle_response(answer(*((tp, b"") for tp in plan.session), session_id=session_id))
    return s


def test_first_fetch_is_full_and_a_session_id_opens_a_session():
    s = FetchSession(node=1)
    plan = s.build({T0: part(5), T1: part(7)})
    assert (plan.session_id, plan.epoch, plan.full) == (0, 0, True)
    assert plan.to_send == {T0: part(5), T1: part(7)} and plan.to_forget == []
    assert s.handle_response(answer((T0, b""), (T1, b""), session_id=42))
    assert (s.session_id, s.epoch, s.full) == (42, 1, False)


def test_incremental_lists_only_new_and_changed_and_forgets_the_rest():
    s = opened(parts={T0: part(0), T1: part(0), T2: part(0)})
    # T0 moved on, T1 is unchanged (implied), T2 is not fetchable this round, "v"-0 is new
    new = TopicPartition("v", 0)
    plan = s.build({T0: part(10), T1: part(0), new: part(3)})
    assert (plan.session_id, plan.epoch, plan.full) == (42, 1, False)
    assert plan.to_send == {new: part(3), T0: part(10)}  # Java's order: added, then altered
    assert plan.to_forget == [T2]
    assert set(plan.session) == {T0, T1, new}
    assert s.partitions == {T0: part(10), T1: part(0), new: part(3)}


def test_a_changed_leader_epoch_relists_the_partition():
    s = opened()
    plan = s.build({T0: part(0, leader_epoch=3), T1: part(0)})
    assert plan.to_send == {T0: part(0, leader_epoch=3)} and plan.to_forget == []


def test_nothing_changed_sends_an_empty_incremental_request():
    s = opened()
    plan = s.build({T0: part(0), T1: part(0)})
    assert (plan.full, plan.to_send, plan.to_forget) == (False, {}, [])
    assert set(plan.session) == {T0, T1}


def test_incremental_answers_bump_the_epoch_and_wrap_to_one():
    s = opened()
    for expected in (1, 2, 3):
        assert s.build({T0: part(0), T1: part(0)}).epoch == expected
        assert s.handle_response(answer(session_id=42))  # nothing new: every partition omitted
    assert s.epoch == 4
    assert next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1 and next_epoch(0) == 1


@pytest.mark.parametrize("code, session_id", [(70, 0), (71, 42), (7, 42)])
def test_top_level_errors_make_the_next_fetch_full(code, session_id):
    # 70: the broker has no such session; otherwise it is asked (session id, epoch 0) to drop it
    # and open a new one, as Java's nextCloseExistingAttemptNew does
    s = opened()
    s.build({T0: part(0), T1: part(0)})
    assert not s.handle_response(answer(session_id=42, error_code=code))
    plan = s.build({T0: part(4), T1: part(0)})
    assert (plan.session_id, plan.epoch, plan.full) == (session_id, 0, True)
    assert plan.to_send == {T0: part(4), T1: part(0)} and plan.to_forget == []


def test_a_request_failure_makes_the_next_fetch_full():
    s = opened()
    s.build({T0: part(0), T1: part(0)})
    s.handle_error()
    plan = s.build({T0: part(0)})
    assert (plan.session_id, plan.epoch, plan.to_send, plan.to_forget) == (42, 0, {T0: part(0)}, [])


def test_broker_without_sessions_gets_full_fetches_every_time():
    s = FetchSession(node=1)
    for _ in range(3):
        plan = s.build({T0: part(0), T1: part(0)})
        assert (plan.session_id, plan.epoch, plan.to_send) == (0, 0, {T0: part(0), T1: part(0)})
        assert s.handle_response(answer((T0, b""), session_id=0))  # omits T1: its data is still used
    assert s.full


def test_a_full_answer_that_is_not_the_whole_session_opens_none():
    s = FetchSession(node=1)
    s.build({T0: part(0), T1: part(0)})
    assert s.handle_response(answer((T0, b"x"), session_id=42))  # T1 omitted
    assert (s.session_id, s.epoch) == (0, 0)
    s.build({T0: part(0)})
    assert s.handle_response(answer(session_id=42, throttle_ms=100))  # KIP-219 throttled: empty
    assert (s.session_id, s.epoch) == (0, 0)


def test_incremental_answer_with_partitions_outside_the_session_is_refused():
    s = opened()
    s.build({T0: part(0), T1: part(0)})
    assert not s.handle_response(answer((T2, b"x"), session_id=42))
    assert (s.session_id, s.epoch) == (42, 0)


def test_the_broker_closing_the_session_makes_the_next_fetch_full():
    s = opened()
    s.build({T0: part(0), T1: part(0)})
    assert s.handle_response(answer((T0, b"x"), session_id=0))
    assert (s.session_id, s.epoch) == (0, 0)


# -- FetchManager, sans-IO -----------------------------------------------------------------------


class Metadata:
    def __init__(self, leaders: dict) -> None:
        self.leaders = dict(leaders)
        self.epochs: dict = {}
        self.updates: list = []

    def leader(self, tp):
        return self.leaders.get(tp)

    def leader_epoch(self, tp):
        return self.epochs.get(tp, -1)

    def request_update(self, topics=None):
        self.updates.append(topics)


class Rig:
    def __init__(self, *, sessions: bool = True, leaders=None, positions=None) -> None:
        self.config = ConsumerConfig.from_kwargs(
            bootstrap_servers="127.0.0.1:1", enable_incremental_fetch_sessions=sessions
        )
        self.subs = SubscriptionState()
        positions = positions or {T0: 0, T1: 0}
        self.subs.assign(list(positions))
        for tp, offset in positions.items():
            self.subs.seek(tp, offset)
        self.metadata = Metadata(leaders or {tp: 1 for tp in positions})
        self.buffer = FetchBuffer(self.config.fetch_buffer_max_bytes, lambda: None)
        self.held = HeldErrors()
        self.metrics = Metrics()
        self.manager = FetchManager(self.config, self.subs, self.metadata, self.buffer, self.held, self.metrics)
        self.now = 1_000.0

    def poll(self) -> dict:
        _, out = self.manager.poll(self.now)
        return {o.node: o for o in out}

    def only(self, node: int = 1):
        out = self.poll()
        assert set(out) == {node}, out
        return out[node]

    def complete(self, outgoing, response=None, error=None) -> None:
        outgoing.handler(SimpleNamespace(error=error, response=response), self.now)

    def drain(self, positions: dict) -> None:
        """What the application thread does: take the buffered data, move on, release the partitions."""
        while (f := self.buffer.pop()) is not None:
            self.buffer.done(f)
            self.subs.advance(f.tp, f.epoch, positions[f.tp], -1)
            self.subs.release_fetch(f.tp, f.epoch, to_back=True)


def listed(o) -> dict:
    req: FetchRequest = o.request
    return {TopicPartition(t.topic, p.partition): p.fetch_offset for t in req.topics for p in t.partitions}


def forgotten(o) -> set:
    return {TopicPartition(t.topic, p) for t in o.request.forgotten_topics_data for p in t.partitions}


def leader_epochs(o) -> dict:
    return {
        TopicPartition(t.topic, p.partition): p.current_leader_epoch for t in o.request.topics for p in t.partitions
    }


def meta(o) -> tuple:
    return o.request.session_id, o.request.session_epoch, o.min_version


def test_manager_opens_a_session_then_lists_only_moved_partitions():
    rig = Rig()
    first = rig.only()
    assert meta(first) == (0, 0, 4) and listed(first) == {T0: 0, T1: 0}
    rig.complete(first, answer((T0, b"r" * 10), (T1, b""), session_id=42))
    assert len(rig.buffer) == 1  # T0's data buffered; T1 released: fetch again
    # T0's data is buffered: it is not fetchable this round, so the session forgets it (as Java does)
    second = rig.only()
    assert meta(second) == (42, 1, 7)
    assert listed(second) == {} and forgotten(second) == {T0}
    rig.complete(second, answer(session_id=42))  # nothing new for T1: omitted
    rig.drain({T0: 25})
    third = rig.only()
    assert meta(third) == (42, 2, 7)
    assert listed(third) == {T0: 25} and forgotten(third) == set()  # T1 unchanged: implied
    rig.complete(third, answer((T1, b"s" * 4), session_id=42))  # data for the implied T1
    (f,) = [rig.buffer.pop()]
    assert (f.tp, f.fetch_offset) == (T1, 0)
    assert rig.metrics.fetch_requests == 3 and rig.metrics.fetch_incremental == 2


def test_omitted_partitions_are_fetched_again():
    rig = Rig()
    rig.complete(rig.only(), answer((T0, b""), (T1, b""), session_id=42))
    o = rig.only()
    rig.complete(o, answer(session_id=42))
    assert {tp for tp, *_ in rig.subs.fetchable()} == {T0, T1}
    o = rig.only()
    assert meta(o) == (42, 2, 7) and listed(o) == {} and forgotten(o) == set()


def test_unassigned_and_paused_partitions_are_forgotten():
    rig = Rig(positions={T0: 0, T1: 0, T2: 0})
    rig.complete(rig.only(), answer((T0, b""), (T1, b""), (T2, b""), session_id=42))
    rig.subs.assign([T0, T1])  # T2 unassigned
    rig.subs.set_paused([T1], True)
    o = rig.only()
    assert listed(o) == {} and forgotten(o) == {T1, T2}
    rig.complete(o, answer(session_id=42))
    rig.subs.set_paused([T1], False)
    o = rig.only()
    assert listed(o) == {T1: 0} and forgotten(o) == set()  # back in the session: listed again


def test_a_moved_leader_is_forgotten_by_the_old_node():
    rig = Rig()
    rig.complete(rig.only(), answer((T0, b""), (T1, b""), session_id=42))
    rig.metadata.leaders[T1] = 2
    out = rig.poll()
    assert listed(out[1]) == {} and forgotten(out[1]) == {T1}
    assert meta(out[2]) == (0, 0, 4) and listed(out[2]) == {T1: 0}


@pytest.mark.parametrize("code, next_id", [(70, 0), (71, 42)])
def test_session_errors_reset_to_a_full_fetch_without_backoff(code, next_id):
    rig = Rig()
    rig.complete(rig.only(), answer((T0, b""), (T1, b""), session_id=42))
    rig.complete(rig.only(), answer(error_code=code))
    o = rig.only()  # no retry backoff: sent at once
    assert meta(o) == (next_id, 0, 7 if next_id else 4)
    assert listed(o) == {T0: 0, T1: 0} and forgotten(o) == set()


def test_a_request_failure_resets_to_a_full_fetch():
    rig = Rig()
    rig.complete(rig.only(), answer((T0, b""), (T1, b""), session_id=42))
    rig.complete(rig.only(), error=TimeoutError("no answer"))
    assert rig.poll() == {}  # backing off the node
    rig.now += rig.config.retry_backoff_ms * 1.2 + 1  # the first backoff, at most +20% jitter
    o = rig.only()
    assert meta(o) == (42, 0, 7) and listed(o) == {T0: 0, T1: 0}


def test_a_broker_without_sessions_keeps_full_fetches():
    rig = Rig()
    for _ in range(3):
        o = rig.only()
        assert meta(o) == (0, 0, 4) and listed(o) == {T0: 0, T1: 0} and forgotten(o) == set()
        rig.complete(o, answer((T0, b""), (T1, b""), session_id=0))
    assert rig.metrics.fetch_incremental == 0


def test_sessions_off_sends_sessionless_full_fetches():
    rig = Rig(sessions=False)
    for _ in range(2):
        o = rig.only()
        assert meta(o) == (0, -1, 4) and listed(o) == {T0: 0, T1: 0} and forgotten(o) == set()
        rig.complete(o, answer((T0, b""), (T1, b""), session_id=42))  # a broker offering one anyway
    assert rig.metrics.fetch_incremental == 0


@pytest.mark.parametrize("version", [7, 12])
def test_incremental_request_encodes(version):
    rig = Rig(positions={T0: 0, T1: 0, T2: 0})
    rig.complete(rig.only(), answer((T0, b""), (T1, b""), (T2, b""), session_id=42))
    rig.subs.seek(T0, 9)
    rig.subs.set_paused([T2], True)
    o = rig.only()
    back = FetchRequest.decode(o.request.encode(version=version), version=version)
    assert (back.session_id, back.session_epoch) == (42, 1)
    assert listed(SimpleNamespace(request=back)) == {T0: 9}
    assert forgotten(SimpleNamespace(request=back)) == {T2}


@pytest.mark.parametrize("sessions", [True, False])
def test_current_leader_epoch_is_the_metadatas_not_the_last_records(sessions):
    """A Fetch names the leader's epoch as the metadata knows it. The epoch of the last record consumed (the
    position's, which commits carry) would be fenced for ever once the leader's epoch moves on (a broker
    restarted: Apache Kafka bumps it), as it did before: no record fetched again after a Kafka restart."""
    rig = Rig(sessions=sessions, positions={T0: 0})
    rig.subs.advance(T0, rig.subs.fetchable()[0][3], 10, 3)  # consumed up to 10 from records of epoch 3
    rig.metadata.epochs[T0] = 3
    first = rig.only()
    assert listed(first) == {T0: 10} and leader_epochs(first) == {T0: 3}
    rig.complete(first, answer((T0, b"", 74), session_id=42))  # FENCED_LEADER_EPOCH: the broker restarted
    rig.metadata.epochs[T0] = 4  # what the Metadata answer asked for says
    assert rig.metadata.updates == [{"t"}]  # ask for metadata again
    rig.now += 10_000  # past the partition's backoff
    second = rig.only()
    assert listed(second) == {T0: 10} and leader_epochs(second) == {T0: 4}
    assert rig.subs.consumed_offsets()[T0].leader_epoch == 3  # the position keeps its record's epoch (commits)


def test_a_fetch_asks_for_no_more_than_its_partitions_limits_allow():
    # Tansu 0.6 ignores partition_max_bytes: a request for fetch_max_bytes (50 MiB) came back as one answer
    # filling the buffer, and the next Fetch waited until the application had drained it
    rig = Rig(sessions=False)
    o = rig.only()
    pmax = rig.config.max_partition_fetch_bytes
    assert o.request.max_bytes == 2 * pmax < rig.config.fetch_max_bytes
    assert {p.partition_max_bytes for t in o.request.topics for p in t.partitions} == {pmax}
