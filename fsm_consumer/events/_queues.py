"""The two channels between the threads.

The application event queue wakes the background loop (its transport poll) on every put. The
background event queue, and the fetch buffer, set the application-side ``Signal`` on which a
blocked poll() sleeps. No per-record traffic goes through either.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

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


class ApplicationEventQueue:
    def __init__(self, wake_background: Callable[[], None] | None = None) -> None:
        self._queue: collections.deque[ApplicationEvent] = collections.deque()
        self._wake = wake_background

    def bind_waker(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    def put(self, event: ApplicationEvent) -> None:
        self._queue.append(event)  # deque.append/popleft are atomic: no lock needed
        if self._wake is not None:
            self._wake()

    def drain(self) -> list[ApplicationEvent]:
        out = []
        q = self._queue
        while q:
            out.append(q.popleft())
        return out

    def __len__(self) -> int:
        return len(self._queue)


class BackgroundEventQueue:
    def __init__(self, signal: Signal) -> None:
        self._queue: collections.deque[BackgroundEvent] = collections.deque()
        self._signal = signal

    def put(self, event: BackgroundEvent) -> None:
        self._queue.append(event)
        self._signal.set()

    def drain(self) -> list[BackgroundEvent]:
        out = []
        q = self._queue
        while q:
            out.append(q.popleft())
        return out

    def __len__(self) -> int:
        return len(self._queue)
