"""KIP-932 share groups spoken by hand, for the Apache Kafka tests: a member that joins with ShareGroupHeartbeat
and keeps heartbeating on its own connection (``RawShareMember``), ShareFetch and ShareAcknowledge on a
``_wire.Connection`` (a share session belongs to its connection), and the group's admin requests, each a
plain request over a fresh socket. No fsm_consumer client code is used: these pin down the broker."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse

from fsm_consumer.broker._wire import Connection, pick_version, send_request
from fsm_consumer.protocol import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)

ACCEPT, RELEASE, REJECT = 1, 2, 3  # acknowledge types
# error codes
INVALID_RECORD_STATE, SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH = 121, 122, 123
GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID = 69, 25
COORDINATOR_NOT_READY = frozenset({14, 15, 16})  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR

#: {(topic id, partition): [(first offset, last offset, acknowledge type), ...]}
Acks = Mapping[tuple[uuid.UUID, int], Sequence[tuple[int, int, int]]]


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, explain=None) -> Any:
    """``predicate()``'s first true answer; on timeout an AssertionError saying what was awaited."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            detail = f": {explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{detail}")
        time.sleep(0.1)


def _request(kafka, request: Any, response_type: Any, *, timeout: float = 10.0) -> Any:
    version = pick_version(kafka.api_versions, type(request))
    return send_request(kafka.host, kafka.port, request, response_type, version, timeout=timeout)


def topic_id(kafka, topic: str) -> uuid.UUID:
    """``topic``'s id (Metadata v10+ names it)."""
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    (answer,) = _request(kafka, request, MetadataResponse).topics
    assert answer.error_code == 0 and isinstance(answer.topic_id, uuid.UUID), answer
    return answer.topic_id


def set_group_config(kafka, group: str, settings: Mapping[str, str]) -> None:
    """IncrementalAlterConfigs SET on the GROUP resource (type 32)."""
    R = IncrementalAlterConfigsRequest.AlterConfigsResource
    request = IncrementalAlterConfigsRequest(
        resources=[
            R(
                resource_type=32,
                resource_name=group,
                configs=[R.AlterableConfig(name=k, config_operation=0, value=v) for k, v in settings.items()],
            )
        ],
        validate_only=False,
    )
    (result,) = _request(kafka, request, IncrementalAlterConfigsResponse).responses
    assert result.error_code == 0, f"setting {settings} of group {group}: {result}"


def describe_group(kafka, group: str) -> Any:
    """ShareGroupDescribe's answer for ``group`` (one DescribedGroup)."""
    request = ShareGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
    (described,) = _request(kafka, request, ShareGroupDescribeResponse).groups
    return described


def describe_offsets(kafka, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (start offset, lag)} of every partition the group has state in
    (DescribeShareGroupOffsets v1)."""
    G = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
    request = DescribeShareGroupOffsetsRequest(groups=[G(group_id=group, topics=None)])
    (answer,) = _request(kafka, request, DescribeShareGroupOffsetsResponse).groups
    assert answer.error_code == 0, answer
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in answer.topics for p in t.partitions}


def start_offsets(kafka, group: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): start offset} of every partition the group has state in."""
    return {tp: start for tp, (start, _) in describe_offsets(kafka, group).items()}


def find_coordinator(kafka, group: str, timeout_s: float = 30) -> Any:
    """FindCoordinator (key type GROUP) until it names a node. On a broker just started, this is what creates
    __consumer_offsets: until then every ShareGroupHeartbeat is answered NOT_COORDINATOR, however long."""
    request = FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group])

    def found() -> Any:
        answer = _request(kafka, request, FindCoordinatorResponse)
        c = answer.coordinators[0] if getattr(answer, "coordinators", None) else answer
        return c if c.error_code == 0 and c.node_id >= 0 else None

    return wait_until(found, timeout_s, f"a coordinator for group {group}")


class RawShareMember:
    """A share group member made of ShareGroupHeartbeat requests: ``join()`` sends epoch 0 with the
    subscription, then a thread heartbeats at the broker's interval on the member's own connection (so
    the member stays in the group while a test fetches) until ``leave()`` sends epoch -1."""

    def __init__(self, kafka, group: str, topics: Sequence[str], *, client_id: str = "raw-share-member") -> None:
        self._kafka = kafka
        self.group = group
        self.topics = list(topics)
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.interval_ms = 1000
        self.assignment: dict[uuid.UUID, list[int]] = {}
        self.answers: list[Any] = []  # every heartbeat answer, first to last
        self.errors: list[str] = []
        self._conn = Connection(kafka.host, kafka.port, timeout=10.0, client_id=client_id)
        self._version = pick_version(kafka.api_versions, ShareGroupHeartbeatRequest)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def heartbeat(self, epoch: int | None = None, topics: Sequence[str] | None = None) -> Any:
        """One ShareGroupHeartbeat (at the member's epoch unless ``epoch``); what it says is kept."""
        with self._lock:
            request = ShareGroupHeartbeatRequest(
                group_id=self.group,
                member_id=self.member_id,
                member_epoch=self.epoch if epoch is None else epoch,
                rack_id=None,
                subscribed_topic_names=topics,
            )
            answer = self._conn.request(request, self._version)
            self.answers.append(answer)
            if answer.error_code == 0:
                self.epoch = answer.member_epoch
                self.interval_ms = answer.heartbeat_interval_ms
                if answer.assignment is not None:
                    self.assignment = {t.topic_id: sorted(t.partitions) for t in answer.assignment.topic_partitions}
            else:
                self.errors.append(f"{answer.error_code}: {answer.error_message}")
            return answer

    def join(self) -> Any:
        """Epoch 0 with the subscription; then heartbeats in the background. The first answer."""
        find_coordinator(self._kafka, self.group)
        deadline = time.monotonic() + 30
        while True:
            first = self.heartbeat(epoch=0, topics=self.topics)
            if first.error_code not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert first.error_code == 0, f"joining share group {self.group}: {first}"
        self.errors.clear()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{self.group}", daemon=True)
        self._thread.start()
        return first

    def wait_for_assignment(self, expected: Mapping[uuid.UUID, Iterable[int]], timeout_s: float = 20) -> None:
        want = {t: sorted(ps) for t, ps in expected.items()}
        wait_until(lambda: self.assignment == want, timeout_s, f"assignment {want}", lambda: repr(self.assignment))

    def _beat(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000):
            try:
                self.heartbeat()
            except Exception as exc:  # the test's asserts say what it means; the thread just stops
                self.errors.append(repr(exc))
                return

    def leave(self) -> Any:
        """Stop heartbeating and send epoch -1; the answer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        return self.heartbeat(epoch=-1)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self._conn.close()


class ShareSession:
    """ShareFetch and ShareAcknowledge of one member over one connection (the session's)."""

    def __init__(self, kafka, group: str, member_id: str) -> None:
        self.group = group
        self.member_id = member_id
        self.conn = Connection(kafka.host, kafka.port, timeout=10.0, client_id="raw-share-session")
        self.fetch_version = pick_version(kafka.api_versions, ShareFetchRequest)
        self.ack_version = pick_version(kafka.api_versions, ShareAcknowledgeRequest)

    def fetch(
        self,
        epoch: int,
        partitions: Mapping[uuid.UUID, Sequence[int]] | None = None,
        acks: Acks | None = None,
        *,
        max_wait_ms: int = 3000,
        max_records: int = 500,
    ) -> Any:
        """A ShareFetch at session ``epoch`` naming ``partitions`` (to add to the session) and carrying ``acks``."""
        T = ShareFetchRequest.FetchTopic
        batch = T.FetchPartition.AcknowledgementBatch
        wanted: dict[uuid.UUID, dict[int, list[Any]]] = {}
        for tid, ps in (partitions or {}).items():
            for p in ps:
                wanted.setdefault(tid, {}).setdefault(p, [])
        for (tid, p), ranges in (acks or {}).items():
            wanted.setdefault(tid, {}).setdefault(p, []).extend(
                batch(first_offset=a, last_offset=b, acknowledge_types=[kind]) for a, b, kind in ranges
            )
        request = ShareFetchRequest(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=epoch,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=max_records,
            batch_size=max_records,
            topics=[
                T(
                    topic_id=tid,
                    partitions=[T.FetchPartition(partition_index=p, acknowledgement_batches=b) for p, b in ps.items()],
                )
                for tid, ps in wanted.items()
            ],
            forgotten_topics_data=[],
        )
        return self.conn.request(request, self.fetch_version, timeout=max_wait_ms / 1000 + 10)

    def acknowledge(self, epoch: int, acks: Acks) -> Any:
        """A ShareAcknowledge at session ``epoch`` (-1: and close the session)."""
        T = ShareAcknowledgeRequest.AcknowledgeTopic
        P = T.AcknowledgePartition
        topics: dict[uuid.UUID, list[Any]] = {}
        for (tid, p), ranges in acks.items():
            batches = [
                P.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=[k]) for a, b, k in ranges
            ]
            topics.setdefault(tid, []).append(P(partition_index=p, acknowledgement_batches=batches))
        request = ShareAcknowledgeRequest(
            group_id=self.group,
            member_id=self.member_id,
            share_session_epoch=epoch,
            topics=[T(topic_id=tid, partitions=ps) for tid, ps in topics.items()],
        )
        return self.conn.request(request, self.ack_version, response_type=ShareAcknowledgeResponse)

    def close(self) -> None:
        self.conn.close()


def acquired(answer: Any) -> dict[tuple[uuid.UUID, int], list[tuple[int, int, int]]]:
    """{(topic id, partition): [(first, last, delivery count), ...]} a ShareFetch answer acquired."""
    out: dict[tuple[uuid.UUID, int], list[tuple[int, int, int]]] = {}
    for t in answer.responses:
        for p in t.partitions:
            if p.acquired_records:
                out[(t.topic_id, p.partition_index)] = [
                    (r.first_offset, r.last_offset, r.delivery_count) for r in p.acquired_records
                ]
    return out


def offsets_by_count(ranges: Iterable[tuple[int, int, int]]) -> dict[int, int]:
    """{offset: delivery count} of acquired ranges."""
    return {o: count for first, last, count in ranges for o in range(first, last + 1)}


def partition_answer(answer: Any, tid: uuid.UUID, partition: int) -> Any:
    for t in answer.responses:
        if t.topic_id == tid:
            for p in t.partitions:
                if p.partition_index == partition:
                    return p
    return None


__all__ = [
    "ACCEPT",
    "RELEASE",
    "REJECT",
    "RawShareMember",
    "ShareFetchResponse",
    "ShareGroupHeartbeatResponse",
    "ShareSession",
    "acquired",
    "describe_group",
    "describe_offsets",
    "offsets_by_count",
    "partition_answer",
    "set_group_config",
    "start_offsets",
    "topic_id",
    "wait_until",
]
