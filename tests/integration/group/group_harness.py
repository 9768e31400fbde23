"""Group test harness: members polling in their own threads and logging what they own and consume."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from itertools import pairwise

from fsm_consumer.consumer import Consumer, ConsumerRebalanceListener
from fsm_consumer.errors import RebalanceInProgressError

# follower_sync_delay_ms: Tansu 0.6 fails a follower's SyncGroup that reaches it before the leader's
# (Apache Kafka holds it for the leader's); one heartbeat interval lets the leader's go first.
FAST = dict(
    session_timeout_ms=3000,
    heartbeat_interval_ms=300,
    auto_offset_reset="earliest",
    auto_commit_interval_ms=200,
    request_timeout_ms=5000,
    follower_sync_delay_ms=400,
)


class Member(ConsumerRebalanceListener):
    """One fsm_consumer member: a poll loop on its own thread; ownership intervals from callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, *, faulty: bool = False, **config) -> None:
        self.name = name
        self.intervals: list[list] = []  # [partition, start, end or None]
        self.open: dict[int, list] = {}
        self.consumed: list[tuple[int, int]] = []  # (partition, offset)
        self.delivery_times: dict[int, list[float]] = defaultdict(list)
        self.errors: list[BaseException] = []
        self.callback_delay = 0.0
        self.assign_delay = 0.0
        self.paused_polling = threading.Event()
        self.commit_each_poll = False  # commit() after every poll (an application that commits often)
        self.commits_refused = 0  # ...refused with RebalanceInProgressError during a rebalance
        self.commits_done = 0
        self.lock = threading.Lock()
        settings = {**FAST, **config, "bootstrap_servers": bootstrap, "group_id": group, "client_id": name}
        if settings.get("group_protocol") == "consumer":  # KIP-848: the broker's settings, refused if given
            for key in ("session_timeout_ms", "heartbeat_interval_ms", "follower_sync_delay_ms"):
                settings.pop(key, None)
        self.faults = None
        transport = None
        if faulty:  # a FaultyTransport around the real one, to blackhole the coordinator etc.
            from fsm_consumer._config import ConsumerConfig
            from fsm_consumer.transport import FaultyTransport, KafkaTransport

            self.faults = transport = FaultyTransport(KafkaTransport(ConsumerConfig.from_kwargs(**settings)))
        self.consumer = Consumer(transport=transport, **settings)
        self.consumer.subscribe([topic], listener=self)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"member-{name}", daemon=True)
        self.thread.start()

    # listener: runs on the member's own poll thread
    def on_partitions_assigned(self, assigned):
        if self.assign_delay:
            time.sleep(self.assign_delay)
        now = time.monotonic()
        with self.lock:
            for tp in assigned:
                iv = [tp.partition, now, None]
                self.intervals.append(iv)
                self.open[tp.partition] = iv

    def _close_intervals(self, partitions):
        if self.callback_delay:
            time.sleep(self.callback_delay)
        now = time.monotonic()
        with self.lock:
            for tp in partitions:
                iv = self.open.pop(tp.partition, None)
                if iv is not None:
                    iv[2] = now

    def on_partitions_revoked(self, revoked):
        self._close_intervals(revoked)

    def on_partitions_lost(self, lost):
        self._close_intervals(lost)

    def _loop(self):
        while not self._stop.is_set():
            if self.paused_polling.is_set():
                time.sleep(0.02)
                continue
            try:
                batch = self.consumer.poll(timeout_ms=50)
            except Exception as exc:  # recorded; the test decides whether it matters
                self.errors.append(exc)
                continue
            if self.commit_each_poll:
                self._commit()
            now = time.monotonic()
            with self.lock:
                for tp, records in batch.items():
                    self.consumed.extend((tp.partition, r.offset) for r in records)
                    self.delivery_times[tp.partition].append(now)

    def _commit(self) -> None:
        try:
            self.consumer.commit(timeout_ms=5000)
            self.commits_done += 1
        except RebalanceInProgressError:  # retriable: the next poll() completes the rebalance
            self.commits_refused += 1
        except Exception as exc:
            self.errors.append(exc)

    @property
    def state(self) -> str:
        return self.consumer._group.membership.machine.state

    @property
    def generation(self) -> int:
        return self.consumer._group.membership.generation

    def triggers(self) -> list[str]:
        return [r.trigger for r in self.consumer._group.membership.machine.log]

    def background_triggers(self) -> list[str]:
        return [r.trigger for r in self.consumer._background_machine.log]

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def stop(self, timeout_ms: int = 5000) -> None:
        """Leave cleanly: close() runs on this thread after the loop ends (callbacks included)."""
        self._stop.set()
        self.thread.join(5)
        self.consumer.close(timeout_ms=timeout_ms)
        now = time.monotonic()
        with self.lock:
            for iv in self.open.values():
                iv[2] = now
            self.open.clear()


def stop_all(members) -> None:
    """Stop every member still running (``None`` slots and stopped ones skipped), each even when stopping an
    earlier one failed: a test that fails half-way leaves no consumer thread or peer process behind. The
    first failure is raised once all were tried."""
    failure: BaseException | None = None
    for m in members:
        stopped = getattr(m, "_stop", None)
        if m is None or (stopped is not None and stopped.is_set()):
            continue
        try:
            m.stop()
        except BaseException as exc:  # noqa: BLE001 - raised below, after the others are stopped
            failure = failure or exc
    if failure is not None:
        raise failure


def counted_consumer(settings: dict):
    """A Consumer on a FaultyTransport that counts every request it sends, by API: (consumer, faults, sent)."""
    from collections import Counter

    from fsm_consumer._config import ConsumerConfig
    from fsm_consumer.transport import FaultyTransport, KafkaTransport

    faults = FaultyTransport(KafkaTransport(ConsumerConfig.from_kwargs(**settings)))
    sent: Counter = Counter()
    real_send = faults.send

    def send(request, *args, **kw):
        sent[type(request).__name__.removesuffix("Request")] += 1
        return real_send(request, *args, **kw)

    faults.send = send
    return Consumer(transport=faults, **settings), faults, sent


NODE_ID = {"tansu": 111, "kafka": 1}  # the broker's node id: Tansu's default, KafkaBroker's node.id


def coordinator_node(broker) -> int:
    """The synthetic node id of the coordinator connection (2**31 - 1 - the broker's node id)."""
    return 2**31 - 1 - NODE_ID[broker.kind]


def wait_until(predicate, timeout_s: float, what: str, explain=None) -> None:
    """Wait for ``predicate``; on timeout the error says what was awaited and ``explain()``, if given."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    detail = f": {explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{detail}")


def describe(members) -> str:
    """Where each member stands: for a timeout's message."""
    return "; ".join(
        f"{m.name} {m.state} gen {m.generation} owns {sorted(m.owned())} consumed {len(m.consumed)}"
        f"{' errors ' + repr(m.errors[-2:]) if m.errors else ''}"
        for m in members
    )


def assert_disjoint(members) -> None:
    """No two members owned a partition at the same moment."""
    by_partition = defaultdict(list)
    for m in members:
        for p, start, end in m.intervals:
            by_partition[p].append((start, end if end is not None else float("inf"), m.name))
    for p, ivs in by_partition.items():
        ivs.sort()
        for (_, e1, n1), (s2, _, n2) in pairwise(ivs):
            assert s2 >= e1, f"partition {p}: {n1} owned it until {e1:.3f} but {n2} from {s2:.3f}"
