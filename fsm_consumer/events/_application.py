"""Application events: what the application thread asks of the background thread.

Each is a small record; those a caller waits for carry an EventFuture and the deadline after
which the background thread gives up on them (``deadline_ms`` on the engine's clock).
"""

from __future__ import annotations

from typing import Any

import attrs

from ._future import EventFuture


@attrs.define(slots=True, eq=False)
class ApplicationEvent:
    future: EventFuture | None = attrs.field(factory=EventFuture, kw_only=True)
    deadline_ms: float = attrs.field(default=float("inf"), kw_only=True)

    def complete(self, value: Any = None) -> None:
        if self.future is not None:
            self.future.set_result(value)

    def fail(self, error: BaseException) -> None:
        if self.future is not None:
            self.future.set_error(error)


@attrs.define(slots=True, eq=False)
class ListOffsetsEvent(ApplicationEvent):
    """timestamps: tp -> -2 (earliest), -1 (latest) or a timestamp in ms.
    Result: tp -> (offset, timestamp) or None when no offset matches the timestamp."""
    timestamps: dict = attrs.field(factory=dict)


@attrs.define(slots=True, eq=False)
class TopicMetadataEvent(ApplicationEvent):
    """topics: names, or None for all. Result: topic -> sorted partition ids (absent if unknown)."""
    topics: frozenset | None = None


@attrs.define(slots=True, eq=False)
class AssignmentChangedEvent(ApplicationEvent):
    """assign()/seek()/pause() changed what to fetch: drop buffered data of removed partitions."""
    removed: frozenset = frozenset()


@attrs.define(slots=True, eq=False)
class PollEvent(ApplicationEvent):
    """The application polled (restarts the poll-interval timer; auto-commit reads positions)."""
    at_ms: float = 0.0


@attrs.define(slots=True, eq=False)
class CloseEvent(ApplicationEvent):
    """Close within ``deadline_ms``: commit, leave, stop the loop."""


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
    offsets: dict | None = None
    sync: bool = True
    callback: object = None


@attrs.define(slots=True, eq=False)
class FetchCommittedEvent(ApplicationEvent):
    """Committed offsets of ``partitions``; result tp -> OffsetAndMetadata or None."""
    partitions: frozenset = frozenset()
