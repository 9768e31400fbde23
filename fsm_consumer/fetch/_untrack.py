"""Records kept a while taken out of the cyclic collector's sight (fetch/_cdecode.c's ``untrack``).

CPython never untracks a tuple subclass, so each NamedTuple record kept a while (a share consumer's buffered
and handed-out records) would be traversed by every collection and, kept past two of them, count toward the
full collections of the oldest generation: a quarter of a 100,000-record share drain's time went to
collecting. Only a tuple whose items cannot lead to a cycle (no collected object, or a tuple untracked already)
is untracked. Without the compiled module it does nothing: the same records, collected as any object is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["untrack"]


def _keep_tracked(items: list[Any]) -> None:
    """Without the compiled module: nothing (the collector keeps seeing them)."""


untrack: Callable[[list[Any]], None]
try:
    from ._cdecode import untrack
except ImportError:  # no compiler at install time
    untrack = _keep_tracked
