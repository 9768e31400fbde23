"""The two channels between the threads.

The application event queue wakes the background loop (its transport poll) on every put. The
background event queue, and the fetch buffer, set the application-side ``Signal`` on which a
blocked poll() sleeps. No per-record traffic goes through either.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from ._application import ApplicationEvent
from ._background import BackgroundEvent


class Signal:
    """Something for the application thread happened (data, a background event, wakeup()).

    The waiter clears before checking and waits only if it found nothing, so a set() between its
    check and its wait is never lost."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def wait(self, timeout_s: float | None) -> bool:
        return self._event.wait(timeout_s)


_E = TypeVar("_E")  # ApplicationEvent or BackgroundEvent


class _EventDeque(Generic[_E]):
    """A deque handed between threads: append and popleft are atomic, so no lock is needed."""

    def __init__(self) -> None:
        self._queue: collections.deque[_E] = collections.deque()

    def drain(self) -> list[_E]:
        out = []
        q = self._queue
        while q:
            out.append(q.popleft())
        return out

    def __len__(self) -> int:
        return len(self._queue)


class ApplicationEventQueue(_EventDeque[ApplicationEvent]):
    def __init__(self, wake_background: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._wake = wake_background
        self._closed_by: BaseException | None = None

    def bind_waker(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    def put(self, event: ApplicationEvent) -> None:
        if self._closed_by is not None:  # nobody would ever take it: its caller learns why now
            if event.future is not None:
                event.fail(self._closed_by)
            return
        self._queue.append(event)
        if self._closed_by is not None:  # closed between the check and the append: fail what is left
            for ev in self.drain():
                if ev.future is not None:
                    ev.fail(self._closed_by)
        if self._wake is not None:
            self._wake()

    def close(self, error: BaseException) -> None:
        """The background thread died of ``error``: later events fail at once."""
        self._closed_by = error


class BackgroundEventQueue(_EventDeque[BackgroundEvent]):
    def __init__(self, signal: Signal) -> None:
        super().__init__()
        self._signal = signal

    def put(self, event: BackgroundEvent) -> None:
        self._queue.append(event)
        self._signal.set()
