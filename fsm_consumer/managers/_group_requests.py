"""The classic group protocol's requests as this member builds them (JoinGroup with one subscription per
assignor, SyncGroup with the leader's assignment, Heartbeat, LeaveGroup), the error codes their answers
are sorted by, and when an answer renewed the member's session."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kafka.protocol.consumer import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

from ..assignors import Assignment, Subscription, encode_assignment, encode_subscription
from ..structs import TopicPartition

if TYPE_CHECKING:
    from ..assignors import Assignor

# not available, not coordinator: found again; COORDINATOR_LOAD_IN_PROGRESS (14) is the same coordinator, later (as
# Java, which keeps it)
COORDINATOR_ERRORS = {15, 16}
FENCED = {22, 25}  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
# inconsistent protocol, invalid group id, invalid session timeout, group authorization, group max size,
# fenced instance id
FATAL = {23, 24, 26, 30, 81, 82}


def heard(pending: Any, sent_at: float) -> float:
    """When the coordinator at the earliest renewed this member's session by answering: not before the
    request went out, nor before the engine's bound on the answer's arrival (Pending.heard_after). An
    answer read after this process was frozen may have waited in the socket for the whole freeze: its
    reading time would extend a lease the coordinator let run out."""
    after = getattr(pending, "heard_after", None)
    return sent_at if after is None else max(sent_at, after)


def join_group_request(
    config: Any,
    member_id: str,
    generation: int,
    topics: tuple[str, ...],
    owned: tuple[TopicPartition, ...],
    assignors: Sequence[Assignor],
) -> JoinGroupRequest:
    """JoinGroup offering each assignor with this member's subscription (and, cooperative, what it owns)."""
    protocols = []
    for a in assignors:
        sub = Subscription(
            topics=topics,
            owned_partitions=owned,
            generation=generation,
            user_data=a.subscription_user_data(topics, owned, generation),
            rack=config.client_rack or None,
        )
        protocols.append(JoinGroupRequest.JoinGroupRequestProtocol(name=a.name, metadata=encode_subscription(sub)))
    return JoinGroupRequest(
        group_id=config.group_id,
        session_timeout_ms=config.session_timeout_ms,
        rebalance_timeout_ms=config.max_poll_interval_ms,
        member_id=member_id,
        group_instance_id=config.group_instance_id,
        protocol_type="consumer",
        protocols=protocols,
        reason=None,
    )


def sync_group_request(
    config: Any, generation: int, member_id: str, protocol: str | None, assignment: dict[str, Assignment]
) -> SyncGroupRequest:
    """SyncGroup; a leader's carries every member's assignment, a follower's none."""
    return SyncGroupRequest(
        group_id=config.group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=config.group_instance_id,
        protocol_type="consumer",
        protocol_name=protocol,
        assignments=[
            SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(a))
            for m, a in sorted(assignment.items())
        ],
    )


def heartbeat_request(config: Any, generation: int, member_id: str) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=config.group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=config.group_instance_id,
    )


def leave_group_request(config: Any, member_id: str) -> LeaveGroupRequest:
    return LeaveGroupRequest(
        group_id=config.group_id,
        member_id=member_id,
        members=[
            LeaveGroupRequest.MemberIdentity(
                member_id=member_id, group_instance_id=config.group_instance_id, reason="the consumer is leaving"
            )
        ],
    )
