"""Share consumers' histories on Apache Kafka 4.2, judged by the share rules (H: one holder at a time, N:
deliveries count up to the limit, A: acknowledgements from the holder and never a record again after its
ACCEPT, S: every produced record settled), then the checker proved on each clean history: every kind of
share mutant injected into it is caught."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import pytest

from fsm_consumer.history import SHARE_MUTANT_KINDS, check, load, mutation_report
from fsm_consumer.share import AcknowledgeType, ShareConsumer
from fsm_consumer.share._admin import set_group_config

pytestmark = pytest.mark.brokers("kafka")

#: share mutant kind -> mutants tried over this module's clean histories (each test asserts all caught)
TRIED: Counter[str] = Counter()


def _group(broker, **settings) -> str:
    group = f"share-{uuid.uuid4().hex[:10]}"
    set_group_config(broker.bootstrap_servers, group, {"share.auto.offset.reset": "earliest", **settings})
    return group


def _judged(histories, topic: str, produced: int) -> None:
    result = check(load(histories), produced={topic: {"0": produced}})
    report = result.format()
    print(report)
    assert result.ok, report
    assert [result.status(rule) for rule in "HNAS"] == ["passed"] * 4, report
    mutated = mutation_report(result, rounds=2)
    print(mutated.format())
    assert mutated.all_caught, mutated.format()
    TRIED.update(o.mutant.kind for o in mutated.outcomes if o.mutant.kind in SHARE_MUTANT_KINDS)


def test_three_members_on_one_partition_release_reject_and_outlive_a_lock(broker, make_topic, produce, tmp_path):
    """Three explicit members on ONE partition: one accepts all, one releases every fifth record at its first
    delivery, one rejects every thirteenth and once holds a batch past its 2 s lock (its late acceptances are
    reported failed, the records go to the others counting up). Their histories pass H, N, A and S."""
    topic = make_topic(partitions=1)
    produce(topic, 300)
    group = _group(broker, **{"share.record.lock.duration.ms": "2000"})
    settled: set[int] = set()
    guard = threading.Lock()
    stop = threading.Event()
    slept = threading.Event()
    errors: list[BaseException] = []

    def decide(i: int, offset: int, count: int) -> AcknowledgeType:
        if i == 1 and offset % 5 == 0 and count == 1:
            return AcknowledgeType.RELEASE
        if i == 2 and offset % 13 == 0:
            return AcknowledgeType.REJECT
        return AcknowledgeType.ACCEPT

    def run(i: int) -> None:
        given: dict[int, AcknowledgeType] = {}  # offset -> this member's last acknowledgement of it

        def confirmed(offsets, error) -> None:
            # taken effect; a release settles nothing (the record comes back)
            if error is None:
                with guard:
                    settled.update(
                        o for os in offsets.values() for o in os if given.get(o) is not AcknowledgeType.RELEASE
                    )

        try:
            with ShareConsumer(
                topic,
                bootstrap_servers=broker.bootstrap_servers,
                group_id=group,
                client_id=f"member-{i}",
                share_acknowledgement_mode="explicit",
                max_poll_records=10,
                history_path=str(tmp_path / f"member-{i}.jsonl"),
            ) as member:
                member.set_acknowledgement_commit_callback(confirmed)
                while not stop.is_set():
                    records = member.poll(timeout_ms=200)
                    if records and i == 2 and not slept.is_set():
                        slept.set()
                        time.sleep(3.0)  # past the 2 s lock: these acceptances must be reported failed
                    for r in records:
                        given[r.offset] = decide(i, r.offset, r.delivery_count)
                        member.acknowledge(r, given[r.offset])
                member.commit_sync(timeout_ms=10_000)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in (2, 0, 1)]
    threads[0].start()  # the one that sleeps past its lock goes first: the others join once it holds records
    try:
        assert slept.wait(20), "member 2 was handed no records"
        for t in threads[1:]:
            t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not errors:
            with guard:
                if len(settled) == 300:
                    break
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            if t.is_alive() or t.ident is not None:
                t.join(30)
    assert not errors, errors
    assert len(settled) == 300, f"{len(settled)} of 300 settled"
    assert slept.is_set()
    _judged(tmp_path, topic, 300)


_HOLDER = """
import sys, time
from fsm_consumer import ShareConsumer
c = ShareConsumer(sys.argv[1], bootstrap_servers=sys.argv[2], group_id=sys.argv[3],
                  share_acknowledgement_mode="explicit", history_path=sys.argv[5], client_id="holder")
got = []
while len(got) < int(sys.argv[4]):
    got.extend(c.poll(timeout_ms=500))
print("holding", len(got), flush=True)
time.sleep(120)
"""


def test_a_killed_holders_records_go_to_another_member_and_the_history_says_why(broker, make_topic, produce, tmp_path):
    """kill -9 while holding records under a 20 s lock: the broker releases them with the connection and
    another member has them at once. The holder's history ends without a ``closed`` line: its hold binds no
    one after its last line, so the run is clean, and the checker still catches every mutant of it."""
    topic = make_topic(partitions=1)
    produce(topic, 20)
    group = _group(broker, **{"share.record.lock.duration.ms": "20000"})
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, topic, broker.bootstrap_servers, group, "20", str(tmp_path / "holder.jsonl")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["holding", "20"]
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        got = []
        with ShareConsumer(
            topic,
            bootstrap_servers=broker.bootstrap_servers,
            group_id=group,
            client_id="other",
            history_path=str(tmp_path / "other.jsonl"),
        ) as other:
            deadline = time.monotonic() + 15
            while len(got) < 20 and time.monotonic() < deadline:
                got.extend(other.poll(timeout_ms=500))
            other.commit_sync(timeout_ms=10_000)
        assert sorted((r.offset, r.delivery_count) for r in got) == [(o, 2) for o in range(20)]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
    _judged(tmp_path, topic, 20)


def test_every_share_mutant_kind_was_tried_on_kafka():
    """The module's clean histories hosted every kind of share mutant (each test asserted its own all caught):
    a kind never tried would prove nothing about the checker."""
    if not TRIED:
        pytest.skip("the history tests above did not run (deselected): nothing was tried")
    missing = [kind for kind in SHARE_MUTANT_KINDS if not TRIED[kind]]
    assert not missing, f"share mutant kinds never tried: {missing} (tried: {dict(TRIED)})"
