"""Cluster metadata: brokers, partitions and their leaders.

Refreshed every ``metadata_max_age_ms``, on request (an unknown leader, NOT_LEADER_OR_FOLLOWER,
a new subscription), and for TopicMetadataEvent callers. One Metadata request at a time; a failed
one is retried after a backoff; so is an answer that lacks a topic this consumer needs (unknown,
deleted, still being created): exponential up to ``retry_backoff_max_ms``, never a tight loop.
TOPIC_AUTHORIZATION_FAILED is held for the topic (raised by poll()) until an answer includes it.
No answer at all within ``bootstrap_timeout_ms`` of the start: a KafkaTimeoutError naming the bootstrap
servers and why each failed is held (raised by poll() and blocking calls) until a broker answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
from kafka.protocol.metadata import MetadataRequest

from ..errors import KafkaTimeoutError
from ..policy import Action, Backoffs, classify, public_error
from ..structs import TopicPartition
from ._base import FOREVER, Outgoing

if TYPE_CHECKING:
    from ..events import ApplicationEvent

log = logging.getLogger("fsm_consumer.metadata")
_BOOTSTRAP = ("bootstrap",)  # the held error's key


@attrs.define(slots=True)
class TopicInfo:
    leaders: dict[int, int]  # partition -> leader node id (-1: none)
    leader_epochs: dict[int, int]
    error: int = 0  # topic-level error code of the last answer
    internal: bool = False
    topic_id: str | None = None  # KIP-516's (Metadata v10+; None when the broker sends none)


class MetadataManager:
    def __init__(
        self,
        config,
        topics_needed: Callable[[], set[str]],
        held=None,
        node_states: Callable[[], dict[int, dict[str, Any]]] | None = None,
    ) -> None:
        self._config = config
        self._topics_needed = topics_needed
        self._held = held
        self._node_states = node_states  # the transport's snapshot: why the bootstrap servers fail
        self._bootstrap_deadline: float | None = None  # set by the first poll
        self._last_error: BaseException | None = None  # of the last failed Metadata request
        self._backoff = Backoffs(config.retry_backoff_ms, config.retry_backoff_max_ms)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id: str | None = None
        self.version = 0  # bumps when brokers or leaders change
        self._last_ok = -FOREVER
        self._retry_at = 0.0
        self._need_all = False
        self._need = True
        self._extra: set[str] = set()
        self._in_flight = False
        self._waiters: list[tuple[ApplicationEvent, float]] = []  # (event, requested at) for TopicMetadataEvent
        self.all_topics_wanted = False  # pattern subscriptions need every topic
        self._ids: dict[str, str] = {}  # topic name -> the id it last had (kept when the topic goes away)
        # a topic deleted and created again under its name (its id changed): (name, old id, new id)
        self.on_recreated: Callable[[str, str, str], None] | None = None

    @property
    def refreshed_at(self) -> float:
        """When the last Metadata answer came (-FOREVER before the first)."""
        return self._last_ok

    # -- asks -----------------------------------------------------------------------------
    def request_update(self, topics: set[str] | None = None, *, all_topics: bool = False) -> None:
        self._need = True
        self._need_all |= all_topics
        if topics:
            self._extra |= topics

    def add_waiter(self, event, now: float) -> None:
        """Complete ``event`` after the next refresh that starts later: a TopicMetadataEvent with the
        topics' partitions, a BootstrapEvent with None. The refresh asks for every topic, as
        kafka-python's lookups do: naming an unknown topic would have the broker create it."""
        self._waiters.append((event, now))
        self.request_update(all_topics=True)

    def explain_missing(self, tp: TopicPartition) -> str:
        """Why ``tp`` has no usable leader, in words for a timeout message."""
        if not self.ready:
            return (
                "no broker has answered a Metadata request yet: check bootstrap_servers "
                f"{','.join(self._config.bootstrap_servers)} and that the brokers are up"
            )
        info = self.topics.get(tp.topic)
        if info is None:
            return f"topic {tp.topic!r} does not exist (or this client is not allowed to describe it)"
        if tp.partition not in info.leaders:
            return (
                f"partition {tp.partition} of topic {tp.topic!r} does not exist: the topic has "
                f"{len(info.leaders)} partitions"
            )
        return f"partition {tp.partition} of topic {tp.topic!r} has no leader at the moment"

    # -- reads ----------------------------------------------------------------------------
    def leader(self, tp: TopicPartition) -> int | None:
        info = self.topics.get(tp.topic)
        if info is None:
            return None
        node = info.leaders.get(tp.partition, -1)
        return node if node >= 0 and node in self.brokers else None

    def leader_epoch(self, tp: TopicPartition) -> int:
        """The partition's leader epoch in the last Metadata answer (-1: not known). A Fetch names it as its
        current_leader_epoch: a broker whose leader has moved on fences the request, and the answer says to
        ask for Metadata again."""
        info = self.topics.get(tp.topic)
        return -1 if info is None else info.leader_epochs.get(tp.partition, -1)

    def partitions(self, topic: str) -> list[int] | None:
        info = self.topics.get(topic)
        return None if info is None or info.error else sorted(info.leaders)

    @property
    def ready(self) -> bool:
        return self._last_ok > -FOREVER

    def bootstrap_error(self) -> KafkaTimeoutError:
        """No broker answered within bootstrap_timeout_ms: which servers, why each failed, how to fix it
        (the last failed request's error as the cause). Any thread may call it."""
        timeout = self._config.bootstrap_timeout_ms
        servers = ",".join(self._config.bootstrap_servers)
        nodes = self._node_states() if self._node_states is not None else {}
        why = "; ".join(
            f"{n['address']}: {n.get('last_error') or n.get('state')}"
            for node, n in sorted(nodes.items(), reverse=True)
            if int(node) < 0
        )
        error = KafkaTimeoutError(
            f"no broker answered within bootstrap_timeout_ms ({timeout} ms): could not bootstrap from "
            f"bootstrap_servers {servers!r}{f' ({why})' if why else ''}. Check that the brokers are up and "
            "that bootstrap_servers names their listeners as host:port reachable from this machine; a cluster "
            "that takes longer to come up needs a larger bootstrap_timeout_ms"
        )
        error.__cause__ = self._last_error
        error.reasons = why  # for a caller that words its own message (ingest)
        return error

    # -- the manager loop -------------------------------------------------------------------
    def poll(self, now: float) -> tuple[float, list[Outgoing]]:
        wait = self._watch_bootstrap(now)
        if self._in_flight:
            return wait, []
        due = self._last_ok + self._config.metadata_max_age_ms
        if not (self._need or now >= due):
            return min(due - now, wait), []
        if now < self._retry_at:
            return min(self._retry_at - now, wait), []
        wanted = self._topics_needed() | self._extra
        if self._need_all or self.all_topics_wanted:
            topics = None  # all topics
        else:
            topics = [MetadataRequest.MetadataRequestTopic(name=t) for t in sorted(wanted)]
        request = MetadataRequest(
            topics=topics,
            allow_auto_topic_creation=self._config.allow_auto_create_topics,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        self._in_flight = True
        self._sent_at = now
        self._sent_extra, self._sent_all = set(self._extra), topics is None
        self._need = False
        return wait, [Outgoing(request, None, self.on_response)]

    def _watch_bootstrap(self, now: float) -> float:
        """ms until the bootstrap deadline (FOREVER once a broker answered or it passed); at it, with
        no answer yet, the bootstrap failure is held."""
        if self._bootstrap_deadline is None:
            timeout = self._config.bootstrap_timeout_ms
            self._bootstrap_deadline = FOREVER if timeout is None else now + timeout
        if self.ready:
            return FOREVER
        if now < self._bootstrap_deadline:
            return self._bootstrap_deadline - now
        self._bootstrap_deadline = FOREVER  # held once, until an answer comes
        if self._held is not None:
            error = self.bootstrap_error()
            self._held.hold(_BOOTSTRAP, error)
            log.warning("%s", error)
        return FOREVER

    def on_response(self, pending, now: float) -> None:
        self._in_flight = False
        if pending.error is not None:
            self._last_error = pending.error
            self._need = True
            self._retry_at = self._backoff.failed("metadata", now)
            return
        if not self.ready and self._held is not None:
            self._held.release(_BOOTSTRAP)
        r = pending.response
        brokers = {b.node_id: (b.host, b.port) for b in r.brokers}
        changed = brokers != self.brokers
        self.brokers = brokers
        self.cluster_id = getattr(r, "cluster_id", None)
        retry = False
        for t in r.topics:
            leaders = {p.partition_index: p.leader_id for p in t.partitions}
            epochs = {p.partition_index: p.leader_epoch for p in t.partitions}
            old = self.topics.get(t.name)
            if (
                t.error_code not in (0, 3)
                and classify(t.error_code) is not Action.FATAL
                and old is not None
                and not old.error
            ):
                # an answer with a transient error (LEADER_NOT_AVAILABLE, a broker loading) says nothing of
                # the topic's partitions: keep what was known, ask again (partitions retired here would come
                # back at auto_offset_reset, past every record in between)
                retry = True
                continue
            if old is None or old.leaders != leaders:
                changed = True
            leaderless = any(p.error_code == 5 for p in t.partitions)  # LEADER_NOT_AVAILABLE
            if (t.error_code not in (0, 3)) or leaderless:
                retry = True  # e.g. a topic still being created
            if t.error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION: the topic is gone (or not there yet)
                self.topics.pop(t.name, None)
                continue
            if self._held is not None:
                if t.error_code and classify(t.error_code) is Action.FATAL:
                    self._held.hold(("topic", t.name), public_error(t.error_code, f"Metadata of topic {t.name!r}"))
                elif t.error_code == 0:
                    self._held.release(("topic", t.name))
            topic_id = _topic_id(t)
            self.topics[t.name] = TopicInfo(
                leaders, epochs, t.error_code, bool(getattr(t, "is_internal", False)), topic_id
            )
            if topic_id is not None:
                before = self._ids.get(t.name)
                self._ids[t.name] = topic_id
                if before is not None and before != topic_id:
                    changed = True
                    if self.on_recreated is not None:
                        self.on_recreated(t.name, before, topic_id)
        if self._sent_all:
            returned = {t.name for t in r.topics}
            for gone in set(self.topics) - returned:
                del self.topics[gone]
                changed = True
            self._need_all = False
        self._extra -= self._sent_extra
        if changed:
            self.version += 1
        self._last_ok = now
        missing = {t for t in self._topics_needed() if t not in self.topics}
        if retry or missing:
            # asked again, paced: a topic that does not exist (yet) costs a request a second at most
            self._need = True
            self._retry_at = self._backoff.failed("metadata", now)
        else:
            self._backoff.succeeded("metadata")
        # callers waiting for topic metadata: answer those whose wait began before this request
        still = []
        for event, since in self._waiters:
            if since <= self._sent_at:
                topics = getattr(event, "topics", ())
                if topics is None:
                    topics = set(self.topics)
                event.complete({t: self.partitions(t) for t in topics if self.partitions(t) is not None})
            else:
                still.append((event, since))
        self._waiters = still

    def expire(self, now: float) -> None:
        self._waiters = [(e, s) for e, s in self._waiters if not (e.future is not None and e.future.done)]


def _topic_id(topic: object) -> str | None:
    """The topic id of a Metadata answer's topic as text; None for none (older versions, or all zeros)."""
    value = getattr(topic, "topic_id", None)
    if value is None:
        return None
    text = str(value)
    return None if set(text.replace("-", "")) <= {"0"} else text
