"""ListOffsets: position resets by policy, and beginning/end offsets and offsets_for_times.

Requests go to each partition's leader, one batch per leader. Every error code goes through the
error policy: retriable ones (unknown leader, NOT_LEADER_OR_FOLLOWER, ...; those of metadata
refresh it) are retried after a per-partition backoff, exponential up to
``retry_backoff_max_ms``, until the event's deadline; a reset keeps retrying for as long as the
partition needs it. The user's (TOPIC_AUTHORIZATION_FAILED) are never retried: a reset's is held
for the topic (raised by poll()) and the reset is not sent again while it is held; lookups waiting
on it, and lookups answered so, fail with it. A ``latest`` answer is checked against the last
batch's header (``_log_end``: Tansu's answer falls short of the end of a multi-record batch).
"""

from __future__ import annotations

import logging
from collections import defaultdict

from kafka.protocol.consumer import ListOffsetsRequest

from ..events import ListOffsetsEvent
from ..policy import Action, Backoffs, classify, public_error
from ..structs import TopicPartition
from ._base import FOREVER, Outgoing, error_of
from ._log_end import log_end, probe_request

log = logging.getLogger("fsm_consumer.offsets")

EARLIEST, LATEST = -2, -1
_STRATEGY_TS = {"earliest": EARLIEST, "latest": LATEST}
_TOPIC_AUTHORIZATION_FAILED = 29
_USERS = (Action.FATAL, Action.RESET, Action.FENCED)  # not retried: the user must act


class OffsetsManager:
    def __init__(self, config, subscription, metadata, background_events, held) -> None:
        self._config = config
        self._subs = subscription
        self._metadata = metadata
        self._bg = background_events
        self._held = held
        self._isolation = 1 if config.isolation_level == "read_committed" else 0
        self._resetting: dict[TopicPartition, str] = {}  # in flight
        # a failing partition is asked again a few times a second at most (the error policy)
        self._backoff = Backoffs(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._holding: dict = {}  # held-error key -> error, held by this manager
        self._events: list[_Lookup] = []
        self._probes: list[_Probe] = []  # latest answers being checked (_log_end)

    def add_event(self, event: ListOffsetsEvent, now: float) -> None:
        self._events.append(_Lookup(event))

    # -- loop -------------------------------------------------------------------------------
    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        out: list[Outgoing] = []
        wait = FOREVER
        # resets by policy
        needing = self._subs.needing_reset()
        self._release_unneeded(needing)
        # 'none': nothing to ask the broker; poll() and position() raise NoOffsetForPartitionError on
        # the application thread for as long as the partition has no position (a queued error event
        # would be raised once only, and even after a seek() had made it stale). Held: the user acts.
        ready = {}
        for tp, s in needing.items():
            if tp in self._resetting or s == "none" or self._is_held(tp):
                continue
            later = self._backoff.wait(tp, now)
            if later:
                wait = min(wait, later)
            else:
                ready[tp] = s
        if ready:
            by_node, missing = self._by_leader({tp: _STRATEGY_TS[s] for tp, s in ready.items()})
            if missing:
                self._metadata.request_update({tp.topic for tp in missing})  # it paces itself
                wait = min(wait, self._config.retry_backoff_ms)
            for node, ts in by_node.items():
                for tp in ts:
                    self._resetting[tp] = ready[tp]
                # mypy cannot type a lambda with default arguments (python/mypy#15459)
                out.append(
                    Outgoing(self._request(ts), node, lambda p, n, ts=ts: self._on_reset(p, n, ts), min_version=1)  # type: ignore[misc]
                )
        for probe in [p for p in self._probes if not p.in_flight]:
            node = self._metadata.leader(probe.tp)
            if node is None:  # no leader to ask: the answer stands as it came
                self._probes.remove(probe)
                probe.on_end(probe.reported)
                continue
            probe.in_flight = True
            out.append(
                Outgoing(
                    probe_request(probe.tp, probe.reported - 1, self._isolation),
                    node,
                    # mypy cannot type a lambda with default arguments (python/mypy#15459)
                    lambda p, n, pr=probe: self._on_probe(p, n, pr),  # type: ignore[misc]
                    min_version=4,
                    max_version=12,
                )
            )
        # API lookups
        for lookup in list(self._events):
            assert lookup.event.future is not None  # a lookup's event has a future: the application waits on it
            if lookup.event.future.done:
                self._events.remove(lookup)
                continue
            todo = {
                tp: t
                for tp, t in lookup.event.timestamps.items()
                if tp not in lookup.results and tp not in lookup.in_flight
            }
            if not todo:
                continue
            error = next((self._holding[k] for tp in todo for k in _keys(tp) if k in self._holding), None)
            if error is not None:  # a reset of it was refused: so would this be
                self._events.remove(lookup)
                lookup.event.fail(error)
                continue
            ready = {}
            for tp, ts in todo.items():
                later = self._backoff.wait(tp, now)
                if later:
                    wait = min(wait, later)
                else:
                    ready[tp] = ts
            by_node, missing = self._by_leader(ready)
            if missing:
                lookup.event.cause = "; ".join(sorted({self._metadata.explain_missing(tp) for tp in missing}))
                self._metadata.request_update({tp.topic for tp in missing})
                wait = min(wait, self._config.retry_backoff_ms)
            for node, ts in by_node.items():
                lookup.in_flight |= set(ts)
                out.append(
                    Outgoing(
                        self._request(ts),
                        node,
                        # mypy cannot type a lambda with default arguments (python/mypy#15459)
                        lambda p, n, lk=lookup, ts=ts: self._on_lookup(p, n, lk, ts),  # type: ignore[misc]
                        min_version=1,
                    )
                )
        return wait, out

    def _by_leader(self, timestamps: dict[TopicPartition, int]):
        by_node: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
        missing = []
        for tp, ts in timestamps.items():
            leader = self._metadata.leader(tp)
            if leader is None:
                missing.append(tp)
            else:
                by_node[leader][tp] = ts
        return by_node, missing

    def _request(self, timestamps: dict[TopicPartition, int]) -> ListOffsetsRequest:
        topics: dict[str, list] = defaultdict(list)
        for tp, ts in timestamps.items():
            topics[tp.topic].append(
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=tp.partition, current_leader_epoch=-1, timestamp=ts
                )
            )
        return ListOffsetsRequest(
            replica_id=-1,
            isolation_level=self._isolation,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()],
        )

    @staticmethod
    def _results(response, asked):
        """(tp, partition answer) for the partitions asked about (one left out of the answer is
        backed off by the caller, like a retriable error)."""
        for t in response.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if tp in asked:
                    yield tp, p

    # -- held errors ------------------------------------------------------------------------------
    def _is_held(self, tp: TopicPartition) -> bool:
        return any(self._held.holds(key) for key in _keys(tp))

    def _deny(self, tp: TopicPartition, code: int, what: str) -> None:
        """Hold the user's error (for the topic on an ACL, else the partition); fail the lookups
        waiting on it with it. Not sent again while held."""
        if code == _TOPIC_AUTHORIZATION_FAILED:
            key, error = ("topic", tp.topic), public_error(code, f"{what} of topic {tp.topic!r}")
        else:
            key, error = ("partition", tp), public_error(code, what, partitions=[tp])
        if key not in self._holding:
            if self._held.hold(key, error):
                log.warning("%s", error)
            self._holding[key] = error
        error = self._holding[key]
        for lookup in list(self._events):
            assert lookup.event.future is not None  # a lookup's event has a future: the application waits on it
            if not lookup.event.future.done and any(key in _keys(t) for t in lookup.event.timestamps):
                self._events.remove(lookup)
                lookup.event.fail(error)

    def _release_unneeded(self, needing) -> None:
        """Release this manager's held errors once no partition needs a reset under them (the user
        sought or gave them up), or once someone else released them (a Metadata answer)."""
        for key in list(self._holding):
            if not self._held.holds(key):
                del self._holding[key]
            elif not any(key in _keys(tp) for tp in needing):
                self._held.release(key)
                del self._holding[key]

    def _answered(self, tp: TopicPartition) -> None:
        self._backoff.succeeded(tp)
        key = ("topic", tp.topic)
        if self._holding.pop(key, None) is not None:
            self._held.release(key)

    # -- completions -----------------------------------------------------------------------------
    def _on_reset(self, pending, now: float, timestamps) -> None:
        for tp in timestamps:
            self._resetting.pop(tp, None)
        if pending.error is not None:
            for tp in timestamps:
                self._backoff.failed(tp, now)
            return
        answered = set()
        for tp, p in self._results(pending.response, timestamps):
            answered.add(tp)
            strategy = "earliest" if timestamps.get(tp) == EARLIEST else "latest"
            if p.error_code == 0 and p.offset >= 0:
                self._answered(tp)
                epoch = getattr(p, "leader_epoch", -1)
                if strategy == "latest" and p.offset > 0:
                    self._resetting[tp] = strategy  # until the probe answers
                    self._probes.append(
                        _Probe(tp, p.offset, lambda end, tp=tp, e=epoch: self._reset_to_end(tp, end, e))
                    )
                else:
                    self._subs.set_reset_position(tp, strategy, p.offset, epoch)
                continue
            self._backoff.failed(tp, now)
            action = classify(p.error_code) if p.error_code else Action.RETRY  # no offset: ask again
            if action is Action.REFRESH_METADATA:
                self._metadata.request_update({tp.topic})
            elif action in _USERS:
                self._deny(tp, p.error_code, f"ListOffsets ({strategy} offset, to reset the position)")
        for tp in set(timestamps) - answered:
            self._backoff.failed(tp, now)

    def _on_lookup(self, pending, now: float, lookup: _Lookup, timestamps) -> None:
        lookup.in_flight -= set(timestamps)
        assert lookup.event.future is not None  # a lookup's event has a future: the application waits on it
        if lookup.event.future.done:  # failed meanwhile (a held error) or timed out
            return
        if pending.error is not None:
            lookup.event.cause = f"ListOffsets to broker {pending.sent_to} failed: {pending.error}"
            for tp in timestamps:
                self._backoff.failed(tp, now)
            return
        answered = set()
        for tp, p in self._results(pending.response, timestamps):
            answered.add(tp)
            if p.error_code == 0:
                self._answered(tp)
                # offset -1 answers a timestamp no record reaches: kafka-python gives None for it.
                # Tansu 0.6 answers such a timestamp query with offset 0 and timestamp -1 instead: a
                # found record always has a timestamp, so that is no match either.
                queried = lookup.event.timestamps.get(tp, -1)
                missing = p.offset < 0 or (queried >= 0 and p.timestamp < 0)
                epoch = getattr(p, "leader_epoch", -1)
                if queried == LATEST and not missing and p.offset > 0:
                    lookup.in_flight.add(tp)
                    self._probes.append(
                        _Probe(
                            tp,
                            p.offset,
                            lambda end, lk=lookup, tp=tp, e=epoch, ts=p.timestamp: self._lookup_end(
                                lk, tp, (end, ts, e)
                            ),
                        )
                    )
                    continue
                lookup.results[tp] = None if missing else (p.offset, p.timestamp, epoch)
                continue
            self._backoff.failed(tp, now)
            action = classify(p.error_code)
            if action in _USERS:  # the user's to fix: the lookup fails at once, never retried
                self._events = [lk for lk in self._events if lk is not lookup]
                lookup.event.fail(public_error(p.error_code, "ListOffsets", partitions=[tp]))
                return
            if action is Action.REFRESH_METADATA:
                self._metadata.request_update({tp.topic})
            lookup.event.cause = f"the broker answered {error_of(p.error_code).__name__} for {tp}"
        for tp in set(timestamps) - answered:
            self._backoff.failed(tp, now)
        if set(lookup.results) >= set(lookup.event.timestamps):
            lookup.event.complete(dict(lookup.results))

    def _on_probe(self, pending, now: float, probe: _Probe) -> None:
        self._probes.remove(probe)
        probe.on_end(
            probe.reported if pending.error is not None else log_end(pending.response, probe.tp, probe.reported)
        )

    def _reset_to_end(self, tp: TopicPartition, end: int, leader_epoch: int) -> None:
        self._resetting.pop(tp, None)
        self._subs.set_reset_position(tp, "latest", end, leader_epoch)

    def _lookup_end(self, lookup: _Lookup, tp: TopicPartition, result) -> None:
        lookup.in_flight.discard(tp)
        lookup.results[tp] = result
        if set(lookup.results) >= set(lookup.event.timestamps):
            lookup.event.complete(dict(lookup.results))


def _keys(tp: TopicPartition) -> tuple:
    """The held-error keys a partition's ListOffsets is refused under."""
    return ("topic", tp.topic), ("partition", tp)


class _Probe:
    __slots__ = ("tp", "reported", "on_end", "in_flight")

    def __init__(self, tp: TopicPartition, reported: int, on_end) -> None:
        self.tp = tp
        self.reported = reported  # the ListOffsets answer
        self.on_end = on_end  # (log end) -> None
        self.in_flight = False


class _Lookup:
    __slots__ = ("event", "results", "in_flight")

    def __init__(self, event: ListOffsetsEvent) -> None:
        self.event = event
        self.results: dict = {}
        self.in_flight: set = set()
