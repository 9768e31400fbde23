"""A failing deserializer (issue 23): the collector raises the deserializer's own exception, as
kafka-python lets it through (``except ValueError`` around iteration), with a note saying where; the
records before it are handed out first, the partition's position stays at the failing record (the
same exception comes again when it is read again) and a seek past it goes on from there."""

from __future__ import annotations

import pytest

from fsm_consumer._config import ConsumerConfig
from fsm_consumer._metrics import Metrics
from fsm_consumer.fetch import TopicPartition
from fsm_consumer.fetch._buffer import CompletedFetch, FetchBuffer
from fsm_consumer.fetch._collector import FetchCollector
from fsm_consumer.fetch.testing import Rec, batch
from fsm_consumer.machines import FakeClock
from fsm_consumer.state import SubscriptionState

TP = TopicPartition("orders", 2)
VALUES = [b"0", b"1", b"2", b"oops", b"4", b"5"]


class NotANumber(ValueError):
    """The user's own exception class."""


def to_int(data: bytes) -> int:
    if not data.isdigit():
        raise NotANumber(f"not a number: {data!r}")
    return int(data)


class Rig:
    def __init__(self, **config) -> None:
        self.subs = SubscriptionState("earliest")
        self.subs.assign([TP])
        self.subs.seek(TP, 0)
        self.buffer = FetchBuffer(1 << 20, lambda: None)
        self.collector = FetchCollector(
            ConsumerConfig.from_kwargs(**config), self.subs, self.buffer, lambda: None, Metrics(), FakeClock(1_000.0)
        )

    def fetch(self) -> None:
        """What the fetch manager does: the log from the partition's position, one batch (each
        record's key is its value)."""
        ((_, position, _, epoch),) = self.subs.fetchable()
        end = len(VALUES)
        self.subs.fetch_sent([(TP, epoch)])
        self.subs.fetch_answered(TP, epoch, end)
        data = batch([Rec(v, key=v) for v in VALUES[position:]], base_offset=position)
        self.buffer.add([CompletedFetch(TP, position, epoch, data, end, end, 0, None, len(data))], 0)

    def collect(self, **kw):
        return {tp: [(r.offset, r.value) for r in records] for tp, records in self.collector.collect(100, **kw).items()}


@pytest.mark.parametrize("which", ["value", "key"])
def test_the_deserializers_own_exception_is_raised_after_the_good_records(which):
    rig = Rig(**{f"{which}_deserializer": to_int})
    rig.fetch()
    got = rig.collector.collect(100)
    assert [r.offset for r in got[TP]] == [0, 1, 2]
    with pytest.raises(NotANumber, match=r"not a number: b'oops'") as caught:
        rig.collector.collect(100)
    assert type(caught.value) is NotANumber  # the user's class, not a wrapper around it
    (note,) = caught.value.__notes__
    assert f"the {which} deserializer failed on the record at offset 3 of orders-2" in note
    assert "seek(TopicPartition('orders', 2), 4) skips the record" in note
    assert rig.subs.position(TP) == 3  # nothing of the partition's position is lost


def test_the_failing_record_fails_again_until_a_seek_past_it():
    rig = Rig(value_deserializer=to_int)
    rig.fetch()
    assert rig.collect() == {TP: [(0, 0), (1, 1), (2, 2)]}
    with pytest.raises(NotANumber):
        rig.collect()
    for _ in range(2):  # read again from its offset: the same class again, one note each time
        rig.fetch()
        with pytest.raises(NotANumber) as caught:
            rig.collect()
        assert len(caught.value.__notes__) == 1
        assert rig.subs.position(TP) == 3
    rig.subs.seek(TP, 4)
    rig.fetch()
    assert rig.collect() == {TP: [(4, 4), (5, 5)]}
    assert rig.subs.position(TP) == 6


def test_the_iterators_path_raises_it_as_itself_too():
    """``collect(advance=False)``, what the iterator takes records from one by one."""
    rig = Rig(value_deserializer=to_int)
    rig.fetch()
    lent = rig.collector.collect(100, advance=False)[TP]
    for record in lent:
        assert rig.collector.take_record(TP, record)
    rig.collector.settle()
    with pytest.raises(NotANumber):
        rig.collector.collect(100, advance=False)
    assert rig.subs.position(TP) == 3


def test_one_exception_instance_raised_again_and_again_gets_its_note_once():
    error = NotANumber("always the same")

    def same(data: bytes) -> int:
        raise error

    rig = Rig(value_deserializer=same)
    for _ in range(3):
        rig.fetch()
        with pytest.raises(NotANumber) as caught:
            rig.collect()
        assert caught.value is error and len(error.__notes__) == 1
