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
        "L": "nothing is lost: every record produced is handed out by a member of each group that reads its topic",
        "E": "one owner at a time: a record is handed out only by a member that owns its partition then",
        "D": "duplicates only above the group's last acknowledged commit when the reader's ownership began",
        "M": "nothing skipped: positions move on without gaps, within an ownership and from one owner to the next",
        "C": "commits only by the owner, never ahead of what it handed out, never backwards, never a false success",
        "K": "key order under a ParallelConsumer: one record of a key at a time, in offset order, within a run",
        "H": "one holder at a time: a share group hands a record to no one while a member's hold on it lasts",
        "N": "deliveries count up: each delivery of a record counts more than the last, never past the limit",
        "A": "acknowledgements: one that took effect came from the record's holder; accepted or rejected, never again",
        "S": "every record settled: each produced record is accepted or rejected in the share group, or archived",
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
