"""Events and the two queues joining the application and background threads."""

from ._application import (
    ApplicationEvent,
    AssignmentChangedEvent,
    BootstrapEvent,
    CallbackAckEvent,
    CloseEvent,
    CommitEvent,
    FetchCommittedEvent,
    ListOffsetsEvent,
    PollEvent,
    SubscriptionChangedEvent,
    TopicMetadataEvent,
    UnsubscribeEvent,
)
from ._background import BackgroundEvent, CallbackEvent, ErrorEvent
from ._future import EventFuture
from ._queues import ApplicationEventQueue, BackgroundEventQueue, Signal

__all__ = [
    "ApplicationEvent",
    "ApplicationEventQueue",
    "AssignmentChangedEvent",
    "BackgroundEvent",
    "BackgroundEventQueue",
    "BootstrapEvent",
    "CallbackAckEvent",
    "CallbackEvent",
    "CloseEvent",
    "CommitEvent",
    "ErrorEvent",
    "EventFuture",
    "FetchCommittedEvent",
    "ListOffsetsEvent",
    "PollEvent",
    "Signal",
    "SubscriptionChangedEvent",
    "TopicMetadataEvent",
    "UnsubscribeEvent",
]
