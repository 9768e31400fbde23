"""What the timeline's axis and legend read of the picture being drawn (a protocol: ``_timeline`` imports
them, they do not import it back)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._check import CheckResult
    from ._model import TP, Timeline
    from ._svg import Canvas


class PictureView(Protocol):
    tl: Timeline
    result: CheckResult
    width: float
    gap_ms: float
    origin: float
    end: float
    canvas: Canvas
    label: dict[str, str]
    row_y: dict[tuple[str, TP], float]
    notes: list[str]
    states_used: set[str]

    def x(self, t: float) -> float: ...
    def rel(self, t: float) -> str: ...
    def add(self, layer: str, svg: str, kind: str = "", required: bool = False) -> None: ...
