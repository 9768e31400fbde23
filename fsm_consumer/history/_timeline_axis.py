"""The timeline picture's axis and what runs across every band (``_timeline``): the time ticks, a dashed
line where each generation was first assigned (a rebalance ended), the checker's violations."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from ._model import fmt_group
from ._svg import BAR_H, BAR_Y, LEFT, RED, RIGHT, element, nice_step, seconds_label, text_width
from ._violation import Violation

if TYPE_CHECKING:
    from ._timeline_view import PictureView


def axis(p: PictureView, axis_y: float, top: float, bottom: float) -> None:
    span = p.end - p.origin
    step = nice_step(span, max(2, int((p.width - LEFT - RIGHT) // 90)))
    k = 0
    while k * step <= span + 1e-9:
        x = p.x(p.origin + k * step)
        p.add("bg", element("line", {"x1": x, "x2": x, "y1": top - 4, "y2": bottom, "class": "grid"}), "", True)
        label = seconds_label(k * step, step)
        p.add("labels", element("text", {"x": x, "y": axis_y, "class": "ax", "text-anchor": "middle"}, text=label))
        k += 1
    attrs = {"x": LEFT - 22, "y": axis_y, "class": "ax", "text-anchor": "end"}
    p.add("labels", element("text", attrs, text="since the first line"))


def generations(p: PictureView, label_y: float, top: float, bottom: float) -> None:
    """A dashed line where each generation's first assignment came (a rebalance ended there)."""
    first: dict[tuple[str, int], list[str]] = {}
    at: dict[tuple[str, int], float] = {}
    for e in p.tl.events:
        generation = e.get("generation")
        if e["event"] != "assigned" or type(generation) is not int or generation < 0:
            continue
        info = p.tl.consumers[e["consumer"]]
        key = (fmt_group(info.group) if isinstance(info.group, str) else "", generation)
        at.setdefault(key, float(e["t"]))
        parts = e.get("partitions")
        count = len(parts) if isinstance(parts, list) else 0
        first.setdefault(key, []).append(f"{p.label[info.name]} +{count} at {p.rel(float(e['t']))}")
    several = len({g for g, _ in at}) > 1
    for (group, generation), t in sorted(at.items(), key=lambda kv: kv[1]):
        x = p.x(t)
        tip = f"generation {generation}" + (f" of {group}" if group else "") + ": partitions assigned: "
        tip += "; ".join(first[(group, generation)][:8])
        line = {"x1": x, "x2": x, "y1": top - 4, "y2": bottom, "class": "gen"}
        p.add("bg", element("line", line, title=tip), "generation lines")
        label = f"g{generation}" if not several else f"{group.removeprefix('group ')} g{generation}"
        p.add("labels", element("text", {"x": x + 2, "y": label_y, "class": "genl"}, title=tip, text=label))


def violations(p: PictureView, label_y: float, top: float, bottom: float) -> None:
    """A red band at each violation's time with its rule's letter on the axis (those of one rule within
    4 px drawn as one, "E×3"; a letter that would cover the one before it left out), a red ring on the rows
    of its consumers' partition; those without a time go to the footer."""
    timed: dict[tuple[str, int], list[tuple[float, Violation]]] = defaultdict(list)
    untimed: dict[str, int] = defaultdict(int)
    for v in p.result.violations:
        if v.t is None:
            untimed[v.rule] += 1
        else:
            timed[(v.rule, int(p.x(v.t) // 4))].append((v.t, v))
    label_end = 0.0
    for (rule, _), tvs in sorted(timed.items(), key=lambda kv: kv[1][0][0]):
        t0, vs = tvs[0][0], [v for _, v in tvs]
        x = p.x(t0)
        tip = "\n".join(str(v) for v in vs[:3]) + (f"\n... and {len(vs) - 3} more" if len(vs) > 3 else "")
        attrs = {"x": x - 1.5, "y": top - 4, "width": 3, "height": bottom - top + 4, "class": "vio"}
        data = {"data-rule": rule, "data-t": repr(t0), "data-count": len(vs)}
        p.add("violations", element("rect", {**attrs, **data}, title=tip), "violation marks")
        text = rule if len(vs) == 1 else f"{rule}×{len(vs)}"
        w = text_width(text, 10) + 6
        if x - w / 2 > label_end + 1:  # a letter where it does not cover the one before it
            label_end = x + w / 2
            box = {"x": x - w / 2, "y": label_y - 10, "width": w, "height": 13, "rx": 2, "fill": RED}
            p.add("violations", element("rect", box, title=tip), "violation marks")
            label = {"x": x, "y": label_y, "class": "vl", "text-anchor": "middle"}
            p.add("violations", element("text", label, text=text), "violation marks")
        rows: dict[float, list[tuple[float, Violation]]] = defaultdict(list)  # one ring per row
        for t, v in tvs:
            for name in v.consumers:
                ry = p.row_y.get((name, v.tp)) if v.tp is not None else None
                if ry is not None:
                    rows[ry].append((t, v))
        for ry, here in rows.items():
            ring = {"cx": p.x(here[0][0]), "cy": ry + BAR_Y + BAR_H / 2, "r": 5.5, "fill": "none"}
            ring |= {"stroke": RED, "stroke-width": 1.6, "class": "vm"}
            first = str(here[0][1])
            first = first if len(first) <= 240 else first[:239] + "…"
            title = first if len(here) == 1 else f"{len(here)} violations here, the first: {first}"
            p.add("violations", element("circle", ring, title=title), "violation marks")
    for rule, n in sorted(untimed.items()):
        p.notes.append(f"rule {rule}: {n} violation(s) without a time (not drawn): see fsm-consumer check-history")
