"""ListOffsets: position resets by policy, and beginning/end offsets and offsets_for_times.

Requests go to each partition's leader, one batch per leader. Retriable errors (unknown leader,
NOT_LEADER_OR_FOLLOWER, ...) refresh metadata and retry after ``retry_backoff_ms`` until the
event's deadline; a reset keeps retrying for as long as the partition needs it. A ``latest``
answer is checked against the last batch's header (``_log_end``: Tansu's answer falls short of the
end of a multi-record batch).
"""

from __future__ import annotations

from collections import defaultdict

import kafka.errors as ke
from kafka.protocol.consumer import ListOffsetsRequest

from ..events import ListOffsetsEvent
from ..fetch._records import TopicPartition
from ._base import FOREVER, Outgoing
from ._log_end import log_end, probe_request

EARLIEST, LATEST = -2, -1
_STRATEGY_TS = {"earliest": EARLIEST, "latest": LATEST}
_RETRIABLE_REFRESH = {3, 5, 6, 74, 75}  # unknown tp, leader not available, not leader, fenced/unknown epoch


class OffsetsManager:
    def __init__(self, config, subscription, metadata, background_events) -> None:
        self._config = config
        self._subs = subscription
        self._metadata = metadata
        self._bg = background_events
        self._isolation = 1 if config.isolation_level == "read_committed" else 0
        self._resetting: dict[TopicPartition, str] = {}     # in flight
        self._reset_retry_at = 0.0
        self._events: list[_Lookup] = []
        self._probes: list[_Probe] = []                      # latest answers being checked (_log_end)

    def add_event(self, event: ListOffsetsEvent, now: float) -> None:
        self._events.append(_Lookup(event))

    # -- loop -------------------------------------------------------------------------------
    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        out: list[Outgoing] = []
        wait = FOREVER
        # resets by policy
        pending = {tp: s for tp, s in self._subs.needing_reset().items() if tp not in self._resetting}
        # 'none': nothing to ask the broker; poll() and position() raise NoOffsetForPartitionError on
        # the application thread for as long as the partition has no position (a queued error event
        # would be raised once only, and even after a seek() had made it stale)
        pending = {tp: s for tp, s in pending.items() if s != "none"}
        if pending:
            if now < self._reset_retry_at:
                wait = self._reset_retry_at - now
            else:
                by_node, missing = self._by_leader({tp: _STRATEGY_TS[s] for tp, s in pending.items()})
                if missing:
                    self._metadata.request_update({tp.topic for tp in missing})
                    wait = min(wait, self._config.retry_backoff_ms)
                for node, ts in by_node.items():
                    for tp in ts:
                        self._resetting[tp] = pending[tp]
                    out.append(Outgoing(self._request(ts), node,
                                        lambda p, n, ts=ts: self._on_reset(p, n, ts), min_version=1))
        for probe in [p for p in self._probes if not p.in_flight]:
            node = self._metadata.leader(probe.tp)
            if node is None:  # no leader to ask: the answer stands as it came
                self._probes.remove(probe)
                probe.on_end(probe.reported)
                continue
            probe.in_flight = True
            out.append(Outgoing(probe_request(probe.tp, probe.reported - 1, self._isolation), node,
                                lambda p, n, pr=probe: self._on_probe(p, n, pr), min_version=4, max_version=12))
        # API lookups
        for lookup in list(self._events):
            if lookup.event.future.done:
                self._events.remove(lookup)
                continue
            todo = {tp: t for tp, t in lookup.event.timestamps.items()
                    if tp not in lookup.results and tp not in lookup.in_flight}
            if not todo:
                continue
            if now < lookup.retry_at:
                wait = min(wait, lookup.retry_at - now)
                continue
            by_node, missing = self._by_leader(todo)
            if missing:
                lookup.event.cause = "; ".join(sorted({self._metadata.explain_missing(tp) for tp in missing}))
                self._metadata.request_update({tp.topic for tp in missing})
                lookup.retry_at = now + self._config.retry_backoff_ms
                wait = min(wait, self._config.retry_backoff_ms)
            for node, ts in by_node.items():
                lookup.in_flight |= set(ts)
                out.append(Outgoing(self._request(ts), node,
                                    lambda p, n, lk=lookup, ts=ts: self._on_lookup(p, n, lk, ts), min_version=1))
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
            topics[tp.topic].append(ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=tp.partition, current_leader_epoch=-1, timestamp=ts))
        return ListOffsetsRequest(replica_id=-1, isolation_level=self._isolation, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in topics.items()])

    @staticmethod
    def _results(response):
        for t in response.topics:
            for p in t.partitions:
                yield TopicPartition(t.name, p.partition_index), p

    # -- completions -----------------------------------------------------------------------------
    def _on_reset(self, pending, now: float, timestamps) -> None:
        for tp in timestamps:
            self._resetting.pop(tp, None)
        if pending.error is not None:
            self._reset_retry_at = now + self._config.retry_backoff_ms
            return
        retry = False
        for tp, p in self._results(pending.response):
            strategy = "earliest" if timestamps.get(tp) == EARLIEST else "latest"
            if p.error_code == 0 and p.offset >= 0:
                epoch = getattr(p, "leader_epoch", -1)
                if strategy == "latest" and p.offset > 0:
                    self._resetting[tp] = strategy  # until the probe answers
                    self._probes.append(_Probe(tp, p.offset, lambda end, tp=tp, e=epoch: self._reset_to_end(tp, end, e)))
                else:
                    self._subs.set_reset_position(tp, strategy, p.offset, epoch)
            else:
                retry = True
                if p.error_code in _RETRIABLE_REFRESH:
                    self._metadata.request_update({tp.topic})
        if retry:
            self._reset_retry_at = now + self._config.retry_backoff_ms

    def _on_lookup(self, pending, now: float, lookup: "_Lookup", timestamps) -> None:
        lookup.in_flight -= set(timestamps)
        if pending.error is not None:
            lookup.event.cause = f"ListOffsets to broker {pending.sent_to} failed: {pending.error}"
            lookup.retry_at = now + self._config.retry_backoff_ms
            return
        for tp, p in self._results(pending.response):
            if p.error_code == 0:
                # offset -1 answers a timestamp no record reaches: kafka-python gives None for it.
                # Tansu 0.6 answers such a timestamp query with offset 0 and timestamp -1 instead: a
                # found record always has a timestamp, so that is no match either.
                queried = lookup.event.timestamps.get(tp, -1)
                missing = p.offset < 0 or (queried >= 0 and p.timestamp < 0)
                epoch = getattr(p, "leader_epoch", -1)
                if queried == LATEST and not missing and p.offset > 0:
                    lookup.in_flight.add(tp)
                    self._probes.append(_Probe(tp, p.offset, lambda end, lk=lookup, tp=tp, e=epoch, ts=p.timestamp:
                                               self._lookup_end(lk, tp, (end, ts, e))))
                    continue
                lookup.results[tp] = None if missing else (p.offset, p.timestamp, epoch)
            elif p.error_code in _RETRIABLE_REFRESH:
                lookup.event.cause = f"the broker answered {ke.for_code(p.error_code).__name__} for {tp}"
                self._metadata.request_update({tp.topic})
                lookup.retry_at = now + self._config.retry_backoff_ms
            else:
                lookup.event.fail(ke.for_code(p.error_code)(f"ListOffsets for {tp}"))
                return
        if set(lookup.results) >= set(lookup.event.timestamps):
            lookup.event.complete(dict(lookup.results))


    def _on_probe(self, pending, now: float, probe: "_Probe") -> None:
        self._probes.remove(probe)
        probe.on_end(probe.reported if pending.error is not None else
                     log_end(pending.response, probe.tp, probe.reported))

    def _reset_to_end(self, tp: TopicPartition, end: int, leader_epoch: int) -> None:
        self._resetting.pop(tp, None)
        self._subs.set_reset_position(tp, "latest", end, leader_epoch)

    def _lookup_end(self, lookup: "_Lookup", tp: TopicPartition, result) -> None:
        lookup.in_flight.discard(tp)
        lookup.results[tp] = result
        if set(lookup.results) >= set(lookup.event.timestamps):
            lookup.event.complete(dict(lookup.results))


class _Probe:
    __slots__ = ("tp", "reported", "on_end", "in_flight")

    def __init__(self, tp: TopicPartition, reported: int, on_end) -> None:
        self.tp = tp
        self.reported = reported      # the ListOffsets answer
        self.on_end = on_end          # (log end) -> None
        self.in_flight = False


class _Lookup:
    __slots__ = ("event", "results", "in_flight", "retry_at")

    def __init__(self, event: ListOffsetsEvent) -> None:
        self.event = event
        self.results: dict = {}
        self.in_flight: set = set()
        self.retry_at = 0.0
