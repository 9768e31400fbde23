"""Hand-written SVG for the timeline picture (``_timeline``): escaping, elements drawn in layers under an
element budget, the time axis's ticks, colors. No dependency: the picture is text."""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping

# XML 1.0 allows no control character but tab, newline and carriage return, nor lone surrogates
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def esc(value: object) -> str:
    """Text content or an attribute value (in double quotes), escaped for XML."""
    return html.escape(_NOT_XML.sub("\ufffd", str(value)), quote=True)


def num(value: float) -> str:
    """A coordinate: one decimal is a tenth of a pixel, enough."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


#: the timeline's geometry (px): the label column, the margin right of the plot; in a consumer's band the
#: state row's height, a partition row's, its bar's top and height in it, the band's padding; a lane of
#: the partitions' view
LEFT, RIGHT = 200.0, 24.0
STATE_H, ROW_H, BAR_Y, BAR_H, PAD, LANE_H = 12.0, 17.0, 2.0, 9.0, 7.0, 12.0


def element(tag: str, attrs: Mapping[str, object], *, title: str | None = None, text: str | None = None) -> str:
    """``<tag a="v" ...>``, with a ``<title>`` tooltip and text content when given (None attributes left out)."""
    parts = [tag]
    for key, value in attrs.items():
        if value is None:
            continue
        shown = num(value) if isinstance(value, float) else str(value)
        parts.append(f'{key}="{esc(shown)}"')
    head = " ".join(parts)
    inner = ("" if title is None else f"<title>{esc(title)}</title>") + ("" if text is None else esc(text))
    return f"<{head}>{inner}</{tag}>" if inner else f"<{head}/>"


class Canvas:
    """Elements in named layers, drawn in the layers' order (the first at the bottom). Every element but the
    ``required`` ones (axis, labels, legend) spends one of ``budget``: what is added past it is counted by
    kind in ``dropped`` and not drawn, so the most telling marks are to be added first."""

    def __init__(self, layers: Iterable[str], budget: int) -> None:
        self.layers: dict[str, list[str]] = {name: [] for name in layers}
        self.budget = budget
        self.spent = 0
        self.dropped: Counter[str] = Counter()

    def add(self, layer: str, svg: str, *, kind: str = "", required: bool = False) -> bool:
        if not required:
            if self.spent >= self.budget:
                self.dropped[kind or layer] += 1
                return False
            self.spent += 1
        self.layers[layer].append(svg)
        return True

    def body(self) -> str:
        return "\n".join(e for layer in self.layers.values() for e in layer)


def nice_step(span: float, at_most: int) -> float:
    """A step of 1, 2 or 5 times a power of ten that cuts ``span`` into at most ``at_most`` parts."""
    if span <= 0 or at_most < 1:
        return 1.0
    raw = span / at_most
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * power >= raw:
            return float(m * power)
    return float(10 * power)


def seconds_label(ms: float, step_ms: float) -> str:
    """A tick's label in seconds, with as many decimals as the step needs."""
    decimals = 0 if step_ms >= 1000 else max(0, -math.floor(math.log10(step_ms / 1000.0)))
    return f"{ms / 1000.0:.{decimals}f} s"


def duration(ms: float) -> str:
    return f"{ms:.0f} ms" if abs(ms) < 1000 else f"{ms / 1000.0:.2f} s"


def text_width(text: str, size: float) -> float:
    """About how wide a text is in a sans-serif font of ``size`` px."""
    return len(text) * size * 0.58


#: consumers' colors (no red: red is for faults and violations)
CONSUMER_COLORS = (
    "#1f77b4",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#393b79",
    "#7f7f7f",
)

#: the membership machine's states (specs/membership.yaml): green owns and polls, yellow/orange (re)joins,
#: blue/purple runs a rebalance callback, red lost its lease, grey is out of the group or leaving
STATE_COLORS: Mapping[str, str] = {
    "unjoined": "#e0e0e0",
    "joining": "#ffe082",
    "join_backoff": "#ffecb3",
    "syncing": "#ffb74d",
    "assigning_partitions": "#64b5f6",
    "prepare_revocation": "#b39ddb",
    "committing_revoked": "#d1c4e9",
    "revoking_partitions": "#9575cd",
    "partitions_revoked": "#d1c4e9",  # the state's name before the commit came first (older histories)
    "stable": "#81c784",
    "fenced": "#e53935",
    "stale": "#ef9a9a",
    "fatal": "#b71c1c",
    "revoking_then_leave": "#cfd8dc",
    "committing_then_leave": "#cfd8dc",
    "assigning_then_leave": "#cfd8dc",
    "lost_then_leave": "#cfd8dc",
    "leave_revoking": "#b0bec5",
    "leave_committing": "#b0bec5",
    "leave_lost": "#b0bec5",
    "leaving": "#90a4ae",
}
_OTHER_STATES = ("#d7ccc8", "#c5e1a5", "#b2dfdb", "#f8bbd0", "#dcedc8", "#ffccbc")
_DARK_STATES = frozenset({"fenced", "fatal"})


def state_color(state: str) -> str:
    known = STATE_COLORS.get(state)
    if known is not None:
        return known
    return _OTHER_STATES[sum(state.encode()) % len(_OTHER_STATES)]


def state_text_color(state: str) -> str:
    return "#fff" if state in _DARK_STATES else "#222"


RED = "#d32f2f"

STYLE = """
text{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;fill:#222}
.t{font-size:15px;font-weight:bold}.sub{font-size:11px;fill:#555}.ax{font-size:10px;fill:#555}
.grid{stroke:#000;stroke-opacity:.08}.cl{font-size:12px;font-weight:bold}.cid{font-size:9px;fill:#777}
.pl{font-size:9.5px;fill:#444;font-family:DejaVu Sans Mono,Menlo,monospace}
.st{font-size:8.5px}.bl{font-size:8.5px;fill:#fff}.sec{font-size:12px;font-weight:bold;fill:#333}
.rd{stroke:#000;stroke-opacity:.45;stroke-width:1}.srd{stroke:#d32f2f;stroke-width:1.6}
.ca{fill:#111}.cf{fill:none;stroke:#d32f2f;stroke-width:1.3}
.fault{fill:#d32f2f;stroke:#fff;stroke-width:.6}.gap{fill:url(#hatch)}.gl{font-size:9px;fill:#555}
.vio{fill:#d32f2f;fill-opacity:.22;stroke:#d32f2f;stroke-width:1}.vl{font-size:10px;font-weight:bold;fill:#fff}
.gen{stroke:#455a64;stroke-opacity:.45;stroke-dasharray:3 3}.genl{font-size:9px;fill:#455a64}
.ov{fill:url(#ovh);stroke:#d32f2f;stroke-width:.8}.lg{font-size:10px}.ft{font-size:10px;fill:#666}
"""

DEFS = (
    '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
    '<rect width="6" height="6" fill="#000" fill-opacity=".07"/><line x1="0" y1="0" x2="0" y2="6" stroke="#000" '
    'stroke-opacity=".28" stroke-width="2"/></pattern>'
    '<pattern id="ovh" width="5" height="5" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)">'
    '<rect width="5" height="5" fill="#d32f2f" fill-opacity=".25"/><line x1="0" y1="0" x2="0" y2="5" '
    'stroke="#d32f2f" stroke-width="2"/></pattern></defs>'
)
