"""The application event processor: each event type to the manager that handles it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import (
    ApplicationEvent,
    AssignmentChangedEvent,
    BootstrapEvent,
    CloseEvent,
    ListOffsetsEvent,
    PollEvent,
    SubscriptionChangedEvent,
    TopicMetadataEvent,
)


class ApplicationEventProcessor:
    def __init__(self, *, metadata, offsets, lifecycle, machine, subscription, extra_handlers=None) -> None:
        self._metadata = metadata
        self._offsets = offsets
        self._lifecycle = lifecycle
        self._machine = machine
        self._subs = subscription
        # each handler takes the one event type it is registered for
        self._handlers: dict[type[ApplicationEvent], Callable[[Any, float], None]] = {
            ListOffsetsEvent: self._list_offsets,
            TopicMetadataEvent: self._topic_metadata,
            AssignmentChangedEvent: self._assignment_changed,
            PollEvent: self._poll,
            CloseEvent: self._close,
            BootstrapEvent: self._bootstrap,
            # without a group the subscription is this consumer's own business (GroupParts replaces it)
            SubscriptionChangedEvent: self._assignment_changed,
        }
        self._handlers.update(extra_handlers or {})
        self.poll_listeners: list = []

    def register(self, event_type, handler) -> None:
        self._handlers[event_type] = handler

    def process(self, event, now: float) -> None:
        handler = self._handlers.get(type(event))
        if handler is None:
            event.fail(TypeError(f"no handler for {type(event).__name__}"))
            return
        handler(event, now)

    def _list_offsets(self, event: ListOffsetsEvent, now: float) -> None:
        self._offsets.add_event(event, now)

    def _topic_metadata(self, event: TopicMetadataEvent, now: float) -> None:
        self._metadata.add_waiter(event, now)

    def _assignment_changed(self, event: AssignmentChangedEvent, now: float) -> None:
        unknown = {t for t in self._subs.topics_needed() if t not in self._metadata.topics}
        if unknown:
            self._metadata.request_update(unknown)
        event.complete(None)

    def _bootstrap(self, event: BootstrapEvent, now: float) -> None:
        if self._metadata.ready and not event.refresh:
            event.complete(None)
        else:
            self._metadata.add_waiter(event, now)

    def _poll(self, event: PollEvent, now: float) -> None:
        for listener in self.poll_listeners:
            listener(event, now)
        event.complete(None)

    def _close(self, event: CloseEvent, now: float) -> None:
        self._lifecycle.close_deadline_ms = event.deadline_ms
        self._lifecycle.close_event = event
        self._lifecycle.close_autocommit = event.autocommit
        if not self._machine.fire("close"):  # ignored (closing already, or the loop ended): done at once
            event.complete(None)
