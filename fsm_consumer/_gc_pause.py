"""The cyclic garbage collector paused while many records are built at once.

Building thousands of record tuples triggers young-generation collections that traverse them again and again
while they are built, for nothing: decoding and handing out records make no reference cycles. Collection is
postponed to the end of that one stretch. The collector's switch is global: an application (or another of
our threads) that turned it off already is left as it is, and whoever turned it off turns it on again.
"""

from __future__ import annotations

import gc
from types import TracebackType


class gc_paused:
    """``with gc_paused(): ...``: the collector off for the block if it was on, on again after it."""

    __slots__ = ("_was_on",)

    def __enter__(self) -> None:
        self._was_on = gc.isenabled()
        if self._was_on:
            gc.disable()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self._was_on:
            gc.enable()
