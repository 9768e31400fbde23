"""The links of specs/compositions/ checked as a real consumer runs (machines/_composition.py's Linker): a group
consumer's close keeps them all; code that broke one (closing without asking the member to leave, a transport
that left a socket open) is reported naming the link, from the loop where it is broken."""

import logging
import time

import pytest

from fsm_consumer import Consumer
from fsm_consumer.machines import _composition
from fsm_consumer.managers._member import MemberBase
from fsm_consumer.transport._kafka import KafkaTransport

# the links are the library's, not the broker's: checked on the reference broker only (CI's time)
pytestmark = [pytest.mark.integration, pytest.mark.brokers("kafka")]


@pytest.fixture(autouse=True)
def _breaks_made_here_on_purpose():
    before = len(_composition._broken)
    yield
    del _composition._broken[before:]


def _consumer(broker, topic, **extra):
    return Consumer(
        topic,
        bootstrap_servers=broker.bootstrap_servers,
        group_id=f"g-{topic}-{time.monotonic_ns()}",
        auto_offset_reset="earliest",
        **extra,
    )


def _joined(c):
    deadline = time.monotonic() + 30
    while not c.assignment():
        assert time.monotonic() < deadline, "no assignment within 30 s"
        c.poll(timeout_ms=100)


def test_a_group_consumer_keeps_every_link_from_join_to_close(broker, make_topic):
    topic = make_topic(partitions=2)
    c = _consumer(broker, topic)
    linker = c._thread._linker
    assert linker is not None and linker.composition.name in ("consumer", "classic_consumer")
    _joined(c)
    conns = list(c._thread._transport._conns.values())
    assert conns and all(linker._role_of.get(id(conn.machine)) == "connection" for conn in conns)
    c.close()
    assert all(conn.machine.state == "closed" for conn in conns)
    assert _composition.broken_links() == []


def test_a_close_that_does_not_ask_the_member_to_leave_is_reported_naming_the_link(broker, make_topic, monkeypatch):
    topic = make_topic(partitions=1)
    c = _consumer(broker, topic, close_timeout_ms=3000)
    _joined(c)
    monkeypatch.setattr(MemberBase, "begin_close", lambda self, autocommit: None)  # the closer forgets the leave
    try:
        c.close()
    except Exception:  # noqa: BLE001 - whatever close() raises for a failed loop, the link is what is checked
        pass
    broken = _composition.broken_links()
    assert broken and "link 'close_leaves' broken: background entered ['closing']" in broken[0], broken
    assert "compositions/" in broken[0] and ".yaml:" in broken[0]  # the composition's file and line
    assert c._background_machine.state == "failed"  # the loop stopped there: nothing went on unchecked


def test_a_socket_left_open_when_the_loop_ends_is_reported(broker, make_topic, monkeypatch, caplog):
    topic = make_topic(partitions=1)
    c = _consumer(broker, topic)
    _joined(c)
    real_close = KafkaTransport.close

    def close_but_one(self):  # a transport that forgets one connection
        kept = next(iter(self._conns.values()))
        self._conns = {n: conn for n, conn in self._conns.items() if conn is not kept}
        real_close(self)

    monkeypatch.setattr(KafkaTransport, "close", close_but_one)
    with caplog.at_level(logging.ERROR, logger="fsm_consumer"):
        c.close()
    broken = _composition.broken_links()
    assert broken and "link 'sockets_close_with_the_loop' broken" in broken[0], broken
    assert any("sockets_close_with_the_loop" in r.getMessage() for r in caplog.records)
