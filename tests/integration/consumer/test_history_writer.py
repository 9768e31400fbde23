"""What a consumer's history (``history_path``) says, against a real broker: a ``read`` line for every API that
hands records out (``poll()``, ``poll(update_offsets=False)``, ``poll_batch()``, iteration), each with the
``max_records`` its call could take and the offsets between its records that hold none (``gaps``); the
ownership of partitions a consumer takes itself (``assign()``, a subscription without a group); a name unique
beyond its process and a clock base the checker can compare. Each history passes the checker."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from fsm_consumer.fetch import TopicPartition
from fsm_consumer.history import check, load

pytestmark = pytest.mark.integration


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def reads(path: Path) -> list[dict[str, Any]]:
    return [e for e in lines(path) if e["event"] == "read"]


def test_every_api_that_hands_records_out_writes_its_read_lines(make_consumer, make_topic, produce, tmp_path):
    topic = make_topic(partitions=1)
    produce(topic, count=40, partition=0)
    tp = TopicPartition(topic, 0)
    path = tmp_path / "c.jsonl"
    c = make_consumer(history_path=str(path), max_poll_records=10)
    c.assign([tp])
    got: list[int] = []
    deadline = time.monotonic() + 20
    while len(got) < 10 and time.monotonic() < deadline:  # poll(): up to its max_records
        got += [r.offset for rs in c.poll(timeout_ms=200, max_records=7).values() for r in rs]
    lent = c.poll(timeout_ms=5000, update_offsets=False)  # handed out, the position left where it was
    lent_offsets = [r.offset for rs in lent.values() for r in rs]
    assert lent_offsets and lent_offsets[0] == got[-1] + 1
    c.seek(tp, lent_offsets[-1] + 1)  # the caller moves it, as update_offsets=False asks
    batch = c.poll_batch(timeout_ms=5000, max_records=5)
    assert batch.num_rows
    it = iter(c)
    one = next(it)
    assert one.offset == batch.column("offset")[-1].as_py() + 1
    c.close()

    by_call = reads(path)
    assert sum(e["count"] for e in by_call) == len(got) + len(lent_offsets) + batch.num_rows + 1
    polled, rest = by_call[: len(by_call) - 3], by_call[-3:]
    assert all(e["max_records"] == 7 and e["to"] == e["offsets"][1] + 1 for e in polled)
    not_moved, columns, iterated = rest
    assert not_moved["from"] == not_moved["to"] == lent_offsets[0] and not_moved["max_records"] == 10
    assert not_moved["offsets"] == [lent_offsets[0], lent_offsets[-1]]
    assert columns["max_records"] == 5 and columns["count"] == batch.num_rows
    assert iterated["max_records"] == 1 and iterated["offsets"] == [one.offset, one.offset]
    assert all(e["t_poll_start"] <= e["t"] for e in by_call)
    # assign() is an ownership of the consumer's own, closed with the consumer
    owned = [e for e in lines(path) if e["event"] == "assigned"]
    assert owned == [owned[0]] and owned[0]["by"] == "assign" and owned[0]["partitions"] == [[topic, 0]]
    handed = one.offset + 1
    result = check(load(path), produced={topic: {"0": handed}})
    assert result.ok, result.format()
    (lost,) = check(load(path), produced={topic: {"0": 40}}).violations  # the rest never handed out: L says so
    assert lost.rule == "L" and lost.offsets == (handed, 39)


def test_ownership_a_consumer_takes_itself_and_its_identity(make_consumer, make_topic, produce, tmp_path):
    topic = make_topic(partitions=2)
    produce(topic, count=6)
    a_path, b_path = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a = make_consumer(history_path=str(a_path), client_id="same")
    b = make_consumer(history_path=str(b_path), client_id="same")
    a.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    a.assign([TopicPartition(topic, 1)])  # partition 0 leaves
    b.subscribe([topic])  # no group: every partition of the topic, its own
    deadline = time.monotonic() + 20
    while not b.assignment() and time.monotonic() < deadline:
        b.poll(timeout_ms=100)
    b.unsubscribe()
    a.close()
    b.close()
    a_lines, b_lines = lines(a_path), lines(b_path)
    ownership = [(e["event"], e.get("by"), e["partitions"]) for e in a_lines if e["event"] in ("assigned", "revoked")]
    assert ownership == [
        ("assigned", "assign", [[topic, 0], [topic, 1]]),
        ("revoked", "assign", [[topic, 0]]),
    ]
    b_own = [(e["event"], e.get("by")) for e in b_lines if e["event"] in ("assigned", "revoked")]
    assert b_own == [("assigned", "subscribe"), ("revoked", "unsubscribe")]
    # one client id, one process: two names all the same, each with its own random part
    names = {a_lines[0]["consumer"], b_lines[0]["consumer"]}
    assert len(names) == 2 and all(n.startswith("same@") and "~" in n for n in names)
    started = a_lines[0]
    assert started["event"] == "started" and isinstance(started["pid"], int)
    assert set(started["clock"]) == {"boot_id", "host"} and started["config"]["auto_offset_reset"] == "earliest"
    # every line says both clocks of one instant: their difference is one value (the file's clock base)
    bases = [e["wall"] * 1000 - e["t"] for e in a_lines + b_lines]
    assert max(bases) - min(bases) < 50
    assert check(load(tmp_path)).ok


def test_a_read_names_the_offsets_between_its_records_that_hold_none(make_consumer, make_topic, broker, tmp_path):
    """Transactions: each commit marker takes an offset no record is at; a read across it names the gap."""
    topic = make_topic(partitions=1)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "linger.ms": 0,
            "transactional.id": f"tx-{uuid.uuid4().hex}",
            "transaction.timeout.ms": 10_000,
        }
    )
    producer.init_transactions(10)
    for t in range(3):
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, value=f"{t}-{i}".encode(), partition=0)
        producer.commit_transaction(10)
    producer.flush(10)
    path = tmp_path / "c.jsonl"
    c = make_consumer(history_path=str(path), isolation_level="read_uncommitted")
    c.assign([TopicPartition(topic, 0)])
    got: list[int] = []
    deadline = time.monotonic() + 20
    while len(got) < 12 and time.monotonic() < deadline:
        got += [r.offset for rs in c.poll(timeout_ms=200).values() for r in rs]
    c.close()
    assert got == [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13]  # markers at 4, 9, 14
    for e in reads(path):  # every marker inside a read's offsets is named as a gap of it, and counted out
        first, last = e["offsets"]
        assert e.get("gaps", []) == [[m, m] for m in (4, 9) if first < m < last]
        assert e["count"] == last - first + 1 - sum(b - a + 1 for a, b in e.get("gaps", []))
    assert any(e.get("gaps") for e in reads(path))  # the whole log is fetched at once: a read spans them
    produced = {topic: {"0": [[0, 3], [5, 8], [10, 13]]}}
    result = check(load(path), produced=produced)
    assert result.ok, result.format()
