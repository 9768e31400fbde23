"""Application events: what the application thread asks of the background thread.

Each is a small record; those a caller waits for carry an EventFuture and the deadline after
which the background thread gives up on them (``deadline_ms`` on the engine's clock).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from ..errors import KafkaTimeoutError
from ._future import EventFuture

if TYPE_CHECKING:
    from .._config import OffsetCommitCallback
    from ..structs import OffsetAndMetadata, TopicPartition


@attrs.define(slots=True, eq=False)
class ApplicationEvent:
    future: EventFuture | None = attrs.field(factory=EventFuture, kw_only=True)
    deadline_ms: float = attrs.field(default=float("inf"), kw_only=True)
    # what the user asked, in the user's words (for a timeout's message), the timeout it was given,
    # and the last reason the background thread saw for not completing it (set by a manager)
    what: str = attrs.field(default="", kw_only=True)
    timeout_ms: float | None = attrs.field(default=None, kw_only=True)
    cause: str | None = attrs.field(default=None, kw_only=True)

    def timeout_error(self) -> KafkaTimeoutError:
        """The error a caller gets when the deadline passed: what was asked, how long, and why."""
        within = "" if self.timeout_ms is None else f" within {self.timeout_ms:g} ms"
        why = f": {self.cause}" if self.cause else ""
        return KafkaTimeoutError(f"{self.what or type(self).__name__} did not complete{within}{why}")

    def complete(self, value: Any = None) -> None:
        if self.future is not None:
            self.future.set_result(value)

    def fail(self, error: BaseException) -> None:
        if self.future is not None:
            self.future.set_error(error)


@attrs.define(slots=True, eq=False)
class ListOffsetsEvent(ApplicationEvent):
    """timestamps: tp -> -2 (earliest), -1 (latest) or a timestamp in ms.
    Result: tp -> (offset, timestamp, leader_epoch) or None when no offset matches the timestamp."""

    timestamps: dict[TopicPartition, int] = attrs.field(factory=dict)


@attrs.define(slots=True, eq=False)
class TopicMetadataEvent(ApplicationEvent):
    """topics: names, or None for all. Result: topic -> sorted partition ids (absent if unknown)."""

    topics: frozenset[str] | None = None


@attrs.define(slots=True, eq=False)
class AssignmentChangedEvent(ApplicationEvent):
    """assign()/seek()/pause() changed what to fetch: drop buffered data of removed partitions."""

    removed: frozenset[TopicPartition] = frozenset()


@attrs.define(slots=True, eq=False)
class PollEvent(ApplicationEvent):
    """The application polled (restarts the poll-interval timer; auto-commit reads positions)."""

    at_ms: float = 0.0


@attrs.define(slots=True, eq=False)
class CloseEvent(ApplicationEvent):
    """Close within ``deadline_ms``: commit (unless ``autocommit`` is False), leave, stop the loop."""

    autocommit: bool = True


@attrs.define(slots=True, eq=False)
class BootstrapEvent(ApplicationEvent):
    """bootstrap(): done once cluster metadata is known (after a fresh refresh with ``refresh``)."""

    refresh: bool = False


@attrs.define(slots=True, eq=False)
class SubscriptionChangedEvent(ApplicationEvent):
    """subscribe() changed the topics or pattern: join, or rejoin."""


@attrs.define(slots=True, eq=False)
class UnsubscribeEvent(ApplicationEvent):
    """unsubscribe(): revoke (callbacks on the application thread), leave; done when unjoined."""


@attrs.define(slots=True, eq=False)
class CallbackAckEvent(ApplicationEvent):
    """The application thread ran a rebalance callback (``token`` says which); ``error`` if it raised."""

    token: int = 0
    error: BaseException | None = None


@attrs.define(slots=True, eq=False)
class CommitEvent(ApplicationEvent):
    """Commit ``offsets`` (tp -> OffsetAndMetadata), or the current positions when None.
    ``sync``: retry retriable errors until the deadline; ``callback`` runs on the application thread."""

    offsets: dict[TopicPartition, OffsetAndMetadata] | None = None
    sync: bool = True
    callback: OffsetCommitCallback | None = None


@attrs.define(slots=True, eq=False)
class FetchCommittedEvent(ApplicationEvent):
    """Committed offsets of ``partitions``; result tp -> OffsetAndMetadata or None."""

    partitions: frozenset[TopicPartition] = frozenset()
