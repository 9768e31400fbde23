"""The share consumer's request manager on the background thread: the sans-IO share managers' plain data turned
into ShareGroupHeartbeat, ShareFetch and ShareAcknowledge requests, and their answers back into plain data.

Nothing here decides anything: when a heartbeat goes and what epoch it carries is specs/share_membership.yaml's,
what a share session may send is specs/share_session.yaml's, what becomes of an acquired batch is
specs/share_batch.yaml's. This module converts, addresses (the coordinator's node for heartbeats, each
partition's leader for fetches), and keeps the share state under the one lock the application thread takes
too (it hands records out of the same buffer and records acknowledgements in it).
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Callable
from typing import Any

from ..managers._base import Outgoing
from ..managers._share_fetch import (
    ShareAcknowledgeIntent,
    ShareFetchAnswer,
    ShareFetchIntent,
    ShareFetchManager,
    SharePartitionAnswer,
)
from ..managers._share_heartbeat import ShareHeartbeat, ShareHeartbeatAnswer, ShareHeartbeatManager
from ..managers._share_membership import ShareMembershipManager
from ..managers._share_session import TopicIdPartition
from ..protocol import (
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupHeartbeatRequest,
)

log = logging.getLogger("fsm_consumer.share")

_ACQUIRE_MODES = {"batch_optimized": 0, "record_limit": 1}


class ShareRequests:
    """``poll(now) -> (wait_ms, [Outgoing])`` for one share member (Kafka's RequestManager contract)."""

    def __init__(
        self,
        *,
        group_id: str,
        membership: ShareMembershipManager,
        heartbeat: ShareHeartbeatManager,
        fetch: ShareFetchManager,
        metadata: Any,
        lock: threading.Lock,
        notify: Callable[[], None],
        acquire_mode: str = "batch_optimized",
        request_timeout_ms: float = 30_000,
        connected: Callable[[int], bool] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._group = group_id
        self.membership = membership
        self.heartbeat = heartbeat
        self.fetch = fetch
        self._metadata = metadata
        self._lock = lock
        self._notify = notify  # wakes the application thread: records came, outcomes are due
        self._acquire_mode = _ACQUIRE_MODES[acquire_mode]
        self._request_timeout_ms = request_timeout_ms
        self._connected = connected  # the transport's ready(node): whether the connection to a node still stands
        self._closing: list[ShareFetchIntent | ShareAcknowledgeIntent] = []  # close()'s requests, sent next
        self._clock = clock  # the background loop's own clock (see poll)
        self._metadata_version: Any = None
        self.sent_requests = 0

    # -- asked through the membership's close_sessions hook (under the lock already) --------------------
    def close_sessions(self, now: float) -> bool:
        """Every share session closes at epoch -1 with the last acknowledgements; True when none is open."""
        self._closing.extend(self.fetch.close(now))
        return self.fetch.all_closed

    # -- the loop -----------------------------------------------------------------------------------------
    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        with self._lock:
            # the loop read ``now`` before this waited for the share lock, while the application may have handed
            # records out and acknowledged them: what is sent now is stamped after that (an acknowledgement's
            # sending never before its record's hand-out), still before the request goes out
            return self._poll(self._fresh(now))

    def _fresh(self, now: float) -> float:
        return now if self._clock is None else max(now, self._clock())

    def _poll(self, now: float) -> tuple[float, list[Outgoing]]:
        m = self.membership
        self._watch_metadata(now)
        m.tick(now)
        self.fetch.member_id = m.member_id
        self._watch_connections(now)
        out: list[Outgoing] = []
        wait, beats = self.heartbeat.poll(now)
        for hb in beats:
            out.append(self._heartbeat_request(hb))
        intents, self._closing = self._closing, []
        intents.extend(self.fetch.poll(now))
        for intent in intents:
            out.append(self._share_request(intent, now))
        if self.fetch.metadata_wanted:
            self.fetch.metadata_wanted = False
            self._metadata.request_update()
        self._sessions_closed(now)
        self.sent_requests += len(out)
        return min(wait, self._next_deadline(now)), out

    def _next_deadline(self, now: float) -> float:
        """How long until a lock, a session's timer or the membership's next timer is due."""
        due = math.inf
        for machine in (
            self.membership.machine,
            *(s.machine for s in self.fetch.sessions.values()),
            *(b.machine for b in self.fetch.buffer.batches()),
        ):
            if machine.next_deadline is not None:
                due = min(due, machine.next_deadline - now)
        return max(0.0, due)

    def _watch_metadata(self, now: float) -> None:
        version = self._metadata.version
        if version != self._metadata_version:
            self._metadata_version = version
            self.membership.on_metadata_changed(now)

    def _watch_connections(self, now: float) -> None:
        """A share session lives on its broker only as long as the connection it was opened on: the broker ends it
        with the connection, releasing what it acquired (maybe to another member at once). A request in flight
        learns of the loss by failing; a session with nothing in flight (its acks allowed: open, close_due)
        learns of it here, before a record it acquired is handed out or an acknowledgement sent in it. Once a
        session answered, its connection was ready: not ready now, the socket it stood on is gone."""
        if self._connected is None:
            return
        lost = []
        for node, session in list(self.fetch.sessions.items()):
            if session.acks_allowed and not self.fetch.in_flight(node) and not self._connected(node):
                log.info("share session with node %d: its connection was lost", node)
                lost.extend(self.fetch.on_ended(node, "its connection was lost", now))
        if lost:
            self._notify()  # their acknowledgements are reported failed

    def _sessions_closed(self, now: float) -> None:
        if self.membership.state == "prepare_leaving" and self.fetch.all_closed:
            self.membership.on_sessions_closed(now)

    # -- heartbeats ---------------------------------------------------------------------------------------
    def _heartbeat_request(self, hb: ShareHeartbeat) -> Outgoing:
        request = ShareGroupHeartbeatRequest(
            group_id=hb.group_id,
            member_id=hb.member_id,
            member_epoch=hb.member_epoch,
            rack_id=hb.rack_id,
            subscribed_topic_names=list(hb.subscribed_topic_names) if hb.subscribed_topic_names is not None else None,
        )

        def answered(pending: Any, now: float) -> None:
            with self._lock:
                if pending.error is not None:
                    self.heartbeat.on_failure(hb, pending.error, now)
                else:
                    self.heartbeat.on_answer(hb, _heartbeat_answer(pending.response), now)
                self._sessions_closed(now)
            self._notify()

        timeout = self._request_timeout_ms
        return Outgoing(request, hb.node, answered, timeout_ms=timeout, min_version=1)

    # -- share fetches and acknowledgements -----------------------------------------------------------------
    def _share_request(self, intent: ShareFetchIntent | ShareAcknowledgeIntent, now: float) -> Outgoing:
        sent_at = now  # the locks of what it acquires count from here: no later than the broker's start
        names = self._names()
        renew = isinstance(intent, ShareAcknowledgeIntent) and intent.is_renew_ack
        if isinstance(intent, ShareFetchIntent):
            request: Any = ShareFetchRequest(
                group_id=self._group,
                member_id=intent.member_id,
                share_session_epoch=intent.epoch,
                max_wait_ms=intent.max_wait_ms,
                min_bytes=intent.min_bytes,
                max_bytes=intent.max_bytes,
                max_records=intent.max_records,
                batch_size=intent.batch_size,
                share_acquire_mode=self._acquire_mode,
                is_renew_ack=False,
                topics=_fetch_topics(intent.topics_to_add, intent.acks),
                forgotten_topics_data=_forgotten(intent.forgotten),
            )
            fetching = True
        else:
            request = ShareAcknowledgeRequest(
                group_id=self._group,
                member_id=intent.member_id,
                share_session_epoch=intent.epoch,
                is_renew_ack=renew,
                topics=_ack_topics(intent.acks),
            )
            fetching = False
        node = intent.node
        # RENEW and the record limit are v2 (Kafka 4.2): an older broker refuses them rather than dropping them
        needs_v2 = renew or (fetching and self._acquire_mode == 1)

        def answered(pending: Any, now: float) -> None:
            with self._lock:
                now = self._fresh(now)
                if pending.error is not None:
                    log.info("share request to node %s failed: %r", node, pending.error)
                    self.fetch.on_failure(node, f"{type(pending.error).__name__}: {pending.error}", now)
                else:
                    answer = _share_answer(pending.response, names, self._metadata)
                    log.debug(
                        "share %s answered by node %s after %.0f ms: %s",
                        "fetch" if fetching else "acknowledge",
                        node,
                        now - sent_at,
                        [(p.partition, p.acquired_records, p.error, p.acknowledge_error) for p in answer.partitions],
                    )
                    if fetching:
                        self.fetch.on_fetch_answer(node, answer, sent_at, now)
                    else:
                        self.fetch.on_acknowledge_answer(node, answer, sent_at, now)
                self._sessions_closed(now)
            self._notify()

        # a ShareFetch waits up to max_wait_ms on the broker: its deadline leaves room for that
        timeout = self._request_timeout_ms + (intent.max_wait_ms if isinstance(intent, ShareFetchIntent) else 0)
        return Outgoing(request, node, answered, timeout_ms=timeout, min_version=2 if needs_v2 else 1)

    def _names(self) -> dict[str, str]:
        """topic id -> name, from the metadata (records name their topic)."""
        return {info.topic_id: name for name, info in self._metadata.topics.items() if info.topic_id}


def _uuid(topic_id: str) -> uuid.UUID:
    return uuid.UUID(topic_id)


def _batches(cls: Any, acks: Any) -> list[Any]:
    return [
        cls(first_offset=b.first_offset, last_offset=b.last_offset, acknowledge_types=list(b.acknowledge_types))
        for b in acks
    ]


def _topics(topic: Any, partition: Any, partitions: Any, acks: Any) -> list[Any]:
    """The Topics of a ShareFetch (``topic`` FetchTopic, ``partition`` its FetchPartition) or a ShareAcknowledge
    (AcknowledgeTopic, AcknowledgePartition): ``partitions`` listed, each with the acknowledgements of ``acks``."""
    by_topic: dict[str, dict[int, Any]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic_id, {})[tp.partition] = ()
    for tp, batches in acks.items():
        by_topic.setdefault(tp.topic_id, {})[tp.partition] = batches
    return [
        topic(
            topic_id=_uuid(tid),
            partitions=[
                partition(partition_index=p, acknowledgement_batches=_batches(partition.AcknowledgementBatch, batches))
                for p, batches in sorted(parts.items())
            ],
        )
        for tid, parts in sorted(by_topic.items())
    ]


def _fetch_topics(partitions: Any, acks: Any) -> list[Any]:
    topic = ShareFetchRequest.FetchTopic
    return _topics(topic, topic.FetchPartition, partitions, acks)


def _ack_topics(acks: Any) -> list[Any]:
    topic = ShareAcknowledgeRequest.AcknowledgeTopic
    return _topics(topic, topic.AcknowledgePartition, (), acks)


def _forgotten(partitions: Any) -> list[Any]:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic_id, []).append(tp.partition)
    return [
        ShareFetchRequest.ForgottenTopic(topic_id=_uuid(tid), partitions=sorted(parts))
        for tid, parts in sorted(by_topic.items())
    ]


def _heartbeat_answer(r: Any) -> ShareHeartbeatAnswer:
    assignment = None
    if r.assignment is not None:
        assignment = {str(t.topic_id): tuple(t.partitions) for t in r.assignment.topic_partitions}
    return ShareHeartbeatAnswer(
        error=r.error_code,
        error_message=r.error_message,
        member_id=r.member_id,
        member_epoch=r.member_epoch,
        heartbeat_interval_ms=r.heartbeat_interval_ms,
        assignment=assignment,
    )


def _share_answer(r: Any, names: dict[str, str], metadata: Any) -> ShareFetchAnswer:
    """A ShareFetch or ShareAcknowledge response as plain data; a partition's records travel with its topic's
    name and partition, for the buffer's decoder."""
    partitions = []
    for t in r.responses:
        tid = str(t.topic_id)
        name = names.get(tid)
        for p in t.partitions:
            acquired = tuple(
                (a.first_offset, a.last_offset, a.delivery_count) for a in getattr(p, "acquired_records", ())
            )
            leader = p.current_leader
            records = getattr(p, "records", None)
            partitions.append(
                SharePartitionAnswer(
                    topic_id=tid,
                    partition=p.partition_index,
                    error=p.error_code,
                    acknowledge_error=getattr(p, "acknowledge_error_code", 0),
                    records_bytes=(name, p.partition_index, records, acquired[0][0] if acquired else 0),
                    acquired_records=acquired,
                    current_leader=(leader.leader_id, leader.leader_epoch) if leader is not None else None,
                )
            )
    return ShareFetchAnswer(
        error=r.error_code,
        partitions=tuple(partitions),
        acquisition_lock_timeout_ms=getattr(r, "acquisition_lock_timeout_ms", 0) or 0,
        error_message=r.error_message,
    )


__all__ = ["ShareRequests", "TopicIdPartition"]
