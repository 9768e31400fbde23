"""The blocking request loop under ``ShareGroupAdmin``: this library's own transport (so TLS and SASL
settings apply), driven synchronously from the caller's thread, with the lookups an admin call needs
(the brokers, a group's coordinator) and broker error codes turned into kafka-python's typed errors that
say what failed and how to fix it.

Every call has one deadline: what is retried inside it (a coordinator that is loading or moved, a
connection lost mid-request) is retried until then, and then the call fails with
``fsm_consumer.errors.KafkaTimeoutError`` naming it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import kafka.errors as ke
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from .._config import ConsumerConfig
from ..errors import AuthenticationFailedError, KafkaTimeoutError
from ..machines import MonotonicClock
from ..structs import TopicPartition
from ..transport import KafkaTransport
from ..transport._errors import AuthenticationError, RequestTimedOut, TransportError, UnsupportedVersion

__all__ = ["NO_SHARE_GROUPS", "AdminWire", "broker_error"]

NO_SHARE_GROUPS = "this broker does not support share groups (Kafka 4.2+ needed; Tansu has none)"

# codes that mean "ask the coordinator again, maybe another one": COORDINATOR_LOAD_IN_PROGRESS,
# COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
_COORDINATOR_MOVED = frozenset({14, 15, 16})
_RETRY_PAUSE_S = 0.1

# what to do about a broker error code, said after what failed
_FIXES: dict[int, str] = {
    3: "check the topic name and partition numbers (the topic must exist)",
    24: "a group id must be a non-empty string",
    29: "grant this principal DESCRIBE (and READ) on the topic",
    30: "grant this principal DESCRIBE (to read) or ALTER/DELETE (to change) on the group",
    31: "grant this principal the cluster permission the request needs",
    35: NO_SHARE_GROUPS,
    40: "check the setting's name and value against the broker's limits (group.share.* in its server.properties)",
    68: "the group has active members: stop its consumers first (a share group's offsets change only while empty)",
    69: "check the group id: a share group exists once a member joined it or its offsets were set",
    100: "the topic was deleted (or recreated); check the topic name",
}


def broker_error(code: int, what: str, message: str | None = None) -> Exception:
    """kafka-python's typed error for ``code``: ``what`` failed, the broker's own ``message`` when it sent
    one, and what to do about it."""
    text = f"{what} failed"
    if message:
        text += f" ({message.rstrip('.')})"
    fix = _FIXES.get(code)
    if fix:
        text += f": {fix}"
    error: Exception = ke.for_code(code)(text)
    return error


class AdminWire:
    """One transport and the lookups of an admin: brokers from Metadata, coordinators from FindCoordinator.

    Not for use by several threads at once (the transport belongs to the thread that first uses it).
    """

    def __init__(self, config: ConsumerConfig, timeout_ms: float) -> None:
        self.config = config
        self.timeout_ms = timeout_ms
        self.clock = MonotonicClock()
        self.transport = KafkaTransport(config, clock=self.clock)
        self.brokers: dict[int, tuple[str, int]] = {}
        self._coordinators: dict[str, int] = {}
        self.call: str | None = None  # the public call under way, for the messages of timeouts

    def close(self) -> None:
        self.transport.close()

    @property
    def closed(self) -> bool:
        return self.transport.closed

    def deadline(self) -> float:
        """A new call's deadline (clock ms)."""
        return self.clock.now_ms() + self.timeout_ms

    # -- one request --------------------------------------------------------------------------------
    def roundtrip(
        self,
        build: Callable[[], ApiMessage],
        node: int | None,
        what: str,
        deadline: float,
        *,
        min_version: int = 0,
        share_api: bool = False,
    ) -> Any:
        """Send ``build()`` to ``node`` (None: any broker) and wait for its answer until ``deadline``; a
        connection lost meanwhile is tried again with a fresh request. ``share_api``: the request is one
        of KIP-932's, so a broker without it is told as "no share groups"."""
        if self.transport.closed:
            raise ke.KafkaConnectionError(f"{what}: the admin client is closed")
        last: Exception | None = None
        while True:
            remaining = deadline - self.clock.now_ms()
            if remaining <= 0:
                raise self._timeout(what, last)
            pending = self.transport.send(build(), node, timeout_ms=remaining, min_version=min_version)
            while not pending.done:
                self.transport.poll(min(100.0, max(0.0, deadline - self.clock.now_ms())))
            if pending.error is None:
                return pending.response
            error = pending.error
            if isinstance(error, UnsupportedVersion):
                if share_api:
                    raise ke.UnsupportedVersionError(f"{what} failed: {NO_SHARE_GROUPS} ({error})") from error
                raise ke.UnsupportedVersionError(f"{what} failed: {error}") from error
            if isinstance(error, AuthenticationError):
                raise AuthenticationFailedError(f"{what} failed: {error}") from error
            if isinstance(error, RequestTimedOut):
                raise self._timeout(what, error)
            if not isinstance(error, TransportError):
                raise error
            last = error  # connection lost, node not ready: again, until the deadline
            self._pause(deadline)

    def _timeout(self, what: str, cause: Exception | None) -> KafkaTimeoutError:
        servers = ",".join(self.config.bootstrap_servers)
        why = "; ".join(
            f"{n['address']}: {n.get('last_error') or n.get('state')}"
            for n in self.transport.node_states().values()
            if n.get("last_error")
        )
        doing = f"{self.call}: {what}" if self.call and self.call != what else what
        error = KafkaTimeoutError(
            f"{doing}: no answer within {self.timeout_ms:.0f} ms from bootstrap_servers {servers!r}"
            + (f" ({why})" if why else f" (last error: {cause})" if cause is not None else "")
            + "; check that the brokers are up and reachable, or allow more time (timeout_ms)"
        )
        error.__cause__ = cause
        return error

    def _pause(self, deadline: float) -> None:
        time.sleep(max(0.0, min(_RETRY_PAUSE_S, (deadline - self.clock.now_ms()) / 1000.0)))

    # -- lookups --------------------------------------------------------------------------------------
    def metadata(self, topics: list[str] | None, deadline: float) -> Any:
        """A Metadata answer for ``topics`` (None: every topic, []: none), which also tells the brokers."""

        def build() -> ApiMessage:
            asked = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
            return MetadataRequest(topics=asked, allow_auto_topic_creation=False)

        response = self.roundtrip(build, None, "Metadata", deadline)
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        if brokers and brokers != self.brokers:
            self.brokers = brokers
            self.transport.update_brokers(brokers)
        return response

    def coordinator(self, group_id: str, deadline: float) -> int:
        """The node id of ``group_id``'s coordinator (FindCoordinator, key type GROUP: share groups too)."""
        node = self._coordinators.get(group_id)
        if node is not None:
            return node
        if not self.brokers:
            self.metadata([], deadline)
        what = f"FindCoordinator for share group {group_id!r}"
        while True:
            response = self.roundtrip(
                lambda: FindCoordinatorRequest(key=group_id, key_type=0, coordinator_keys=[group_id]),
                None,
                what,
                deadline,
            )
            found = response.coordinators[0] if getattr(response, "coordinators", None) else response
            code = found.error_code
            if code == 0 and found.node_id >= 0:
                if self.brokers.get(found.node_id) != (found.host, found.port):
                    self.brokers[found.node_id] = (found.host, found.port)
                    self.transport.update_brokers(self.brokers)
                self._coordinators[group_id] = found.node_id
                return int(found.node_id)
            if code not in _COORDINATOR_MOVED:
                raise broker_error(code, what, getattr(found, "error_message", None))
            if self.clock.now_ms() >= deadline:
                raise self._timeout(what, broker_error(code, what))
            self._pause(deadline)

    def group_call(
        self,
        group_id: str,
        build: Callable[[], ApiMessage],
        what: str,
        deadline: float,
        code_of: Callable[[Any], int],
        *,
        min_version: int = 0,
    ) -> Any:
        """``build()`` sent to ``group_id``'s coordinator, found again while the answer (``code_of``) says
        it moved or is loading; other codes are the caller's to judge."""
        while True:
            node = self.coordinator(group_id, deadline)
            response = self.roundtrip(build, node, what, deadline, min_version=min_version, share_api=True)
            code = code_of(response)
            if code not in _COORDINATOR_MOVED:
                return response
            self._coordinators.pop(group_id, None)
            if self.clock.now_ms() >= deadline:
                raise self._timeout(what, broker_error(code, what))
            self._pause(deadline)

    # -- partitions -------------------------------------------------------------------------------------
    def leaders(self, topics: list[str], deadline: float) -> dict[TopicPartition, int]:
        """Every partition of those ``topics`` that exist and its leader's node id (-1: none now)."""
        if not topics:
            return {}
        response = self.metadata(topics, deadline)
        leaders = {}
        for t in response.topics:
            if t.error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION: no such topic (any more)
                continue
            if t.error_code:
                raise broker_error(t.error_code, f"Metadata of topic {t.name!r}")
            for p in t.partitions:
                leaders[TopicPartition(t.name, p.partition_index)] = p.leader_id
        return leaders

    def offsets_at(self, partitions: Iterable[TopicPartition], spec: int, what: str) -> dict[TopicPartition, int]:
        """Each partition's offset at ``spec`` (-1 latest, -2 earliest); an unknown partition raises."""
        asked = set(partitions)
        deadline = self.deadline()
        leaders = self.leaders(sorted({tp.topic for tp in asked}), deadline)
        unknown = sorted(asked - set(leaders))
        if unknown:
            raise broker_error(3, f"{what} of {', '.join(f'{t}-{p}' for t, p in unknown)}")
        found = self.list_offsets(leaders, dict.fromkeys(asked, spec), deadline, what)
        missing = sorted(asked - set(found))
        if missing:
            raise broker_error(5, f"{what} of {', '.join(f'{t}-{p}' for t, p in missing)}")  # LEADER_NOT_AVAILABLE
        return found

    def list_offsets(
        self, leaders: Mapping[TopicPartition, int], specs: Mapping[TopicPartition, int], deadline: float, what: str
    ) -> dict[TopicPartition, int]:
        """ListOffsets for each partition of ``specs`` (a timestamp: -1 latest, -2 earliest) to its leader,
        read uncommitted; partitions without a leader, or whose answer is an error, are left out."""
        by_node: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
        for tp, spec in specs.items():
            leader = leaders.get(tp, -1)
            if leader >= 0:
                by_node[leader][tp] = spec
        found = {}
        T = ListOffsetsRequest.ListOffsetsTopic
        for node, asked in sorted(by_node.items()):
            topics: dict[str, list[Any]] = defaultdict(list)
            for tp, spec in sorted(asked.items()):
                topics[tp.topic].append(
                    T.ListOffsetsPartition(partition_index=tp.partition, current_leader_epoch=-1, timestamp=spec)
                )

            def build(topics: dict[str, list[Any]] = topics) -> ApiMessage:
                return ListOffsetsRequest(
                    replica_id=-1, isolation_level=0, topics=[T(name=t, partitions=ps) for t, ps in topics.items()]
                )

            response = self.roundtrip(build, node, f"{what} (ListOffsets to node {node})", deadline)
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code == 0 and tp in asked and p.offset >= 0:
                        found[tp] = p.offset
        return found
