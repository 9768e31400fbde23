"""The table: every broker error code and transport failure -> what the managers do about it.

One place decides, so a code is never retriable in one manager and fatal in another. Codes not
listed fall back on kafka-python's own flags (``retriable``, ``invalid_metadata``), which follow
Kafka's error definitions.
"""

from __future__ import annotations

import enum

import kafka.errors as ke

from ..transport import AuthenticationError, RequestTimedOut, UnsupportedVersion


class Action(enum.Enum):
    RETRY = "retry"  # the same request again, after a backoff
    REFRESH_METADATA = "refresh"  # leaders moved or the topic is not known yet: metadata, then retry
    REDISCOVER = "rediscover"  # the group coordinator moved or is loading: FindCoordinator again
    FENCED = "fenced"  # this member's generation is gone: partitions lost, rejoin
    RESET = "reset"  # the position is out of range: the reset policy decides
    FATAL = "fatal"  # the user must act (credentials, ACLs, config): held and raised


_TABLE: dict[int, Action] = {
    1: Action.RESET,  # OFFSET_OUT_OF_RANGE
    3: Action.REFRESH_METADATA,
    5: Action.REFRESH_METADATA,
    6: Action.REFRESH_METADATA,
    74: Action.REFRESH_METADATA,
    75: Action.REFRESH_METADATA,
    100: Action.REFRESH_METADATA,
    14: Action.REDISCOVER,  # COORDINATOR_LOAD_IN_PROGRESS: the same node, after a backoff
    15: Action.REDISCOVER,
    16: Action.REDISCOVER,
    22: Action.FENCED,
    25: Action.FENCED,
    110: Action.FENCED,  # FENCED_MEMBER_EPOCH (KIP-848): this epoch is gone
    113: Action.RETRY,  # STALE_MEMBER_EPOCH: sent again with the epoch the next heartbeat brings (as Java)
    27: Action.RETRY,  # REBALANCE_IN_PROGRESS: the membership decides
    2: Action.FATAL,  # CORRUPT_MESSAGE: held for the partition until a seek
    29: Action.FATAL,
    30: Action.FATAL,
    31: Action.FATAL,  # topic / group / cluster authorization
    58: Action.FATAL,  # SASL_AUTHENTICATION_FAILED
    23: Action.FATAL,
    24: Action.FATAL,
    26: Action.FATAL,
    81: Action.FATAL,
    82: Action.FATAL,
    111: Action.FATAL,
    112: Action.FATAL,
}

# what to do about it, in the words of the message
_FIXES: dict[int, str] = {
    1: "seek() to a valid offset, or set auto_offset_reset to 'earliest' or 'latest'",
    2: "the log is damaged at this offset: seek() past it to go on",
    29: "grant this principal READ (and DESCRIBE) on the topic, or stop consuming it",
    30: "grant this principal READ on the consumer group, or use another group_id",
    31: "grant this principal the cluster permission the request needs",
    58: "check sasl_mechanism, sasl_plain_username and sasl_plain_password",
    23: "every member of a group must offer a common partition_assignment_strategy",
    24: "group_id must be a non-empty string the broker accepts",
    26: "session_timeout_ms must lie within the broker's group.min/max.session.timeout.ms",
    81: "the group is full (group.max.size): use another group_id or raise the broker's limit",
    82: "another consumer uses the same group_instance_id: give each instance its own",
    111: (
        "the previous member with this group_instance_id has not left yet: wait for its session to run out or "
        "close it first, or give each instance its own group_instance_id"
    ),
    112: "group_remote_assignor must be one the broker offers (group.consumer.assignors: 'uniform' or 'range')",
}


def classify(error: int | BaseException) -> Action:
    """What to do about a broker error code or a failure raised below the managers."""
    if isinstance(error, BaseException):
        if isinstance(error, AuthenticationError):  # TLS or SASL: reconnecting cannot fix it
            return Action.FATAL
        return Action.RETRY  # connection lost, timed out: the transport reconnects
    action = _TABLE.get(error)
    if action is not None:
        return action
    cls = ke.for_code(error)
    if getattr(cls, "invalid_metadata", False):
        return Action.REFRESH_METADATA
    return Action.RETRY if getattr(cls, "retriable", False) else Action.FATAL


def keeps_coordinator(error: BaseException) -> bool:
    """A coordinator request that failed below the broker: a timeout keeps the coordinator (as Java: only a lost
    connection makes it find the coordinator again)."""
    return isinstance(error, RequestTimedOut)


def broker_lacks(error: BaseException) -> bool:
    """The request failed before it was sent: the broker does not speak its API or any version of it we do."""
    return isinstance(error, UnsupportedVersion)


def describe(code: int) -> str:
    """The error's name and, when known, what to do about it."""
    name = ke.for_code(code).__name__
    fix = _FIXES.get(code)
    return f"{name}: {fix}" if fix else name


def public_error(code: int, what: str, *, partitions=None, cause: BaseException | None = None) -> BaseException:
    """kafka-python's typed error for ``code``, saying what was asked, for which partitions, and how
    to fix it; ``cause`` chained as ``__cause__``."""
    where = ""
    if partitions:
        where = " for " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions))
    fix = _FIXES.get(code)  # kafka-python's str() already names the error class
    error = ke.for_code(code)(f"{what}{where} failed" + (f": {fix}" if fix else ""))
    error.__cause__ = cause
    return error
