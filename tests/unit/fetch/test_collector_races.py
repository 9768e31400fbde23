"""Races between the application thread (the collector handing out fetched records) and the
background thread (revocations, reassignments, resets, the session lease), on a fake clock.

Each interleaving is reproduced by calling the two sides' operations in the racing order, no
threads: a SubscriptionState whose ``take``/``reset_if_at`` first runs the other thread's step
stands for that thread getting the CPU between a check without the lock and the locked step.
One stress test at the end runs both sides on real threads and checks the invariants.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import defaultdict
from types import SimpleNamespace

from kafka.protocol.consumer import FetchResponse

from fsm_consumer._config import ConsumerConfig
from fsm_consumer._metrics import Metrics
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.fetch._buffer import CompletedFetch, FetchBuffer
from fsm_consumer.fetch._collector import FetchCollector
from fsm_consumer.fetch.testing import batch
from fsm_consumer.machines import FakeClock
from fsm_consumer.managers._fetch import FetchManager
from fsm_consumer.state import HeldErrors, SubscriptionState

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
OFFSET_OUT_OF_RANGE = 1


class Interleaved(SubscriptionState):
    """Runs the steps queued in ``before`` (the other thread's) just before the next take or reset."""

    def __init__(self, default_reset: str = "latest") -> None:
        super().__init__(default_reset)
        self.before: list = []

    def _other_thread(self) -> None:
        while self.before:
            self.before.pop(0)()

    def take(self, *args, **kwargs):
        self._other_thread()
        return super().take(*args, **kwargs)

    def reset_if_at(self, *args, **kwargs):
        self._other_thread()
        return super().reset_if_at(*args, **kwargs)


def revoke(subs: SubscriptionState, tp: TopicPartition) -> int:
    """The background thread's revocation of ``tp``: no more records, the position committed, gone.
    Returns the committed offset."""
    subs.set_revoking([tp], True)
    committed = subs.consumed_offsets()[tp].offset
    subs.set_group_assignment(subs.assignment() - {tp})
    return committed


def reassign(subs: SubscriptionState, tp: TopicPartition, committed: int) -> None:
    subs.set_group_assignment(subs.assignment() | {tp})
    subs.set_committed_position(tp, committed)


class Rig:
    """A group member's subscription (positions from committed offsets), a buffer and a collector."""

    def __init__(self, positions=None, subs=None) -> None:
        self.clock = FakeClock(1_000.0)
        self.subs = subs if subs is not None else Interleaved()
        positions = positions or {T0: 0}
        self.subs.set_group_assignment(list(positions))
        for tp, offset in positions.items():
            self.subs.set_committed_position(tp, offset)
        self.buffer = FetchBuffer(1 << 20, lambda: None)
        self.wakes = 0
        self.collector = FetchCollector(
            ConsumerConfig.from_kwargs(), self.subs, self.buffer, self._wake, Metrics(), self.clock
        )

    def _wake(self) -> None:
        self.wakes += 1

    def fetch(self, tp: TopicPartition = T0, n: int = 5) -> CompletedFetch:
        """The fetch manager's part: ``n`` records at the partition's position, under its epoch."""
        ((_, position, _, epoch),) = [f for f in self.subs.fetchable() if f[0] == tp]
        self.subs.fetch_sent([(tp, epoch)])
        self.subs.fetch_answered(tp, epoch, position + n)
        data = batch([b"%d" % (position + i) for i in range(n)], base_offset=position)
        fetch = CompletedFetch(tp, position, epoch, data, position + n, position + n, 0, None, len(data))
        self.buffer.add([fetch], 0)
        return fetch

    def offsets(self, out) -> dict:
        return {tp: [r.offset for r in records] for tp, records in out.items()}

    def stale(self) -> tuple[int, int]:
        return self.collector.stale_fetches, self.collector.stale_records

    def fetchable(self) -> set:
        return {tp for tp, *_ in self.subs.fetchable()}


# -- (a) revoked (epoch changed) between the fetch and the hand-out ---------------------------------


def test_revoked_before_the_collector_looks_hands_out_nothing():
    rig = Rig()
    rig.fetch(T0, 5)
    committed = revoke(rig.subs, T0)
    assert rig.collector.collect(100) == {}
    assert committed == 0 and rig.stale() == (1, 0)  # dropped before decoding
    reassign(rig.subs, T0, committed)
    assert rig.subs.positions() == {T0: 0}
    rig.fetch(T0, 5)
    assert rig.offsets(rig.collector.collect(100)) == {T0: [0, 1, 2, 3, 4]}  # once, after the reassignment


def test_revoked_between_the_unlocked_look_and_the_take_hands_out_nothing():
    """The collector's look without the lock sees the old epoch; the revocation lands before the take."""
    rig = Rig(positions={T0: 0, T1: 10})
    rig.fetch(T0, 5)
    rig.fetch(T1, 3)
    committed = []
    rig.subs.before.append(lambda: committed.append(revoke(rig.subs, T0)))
    out = rig.collector.collect(100)
    assert rig.offsets(out) == {T1: [10, 11, 12]}  # nothing of T0 reached the user
    assert committed == [0] and rig.stale() == (1, 5)  # counted: one fetch, its 5 decoded records
    reassign(rig.subs, T0, committed[0])
    assert T0 in rig.fetchable()  # fetched again from the committed offset
    rig.fetch(T0, 5)
    assert rig.offsets(rig.collector.collect(100)) == {T0: [0, 1, 2, 3, 4]}


def test_revoked_while_a_fetch_is_half_handed_out():
    rig = Rig()
    rig.fetch(T0, 5)
    assert rig.offsets(rig.collector.collect(2)) == {T0: [0, 1]}
    committed = revoke(rig.subs, T0)
    assert committed == 2  # the commit covers exactly what was handed out
    assert rig.collector.collect(100) == {} and rig.stale() == (1, 3)


def test_iterator_path_checks_every_record_and_counts_what_it_drops():
    """collect(advance=False) lends records under the same check; take_record hands each out, moving
    the position atomically; a revocation in between stops the rest."""
    rig = Rig()
    rig.fetch(T0, 5)
    (records,) = rig.collector.collect(100, advance=False).values()
    assert rig.subs.positions() == {T0: 0}  # lent: the position has not moved
    assert rig.collector.take_record(T0, records[0]) and rig.collector.take_record(T0, records[1])
    assert rig.subs.positions() == {T0: 2}
    committed = revoke(rig.subs, T0)
    assert not rig.collector.take_record(T0, records[2])
    assert committed == 2 and rig.stale() == (0, 3)
    assert rig.collector.collect(100, advance=False) == {}
    assert rig.stale() == (1, 3)  # the fetch itself went when next looked at


def test_lending_is_checked_too_revoked_before_the_check_lends_nothing():
    rig = Rig()
    rig.fetch(T0, 5)
    rig.subs.before.append(lambda: revoke(rig.subs, T0))
    assert rig.collector.collect(100, advance=False) == {}
    assert rig.stale() == (1, 5)


def test_a_fetch_from_an_earlier_assignment_never_matches_a_later_one():
    """Unassigned and assigned again at the committed offset the old fetch started at: the old
    fetch is dropped (epochs never repeat for a partition), the new one is handed out."""
    rig = Rig(positions={T0: 7})
    old = rig.fetch(T0, 3)
    committed = revoke(rig.subs, T0)
    reassign(rig.subs, T0, committed)
    new = rig.fetch(T0, 3)
    assert new.fetch_offset == old.fetch_offset == 7 and new.epoch > old.epoch
    assert rig.offsets(rig.collector.collect(100)) == {T0: [7, 8, 9]}
    assert rig.stale() == (1, 0) and rig.subs.positions() == {T0: 10}


# -- (b) unassigned between the fetch manager's send and its reset ----------------------------------


class Metadata:
    def leader(self, tp):
        return 1

    def leader_epoch(self, tp):
        return -1

    def request_update(self, topics=None):
        pass


def out_of_range(tp: TopicPartition) -> FetchResponse:
    part = FetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=tp.partition,
        error_code=OFFSET_OUT_OF_RANGE,
        high_watermark=0,
        last_stable_offset=0,
        log_start_offset=0,
        records=b"",
    )
    return FetchResponse[12](
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[FetchResponse.FetchableTopicResponse(topic=tp.topic, partitions=[part])],
    )


def fetch_manager(reset: str = "earliest"):
    subs = Interleaved(default_reset=reset)
    subs.assign([T0, T1])
    subs.seek(T0, 50)
    subs.seek(T1, 0)
    config = ConsumerConfig.from_kwargs(
        bootstrap_servers="127.0.0.1:1", enable_incremental_fetch_sessions=False, auto_offset_reset=reset
    )
    held = HeldErrors()
    manager = FetchManager(config, subs, Metadata(), FetchBuffer(1 << 20, lambda: None), held, Metrics())
    _, (outgoing,) = manager.poll(1_000.0)
    return subs, held, outgoing


def answer(outgoing, response) -> None:
    outgoing.handler(SimpleNamespace(error=None, response=response), 1_000.0)


def test_reset_after_out_of_range_when_nothing_changed():
    subs, _, outgoing = fetch_manager()
    answer(outgoing, out_of_range(T0))
    assert subs.needing_reset() == {T0: "earliest"}


def test_unassigned_between_the_answer_and_the_reset_neither_raises_nor_resets():
    subs, _, outgoing = fetch_manager()
    subs.before.append(lambda: subs.assign([T1]))  # the application thread, at the worst moment
    answer(outgoing, out_of_range(T0))  # on the background thread: must not raise
    assert subs.assignment() == {T1} and subs.needing_reset() == {}


def test_sought_between_the_send_and_the_answer_keeps_the_seek():
    subs, _, outgoing = fetch_manager()
    subs.seek(T0, 50)  # the same offset: the user's seek still wins
    answer(outgoing, out_of_range(T0))
    assert subs.needing_reset() == {} and subs.positions()[T0] == 50


def test_no_reset_policy_holds_the_error_only_for_the_unchanged_partition():
    subs, held, outgoing = fetch_manager(reset="none")
    answer(outgoing, out_of_range(T0))
    assert held.holds(("partition", T0))
    for change in (lambda s: s.assign([T1]), lambda s: s.seek(T0, 50)):
        subs, held, outgoing = fetch_manager(reset="none")
        change(subs)  # unassigned, or sought (to the same offset)
        answer(outgoing, out_of_range(T0))
        assert len(held) == 0 and subs.needing_reset() == {}


# -- (c) the session lease -------------------------------------------------------------------------------


def test_nothing_is_handed_out_past_the_lease_and_the_data_waits_for_a_new_one():
    rig = Rig()
    rig.subs.lease_until = 2_000.0
    rig.fetch(T0, 5)
    assert rig.offsets(rig.collector.collect(2)) == {T0: [0, 1]}
    rig.clock.set(2_000.0)  # the session ran out
    wakes = rig.wakes
    assert rig.collector.collect(100) == {} and rig.collector.collect(100, advance=False) == {}
    assert rig.subs.positions() == {T0: 2} and rig.wakes > wakes  # the background thread is told
    assert rig.stale() == (0, 0)  # not stale: kept
    rig.subs.lease_until = 12_000.0  # renewed by a heartbeat
    assert rig.offsets(rig.collector.collect(100)) == {T0: [2, 3, 4]}
    assert rig.subs.positions() == {T0: 5}


def test_lease_running_out_during_a_collect_stops_the_hand_out_there():
    """Checked at the take, not only when collect() starts: decoding takes time."""
    rig = Rig()
    rig.subs.lease_until = 2_000.0
    rig.fetch(T0, 5)
    decode = rig.collector._decode

    def slow_decode(*args, **kwargs):
        decoded = decode(*args, **kwargs)
        rig.clock.set(2_500.0)  # the session ran out meanwhile
        return decoded

    rig.collector._decode = slow_decode
    assert rig.collector.collect(100) == {}
    assert rig.subs.positions() == {T0: 0} and rig.stale() == (0, 0)
    rig.subs.lease_until = float("inf")  # the background thread settled it: still ours
    assert rig.offsets(rig.collector.collect(100)) == {T0: [0, 1, 2, 3, 4]}


def test_iterator_stops_at_the_lease_and_goes_on_from_the_position_after_renewal():
    rig = Rig()
    rig.subs.lease_until = 2_000.0
    rig.fetch(T0, 5)
    (records,) = rig.collector.collect(100, advance=False).values()
    assert rig.collector.take_record(T0, records[0])
    rig.clock.set(2_000.0)
    assert not rig.collector.take_record(T0, records[1])
    assert rig.subs.positions() == {T0: 1} and rig.stale() == (0, 0)
    rig.subs.lease_until = 9_000.0
    (records,) = rig.collector.collect(100, advance=False).values()
    assert [r.offset for r in records] == [1, 2, 3, 4]  # lent again from the position


# -- (d) seek between the fetch and the take ---------------------------------------------------------------


def test_seek_between_fetch_and_take_drops_the_fetched_data():
    rig = Rig()
    rig.fetch(T0, 5)
    rig.subs.seek(T0, 3)
    assert rig.collector.collect(100) == {}
    assert rig.subs.positions() == {T0: 3} and rig.stale() == (1, 0)
    rig.fetch(T0, 2)
    assert rig.offsets(rig.collector.collect(100)) == {T0: [3, 4]}


def test_seek_between_the_unlocked_look_and_the_take_wins():
    rig = Rig()
    rig.fetch(T0, 5)
    rig.subs.before.append(lambda: rig.subs.seek(T0, 0))  # back to where the data starts, yet a new epoch
    assert rig.collector.collect(100) == {}
    assert rig.subs.positions() == {T0: 0} and rig.stale() == (1, 5)
    assert T0 in rig.fetchable()


def test_seek_back_while_half_handed_out():
    rig = Rig()
    rig.fetch(T0, 5)
    assert rig.offsets(rig.collector.collect(3)) == {T0: [0, 1, 2]}
    rig.subs.seek(T0, 1)
    assert rig.collector.collect(100) == {} and rig.stale() == (1, 2)
    assert rig.subs.positions() == {T0: 1}
    rig.fetch(T0, 4)
    assert rig.offsets(rig.collector.collect(100)) == {T0: [1, 2, 3, 4]}


# -- two real threads ------------------------------------------------------------------------------------


def test_stress_take_against_revoke_and_reassign():
    """The application thread collects (poll and iterator style) while the background thread fetches,
    revokes and reassigns partitions for about half a second. Invariants: every record is handed out
    exactly once in offset order, positions follow exactly what was handed out and never go back,
    nothing fetched before a revocation is handed out past its commit, no partition is left stuck."""
    tps = [TopicPartition("s", i) for i in range(3)]
    subs = SubscriptionState(fetch_ahead=True)  # two fetches of a partition buffered at times
    subs.set_group_assignment(tps)
    for tp in tps:
        subs.set_committed_position(tp, 0)
    buffer = FetchBuffer(1 << 22, lambda: None)
    collector = FetchCollector(ConsumerConfig.from_kwargs(), subs, buffer, lambda: None, Metrics(), None)
    stop = threading.Event()
    failures: list = []
    revokes: list = []  # (tp, highest epoch fetched before the revocation, committed)
    handed: dict = defaultdict(list)  # tp -> [(offset, epoch it was fetched under)]

    def background() -> None:
        rng = random.Random(7)
        fetched: dict = {}
        try:
            while not stop.is_set():
                for tp, position, _, epoch in subs.fetchable():
                    subs.fetch_sent([(tp, epoch)])
                    n = rng.randint(1, 8)
                    # the log always holds more: each partition is fetched ahead of its buffered fetch
                    subs.update_watermarks(tp, 1 << 40, 1 << 40, 0)
                    subs.fetch_answered(tp, epoch, position + n)
                    data = batch([b"%d" % epoch] * n, base_offset=position)
                    buffer.add([CompletedFetch(tp, position, epoch, data, 0, 0, 0, None, len(data))], 0)
                    fetched[tp] = max(fetched.get(tp, -1), epoch)
                if rng.random() < 0.1:
                    tp = rng.choice(tps)
                    committed = revoke(subs, tp)
                    revokes.append((tp, fetched.get(tp, -1), committed))
                    time.sleep(0)
                    reassign(subs, tp, committed)
                time.sleep(0.0002)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    def application() -> None:
        last: dict = {}
        try:
            iterator_style = False
            while not stop.is_set():
                iterator_style = not iterator_style
                if iterator_style:
                    for tp, records in collector.collect(6, advance=False).items():
                        for record in records:
                            if not collector.take_record(tp, record):
                                break
                            handed[tp].append((record.offset, int(record.value)))
                        else:
                            collector.settle()
                else:
                    for tp, records in collector.collect(7).items():
                        handed[tp].extend((r.offset, int(r.value)) for r in records)
                for tp, position in subs.positions().items():
                    if position < last.get(tp, 0):
                        failures.append(f"{tp} went back from {last[tp]} to {position}")
                    last[tp] = position
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=background), threading.Thread(target=application)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the threads take turns every few bytecodes, not every 5 ms
    try:
        for t in threads:
            t.start()
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(10)
    finally:
        sys.setswitchinterval(switch)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    while out := collector.collect(100):  # what is left, handed out on this thread
        for tp, records in out.items():
            handed[tp].extend((r.offset, int(r.value)) for r in records)
    positions = subs.positions()
    assert sum(len(v) for v in handed.values()) > 0 and revokes
    for tp in tps:
        offsets = [o for o, _ in handed[tp]]
        assert offsets == list(range(positions[tp])), tp  # exactly once, in order, position follows
    for tp, fetched_before, committed in revokes:
        late = [(o, e) for o, e in handed[tp] if e <= fetched_before and o >= committed]
        assert late == [], (tp, committed)  # handed out after the partition was revoked
    assert {tp for tp, *_ in subs.fetchable()} == set(tps)  # no partition left marked in flight
