"""The fetch sender (seed 000's FetchSender), on the background thread.

At most one Fetch in flight per broker, covering that broker's fetchable partitions (assigned,
positioned, not paused, not being revoked, and as their ``fetch`` machines say: nothing outstanding,
or one fetch buffered, fetched again from its end; specs/fetch.yaml). Responses go whole into the
FetchBuffer; records are decoded on the application thread. Nothing is sent while the buffer
(with what in-flight fetches may bring) is full.

Incremental fetch sessions (KIP-227, ``enable_incremental_fetch_sessions``): one FetchSession per
broker (_fetch_session.py) decides what each request lists and forgets. A broker that answers
session id 0 (Tansu) gets full fetches every time; with the option off every request is full and
asks for no session (session_id=0, session_epoch=-1). Versions are capped at 12, the last that
names topics instead of topic ids; sessions need 7.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from kafka.protocol.consumer import FetchRequest

from ..fetch._buffer import CompletedFetch, FetchBuffer
from ..policy import Action, Backoffs, classify, public_error
from ..structs import TopicPartition
from ._base import FOREVER, Outgoing
from ._fetch_session import SESSION_ERRORS, FetchPlan, FetchSession, PartitionData
from ._log_end import fetched_end

log = logging.getLogger("fsm_consumer.fetch")
_BEHIND_REFRESH_MS = 1000.0  # at most one Metadata refresh a second for positions past their log end


class FetchManager:
    def __init__(self, config, subscription, metadata, buffer: FetchBuffer, held, metrics) -> None:
        self._config = config
        self._subs = subscription
        self._metadata = metadata
        self._buffer = buffer
        self._held = held
        self._metrics = metrics
        self._isolation = 1 if config.isolation_level == "read_committed" else 0
        self._in_flight: set[int] = set()
        # a failing node or partition is retried a few times a second at most (the error policy)
        self._nodes = Backoffs(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._partitions = Backoffs(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self._sessions: dict[int, FetchSession] | None = {} if config.enable_incremental_fetch_sessions else None

    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        fetchable = self._subs.fetchable()
        if not fetchable:
            return FOREVER, []
        by_node: dict[int, list] = defaultdict(list)
        wait = FOREVER
        held = self._held
        for tp, position, leader_epoch, epoch in fetchable:
            if held and held.holds(("partition", tp)):
                continue  # raised by poll() until the user seeks it or gives it up
            later = self._partitions.wait(tp, now)
            if later:
                wait = min(wait, later)
                continue
            node = self._metadata.leader(tp)
            if node is None:
                self._metadata.request_update({tp.topic})  # the metadata manager paces itself
                continue
            if node in self._in_flight:
                continue
            later = self._nodes.wait(node, now)
            if later:
                wait = min(wait, later)
                continue
            by_node[node].append((tp, position, leader_epoch, epoch))
        out = []
        caught_up, busy = self._subs.caught_up_and_buffered() if by_node else (set(), set())
        for node, parts in by_node.items():
            if all(p[0] in caught_up for p in parts) and any(self._metadata.leader(tp) == node for tp in busy):
                # Only caught-up partitions are left to fetch from this broker while others of its
                # partitions are still being drained by the application: a long poll now would hold
                # those back for up to fetch_max_wait_ms once drained (their Fetch waits behind it).
                # The collector wakes us when it releases them; then all go in one Fetch.
                continue
            room = self._buffer.room()
            if room < min(self._config.max_partition_fetch_bytes, self._config.fetch_buffer_max_bytes // 4):
                break  # the application has not drained the buffer; its poll() wakes us
            # No answer may hold more than each partition's limit allows, so ask for no more than their sum:
            # the same on Apache Kafka, while a broker that ignores the partition limit (Tansu 0.6) then
            # answers in pieces that overlap with the decoding, instead of one answer filling the buffer and
            # the next Fetch waiting until the application has drained it (broker and consumer in turn)
            max_bytes = min(self._config.fetch_max_bytes, room, len(parts) * self._config.max_partition_fetch_bytes)
            self._buffer.reserve(max_bytes)
            self._in_flight.add(node)
            self._subs.fetch_sent([(p[0], p[3]) for p in parts])
            # every partition of this round, listed or implied by the session: the answer may carry any
            sent = {p[0]: (p[1], p[3]) for p in parts}
            plan = self._plan(node, parts)
            out.append(
                Outgoing(
                    self._request(plan, max_bytes),
                    node,
                    # mypy cannot type a lambda with default arguments (python/mypy#15459)
                    lambda pending, n, node=node, sent=sent, mb=max_bytes: self.on_response(pending, n, node, sent, mb),  # type: ignore[misc]
                    timeout_ms=self._config.request_timeout_ms + self._config.fetch_max_wait_ms,
                    min_version=7 if plan.session_id else 4,
                    max_version=12,
                )
            )
            self._metrics.fetch_sent(now)
            self._metrics.fetch_incremental += not plan.full
        return wait, out

    def _plan(self, node: int, parts) -> FetchPlan:
        pmax = self._config.max_partition_fetch_bytes
        # current_leader_epoch is the leader's epoch as the metadata knows it (Java's FetchPosition.currentLeader),
        # not the epoch of the last record consumed (the position's, for commits): after a leader change or a
        # restart that bumps the epoch, the record's would be fenced (FENCED_LEADER_EPOCH) for ever
        leader = self._metadata.leader_epoch
        data = {tp: PartitionData(position, leader(tp), pmax) for tp, position, _, _ in parts}
        if self._sessions is None:
            return FetchPlan.sessionless(data)
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = FetchSession(node)
        return session.build(data)

    def _request(self, plan: FetchPlan, max_bytes: int) -> FetchRequest:
        topics: dict[str, list] = defaultdict(list)
        for tp, d in plan.to_send.items():
            topics[tp.topic].append(
                FetchRequest.FetchTopic.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=d.leader_epoch,
                    fetch_offset=d.fetch_offset,
                    log_start_offset=d.log_start_offset,
                    partition_max_bytes=d.max_bytes,
                )
            )
        forgotten: dict[str, list[int]] = defaultdict(list)
        for tp in plan.to_forget:
            forgotten[tp.topic].append(tp.partition)
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=self._config.fetch_max_wait_ms,
            min_bytes=self._config.fetch_min_bytes,
            max_bytes=max_bytes,
            isolation_level=self._isolation,
            session_id=plan.session_id,
            session_epoch=plan.epoch,
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=ps) for t, ps in forgotten.items()],
            rack_id=self._config.client_rack,
        )

    def on_response(self, pending, now: float, node: int, sent: dict, reserved: int) -> None:
        self._in_flight.discard(node)
        session = self._sessions.get(node) if self._sessions is not None else None
        if pending.error is not None:
            if session is not None:
                session.handle_error()
            self._buffer.release_reservation(reserved)
            for tp, (_, epoch) in sent.items():
                self._subs.fetch_unanswered(tp, epoch)
            self._nodes.failed(node, now)
            self._metadata.request_update()  # the leader may have moved
            return
        response = pending.response
        usable = session is None or session.handle_response(response)
        if response.error_code or not usable:
            self._buffer.release_reservation(reserved)
            for tp, (_, epoch) in sent.items():
                self._subs.fetch_unanswered(tp, epoch)
            if response.error_code and response.error_code not in SESSION_ERRORS:
                # session errors need no backoff: the session was reset, the next fetch is full
                self._nodes.failed(node, now)
            if response.error_code and classify(response.error_code) is Action.REFRESH_METADATA:
                self._metadata.request_update({tp.topic for tp in sent})
            return
        self._nodes.succeeded(node)
        completed: list[CompletedFetch] = []
        for topic in response.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition_index)
                if tp not in sent:
                    continue
                offset, epoch = sent.pop(tp)
                self._subs.update_watermarks(tp, p.high_watermark, p.last_stable_offset, p.log_start_offset)
                records = p.records
                size = len(records) if records is not None else 0
                if p.error_code == 0 and size:
                    self._partitions.succeeded(tp)
                    self._release_topic(tp.topic)
                    self._subs.fetch_answered(tp, epoch, fetched_end(records, offset))
                    completed.append(
                        CompletedFetch(
                            tp,
                            offset,
                            epoch,
                            records,
                            p.high_watermark,
                            p.last_stable_offset,
                            p.log_start_offset,
                            p.aborted_transactions,
                            size,
                        )
                    )
                    continue
                self._subs.fetch_unanswered(tp, epoch)
                if p.error_code == 0:
                    self._partitions.succeeded(tp)
                    self._release_topic(tp.topic)
                    if 0 <= p.high_watermark < offset and now - self._metadata.refreshed_at >= _BEHIND_REFRESH_MS:
                        # the log ends below the position, no error: Tansu never answers OFFSET_OUT_OF_RANGE
                        # past the log end, and a topic deleted and created again looks so; Metadata tells
                        # that by the topic's id (the positions are then reset by policy)
                        self._metadata.request_update({tp.topic})
                    continue
                self._on_partition_error(tp, offset, epoch, p.error_code, now)
        # not in the answer (an incremental answer omits partitions with nothing new): fetch again
        for tp, (_, epoch) in sent.items():
            self._subs.fetch_unanswered(tp, epoch)
        self._metrics.fetch_completed(now, sum(c.size for c in completed))
        self._buffer.add(completed, reserved)

    def _on_partition_error(self, tp: TopicPartition, offset: int, epoch: int, code: int, now: float) -> None:
        """One partition's error in a Fetch answer, as the error policy says; the partition backs off
        either way, so an error that repeats costs a few requests a second, not thousands."""
        self._partitions.failed(tp, now)
        action = classify(code)
        if action is Action.REFRESH_METADATA:
            self._metadata.request_update({tp.topic})
        elif action is Action.RESET:
            strategy = self._subs.default_reset
            if strategy != "none":
                # one step under the subscription's lock, never raising: False if the partition was
                # unassigned, sought, paused or reset since this Fetch was sent (its epoch moved on)
                self._subs.reset_if_at(tp, offset, strategy, epoch)
                return
            error = public_error(code, f"Fetch at offset {offset} (auto_offset_reset='none')", partitions=[tp])
            if self._subs.position_is(tp, offset, epoch) and self._held.hold(("partition", tp), error):
                log.warning("%s", error)
        elif action is Action.FATAL:
            if code == 29:  # an ACL on the topic: held for the topic, not per partition
                key, error = ("topic", tp.topic), public_error(code, f"Fetch of topic {tp.topic!r}")
            else:
                key, error = ("partition", tp), public_error(code, f"Fetch at offset {offset}", partitions=[tp])
            if self._held.hold(key, error):
                log.warning("%s", error)

    def _release_topic(self, topic: str) -> None:
        if self._held:
            self._held.release(("topic", topic))
