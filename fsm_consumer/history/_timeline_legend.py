"""The timeline picture's legend (what each color and mark means) and footer (what was merged or left out)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ._svg import RED, STATE_COLORS, element, state_color, text_width

if TYPE_CHECKING:
    from ._timeline_view import PictureView

LEFT_LEGEND = 10.0

Swatch = Callable[[float, float], str]  # (x, y of the text's baseline) -> the swatch's SVG, 14 px wide


def _box(fill: str, extra: str = "") -> Swatch:
    return lambda x, y: f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="14" height="9" fill="{fill}" rx="1.5"{extra}/>'


def _tick(cls: str, tall: bool = False) -> Swatch:
    top, bottom = (12, 2) if tall else (10, 0)
    return lambda x, y: f'<line x1="{x + 7:.1f}" x2="{x + 7:.1f}" y1="{y - top}" y2="{y + bottom}" class="{cls}"/>'


def _acked(x: float, y: float) -> str:
    return f'<polygon points="{x + 7:.1f},{y - 8:.1f} {x + 3.5:.1f},{y:.1f} {x + 10.5:.1f},{y:.1f}" class="ca"/>'


def _failed(x: float, y: float) -> str:
    a, b, c, d = (
        f"{x + 4:.1f} {y - 8:.1f}",
        f"{x + 10:.1f} {y:.1f}",
        f"{x + 10:.1f} {y - 8:.1f}",
        f"{x + 4:.1f} {y:.1f}",
    )
    return f'<path d="M{a}L{b}M{c}L{d}" class="cf"/>'


def _fault(x: float, y: float) -> str:
    return f'<polygon points="{x + 3:.1f},{y - 10:.1f} {x + 11:.1f},{y - 10:.1f} {x + 7:.1f},{y:.1f}" class="fault"/>'


def _cap(x: float, y: float) -> str:
    return _box("#90a4ae")(x, y) + f'<rect x="{x + 11.5:.1f}" y="{y - 10:.1f}" width="2.5" height="11" fill="{RED}"/>'


def _violation(x: float, y: float) -> str:
    return (
        f'<rect x="{x + 5.5:.1f}" y="{y - 12:.1f}" width="3" height="14" class="vio"/>'
        f'<circle cx="{x + 7:.1f}" cy="{y - 4.5:.1f}" r="4.5" fill="none" stroke="{RED}" stroke-width="1.4"/>'
    )


def legend_and_footer(picture: PictureView, y: float) -> tuple[str, float]:
    """The legend and footer from ``y`` down, and the picture's height below them."""
    width = picture.width
    out: list[str] = []
    states = [s for s in STATE_COLORS if s in picture.states_used]
    states += sorted(picture.states_used - set(states))
    items: list[tuple[Swatch, str]] = [(_box(state_color(s)), s) for s in states]
    items += [
        (_box("#1f77b4"), "owned: a bar per ownership (gN: generation; color: the consumer)"),
        (_cap, "ownership ended by session expiry, loss or abandoning"),
        (_tick("rd"), "read (ticks closer than a pixel merged)"),
        (_tick("srd", tall=True), "read while not owning the partition"),
        (_acked, "commit acknowledged"),
        (_failed, "commit failed"),
        (_fault, "fault: session expired, partitions lost, error held, callback raised"),
        (_box("url(#hatch)"), f"no line for over {picture.gap_ms / 1000:g} s (frozen, stalled or idle)"),
        (_box("url(#ovh)", f' stroke="{RED}" stroke-width=".8"'), "two owners of a partition at once"),
        (_violation, "checker violation, with its rule's letter on the axis"),
    ]
    x, row = LEFT_LEGEND, y + 10
    lead = "membership state:" if states else ""
    if lead:
        out.append(element("text", {"x": x, "y": row, "class": "lg", "style": "fill:#555"}, text=lead))
        x += text_width(lead, 10) + 8
    for n, (swatch, label) in enumerate(items):
        w = 14 + 5 + text_width(label, 10) + 14
        if x + w > width - 10 or n == len(states):  # the other marks begin on a line of their own
            x, row = LEFT_LEGEND, row + 17
        out.append(swatch(x, row))
        out.append(element("text", {"x": x + 19, "y": row, "class": "lg"}, text=label))
        x += w
    notes = list(picture.notes)
    for kind, n in sorted(picture.canvas.dropped.items()):
        notes.append(f"{n} {kind} not drawn: the picture holds at most {picture.canvas.budget} marks")
    if picture.tl.malformed:
        notes.append(f"{len(picture.tl.malformed)} line(s) lack fields their event needs: not drawn")
    row += 10
    for note in notes:
        row += 14
        out.append(element("text", {"x": 10, "y": row, "class": "ft"}, text=note))
    return '<g id="legend">' + "\n".join(out) + "</g>", row + 12
