"""Errors held as state: what the user must act on, raised by every poll() and blocking call until
it is cleared, like h11's ERROR state. Never queued (a failure that repeats a thousand times is
held once) and never dropped (it stays until the cause is gone or the user clears it).

Keys say what an error belongs to: ("auth", node), ("group",), ("topic", name), ("partition", tp).
The background thread holds and releases; the application thread raises, and clears a partition's
error when the user seeks it or gives it up.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Hashable


class HeldErrors:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Hashable, BaseException] = {}
        self.on_new: Callable[[Hashable, BaseException], None] | None = None  # a newly held error (a history)

    def hold(self, key: Hashable, error: BaseException) -> bool:
        """Hold ``error`` for ``key``; True if nothing was held for it before (log it then, once)."""
        with self._lock:
            new = key not in self._held
            self._held[key] = error
        if new and self.on_new is not None:
            self.on_new(key, error)
        return new

    def release(self, key: Hashable) -> bool:
        with self._lock:
            return self._held.pop(key, None) is not None

    def release_where(self, drop: Callable[[Hashable], bool]) -> None:
        with self._lock:
            for key in [k for k in self._held if drop(k)]:
                del self._held[key]

    def holds(self, key: Hashable) -> bool:
        return key in self._held

    def first(self) -> BaseException | None:
        with self._lock:
            return next(iter(self._held.values()), None)

    def raise_first(self) -> None:
        """Raise a copy of the oldest held error (its cause kept): one instance raised from several
        calls would chain unrelated tracebacks onto it."""
        error = self.first()
        if error is not None:
            raised = copy.copy(error)
            raised.__cause__ = error.__cause__
            raise raised

    def describe(self) -> dict[str, str]:
        """For metrics(), from any thread: ``"partition/events-0"`` (a key's parts joined by ``/``, a
        TopicPartition as topic-partition) -> ``"TypeName: message"``, oldest first; a copy."""
        with self._lock:
            held = list(self._held.items())
        return {_key_text(key): _error_text(err) for key, err in held}

    def __len__(self) -> int:
        return len(self._held)


def _key_text(key: Hashable) -> str:
    parts = key if isinstance(key, tuple) and not hasattr(key, "_fields") else (key,)
    return "/".join(
        f"{p.topic}-{p.partition}" if hasattr(p, "topic") and hasattr(p, "partition") else str(p) for p in parts
    )


def _error_text(error: BaseException) -> str:
    """``TypeName: message``; kafka-python's errors name their class already ("[Error 29]
    TopicAuthorizationFailedError: ..."), so theirs is kept as it is."""
    name, text = type(error).__name__, str(error)
    if not text:
        return name
    return text if name in text.partition(":")[0] else f"{name}: {text}"
