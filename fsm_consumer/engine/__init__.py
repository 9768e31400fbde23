"""The background thread: its loop, the application event processor, its lifecycle model."""

from ._lifecycle import BackgroundLifecycle
from ._network_thread import NetworkThread
from ._processor import ApplicationEventProcessor

__all__ = ["ApplicationEventProcessor", "BackgroundLifecycle", "NetworkThread"]
