"""What a rule reports, and the rules' names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ._model import TP, Event

#: the rules of docs/histories.md, in the order they are checked and reported: letter -> what a user relies on
RULES: Mapping[str, str] = MappingProxyType(
    {
        "L": "nothing is lost: every offset produced was handed out by a consumer of each group that read the topic",
        "E": "one owner at a time: no partition handed out by two consumers in overlapping intervals",
        "D": "duplicates only where a user expects them: no read below a commit acknowledged before its poll began",
        "M": "within one ownership, positions move forward without gaps",
        "C": "commits never go backwards, and never ahead of what their consumer had reached",
        "K": "key order under a ParallelConsumer: one record of a key at a time, in offset order, within a run",
    }
)


@dataclass(frozen=True)
class Violation:
    """One breach of a rule: ``message`` is one line naming the consumers, the partition, the offsets and
    the times (ms of ``time.monotonic()``, as in the histories); ``t`` is when it happened (None: no
    time, e.g. an offset nobody read), ``transitions`` the ``transition`` lines of ``consumers`` within
    the check's window (2 s) of ``t``, in time order."""

    rule: str
    message: str
    t: float | None = None
    consumers: tuple[str, ...] = ()
    tp: TP | None = None
    offsets: tuple[int, int] | None = None
    details: dict[str, Any] = field(default_factory=dict, compare=False)
    transitions: tuple[Event, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"
