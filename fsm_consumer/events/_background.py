"""Background events: what the background thread hands to the application thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs


@attrs.define(slots=True, eq=False)
class BackgroundEvent:
    pass


@attrs.define(slots=True, eq=False)
class ErrorEvent(BackgroundEvent):
    """An error to raise from the next API call (poll() first of all)."""

    error: BaseException


@attrs.define(slots=True, eq=False)
class CallbackEvent(BackgroundEvent):
    """Run ``fn(*args)`` on the application thread (commit callbacks, rebalance listeners);
    ``ack`` is called with the exception (or None) afterwards so the background thread can go on."""

    fn: Callable[..., object]
    args: tuple[Any, ...] = ()
    ack: Callable[[BaseException | None], object] | None = None
