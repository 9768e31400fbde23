"""The one-shot result an application event carries back to the blocked application thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_UNSET = object()


class EventFuture:
    """Completed once by the background thread; waited on by the application thread.

    ``wake``: called once it is done, for a waiter that waits on the application's signal (it runs
    rebalance callbacks meanwhile) rather than on this: it then returns at once, not at its next check."""

    __slots__ = ("_done", "_result", "_error", "wake")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result: Any = _UNSET
        self._error: BaseException | None = None
        self.wake: Callable[[], None] | None = None

    def set_result(self, value: Any) -> None:
        if not self._done.is_set():
            self._result = value
            self._done.set()
            if self.wake is not None:
                self.wake()

    def set_error(self, error: BaseException) -> None:
        if not self._done.is_set():
            self._error = error
            self._done.set()
            if self.wake is not None:
                self.wake()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float | None) -> bool:
        return self._done.wait(timeout_s)

    def result(self) -> Any:
        """The value, or raise the error. Only after ``done``."""
        if self._error is not None:
            raise self._error
        return self._result
