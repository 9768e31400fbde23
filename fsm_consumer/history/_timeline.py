"""The picture of a group's histories (docs/histories.md, "The picture"): ``draw_timeline`` returns a
standalone SVG document with every consumer's membership states, ownership of each partition (reads and
commits on it), faults and silent stretches on one time axis, the partitions' owners side by side below,
and the checker's violations across it all. What it draws is worked out in ``_timeline_marks``; the SVG
text is written by hand (``_svg``)."""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ._check import CheckResult, check
from ._load import History
from ._model import TP, Commit, ConsumerInfo, GroupKey, Interval, Read, Timeline, as_timeline, fmt_group, fmt_tp
from ._ownership import Kind, Model
from ._svg import (
    BAR_H,
    BAR_Y,
    CONSUMER_COLORS,
    DEFS,
    LANE_H,
    LEFT,
    PAD,
    RED,
    RIGHT,
    ROW_H,
    STATE_H,
    STYLE,
    Canvas,
    duration,
    element,
    num,
    state_color,
    state_text_color,
    text_width,
)
from ._timeline_axis import axis, generations, violations
from ._timeline_legend import legend_and_footer
from ._timeline_marks import (
    bucket_px,
    committed_within,
    faults,
    lanes,
    membership_segments,
    merge_commits,
    merge_reads,
    merge_segments,
    outside_reads,
    overlaps,
    silent_gaps,
    within,
)

LAYERS = ("bg", "states", "bars", "reads", "commits", "gaps", "faults", "overlaps", "violations", "labels")


def draw_timeline(
    history_or_lines: History | Timeline | Iterable[Mapping[str, Any]],
    *,
    result: CheckResult | None = None,
    width: int = 1400,
    title: str | None = None,
    gap_ms: float = 1000.0,
    max_elements: int = 20_000,
) -> str:
    """A standalone SVG document of the histories (``load()``'s, a ``Timeline`` or the lines themselves):
    one band per consumer (its membership states; a row per partition it owned, read or committed, with
    its ownership intervals as bars, its reads as ticks, its commits as triangles; faults in red; stretches
    without a line longer than ``gap_ms`` hatched), then each partition's owners, and the violations of
    ``result`` (by default ``check`` of the same lines) as red bands with their rule's letter. Reads and
    commits closer than a pixel are merged, and at most ``max_elements`` marks are drawn: a footer says
    what was merged or left out."""
    if width < 400:
        raise ValueError(f"width must be at least 400 px, not {width}")
    tl = as_timeline(history_or_lines)
    if result is None:
        result = check(tl)
    model = result.model if result.model is not None and result.model.tl is tl else Model(tl)
    return _Picture(tl, model, result, width, title, gap_ms, max_elements).draw()


def _rel(t: float, origin: float) -> str:
    return f"{(t - origin) / 1000.0:.3f} s"


class _Picture:
    """One drawing: the time axis (``x``), the rows laid out, the marks added to ``canvas`` layer by layer."""

    def __init__(
        self,
        tl: Timeline,
        model: Model,
        result: CheckResult,
        width: int,
        title: str | None,
        gap_ms: float,
        max_elements: int,
    ) -> None:
        self.tl, self.model, self.result, self.width, self.gap_ms = tl, model, result, float(width), gap_ms
        self.origin = float(tl.events[0]["t"]) if tl.events else 0.0
        self.end = float(tl.events[-1]["t"]) if tl.events else 0.0
        self.scale = (self.width - LEFT - RIGHT) / max(self.end - self.origin, 1.0)
        self.canvas = Canvas(LAYERS, max_elements)
        self.max_elements = max_elements
        self.consumers = sorted(tl.consumers.values(), key=lambda c: (c.first_t, c.name))
        self.color = {c.name: CONSUMER_COLORS[n % len(CONSUMER_COLORS)] for n, c in enumerate(self.consumers)}
        clients = [c.client for c in self.consumers]
        self.label = {c.name: c.client if clients.count(c.client) == 1 else c.name for c in self.consumers}
        self.title = title
        self.gaps = silent_gaps(tl, gap_ms)
        self.faults = faults(tl)
        self.notes: list[str] = []
        self.states_used: set[str] = set()
        self.row_y: dict[tuple[str, TP], float] = {}
        self.reads: dict[tuple[str, TP], list[Read]] = defaultdict(list)
        for r in tl.reads:
            self.reads[(r.consumer, r.tp)].append(r)
        self.commits: dict[tuple[str, TP], list[Commit]] = defaultdict(list)
        for k in tl.commits:
            self.commits[(k.consumer, k.tp)].append(k)
        self.owned: dict[tuple[str, TP], list[Interval]] = defaultdict(list)
        for v in tl.intervals:
            self.owned[(v.consumer, v.tp)].append(v)

    def x(self, t: float) -> float:
        return LEFT + (t - self.origin) * self.scale

    def rel(self, t: float) -> str:
        return _rel(t, self.origin)

    def add(self, layer: str, svg: str, kind: str = "", required: bool = False) -> None:
        self.canvas.add(layer, svg, kind=kind, required=required)

    def draw(self) -> str:
        y = self.header()
        axis_y, top = y, y + 34
        bands, y = self.layout_bands(top)
        groups, bottom = self.layout_partitions(y + 8)
        axis(self, axis_y, top, bottom)
        generations(self, axis_y + 16, top, bottom)
        violations(self, axis_y + 16, top, bottom)
        for c, y0, y1 in bands:
            self.band(c, y0, y1)
        for group, tps, y0 in groups:
            self.partition_view(group, tps, y0)
        self.marks()
        legend, height = legend_and_footer(self, bottom + 14)
        svg_attrs = {
            "xmlns": "http://www.w3.org/2000/svg",
            "width": int(self.width),
            "height": int(height),
            "viewBox": f"0 0 {int(self.width)} {int(height)}",
            "data-origin": repr(self.origin),
            "data-left": repr(LEFT),
            "data-scale": repr(self.scale),
        }
        head = element("svg", svg_attrs)[:-2] + ">"
        background = f'<rect width="{int(self.width)}" height="{int(height)}" fill="#fff"/>'
        return "\n".join(
            ['<?xml version="1.0" encoding="UTF-8"?>', head, f"<style>{STYLE}</style>", DEFS, background]
            + [self.canvas.body(), legend, "</svg>", ""]
        )

    # -- layout ---------------------------------------------------------------------------------------

    def header(self) -> float:
        groups = sorted(str(g) for g in self.tl.groups() if isinstance(g, str))
        title = self.title or ("Consumer timeline: " + (", ".join(f"group {g}" for g in groups) or "no group"))
        self.add("labels", element("text", {"x": 8, "y": 20, "class": "t"}, text=title), required=True)
        span = self.end - self.origin
        walled = next((e for e in self.tl.events if type(e.get("wall")) is float), None)
        when = ""
        if walled is not None:  # the wall clock at the first line, from the first line that has one
            at = float(walled["wall"]) - (float(walled["t"]) - self.origin) / 1000.0
            when = f" from {datetime.datetime.fromtimestamp(at, datetime.UTC):%Y-%m-%d %H:%M:%S} UTC"
        sub = (
            f"{len(self.consumers)} consumer(s), {len(self.tl.events)} lines, {duration(span)}{when}; "
            f"time since the first line (t = {self.origin:.1f} ms, time.monotonic())"
        )
        self.add("labels", element("text", {"x": 8, "y": 36, "class": "sub"}, text=sub), required=True)
        by_rule = {rule: len(vs) for rule, vs in self.result.by_rule().items() if vs}
        verdict = (
            "checker: " + ", ".join(f"rule {r}: {n} violation(s)" for r, n in by_rule.items())
            if by_rule
            else "checker: no violations" + ("" if self.result.ok else " (the history was not checked whole)")
        )
        fill = RED if by_rule else "#2e7d32"
        self.add("labels", element("text", {"x": 8, "y": 51, "class": "sub", "style": f"fill:{fill}"}, text=verdict))
        return 70.0

    def rows_of(self, c: ConsumerInfo) -> list[TP]:
        tps = {tp for (name, tp) in self.owned if name == c.name}
        tps |= {tp for (name, tp) in self.reads if name == c.name}
        tps |= {tp for (name, tp) in self.commits if name == c.name}
        return sorted(tps)

    def layout_bands(self, y: float) -> tuple[list[tuple[ConsumerInfo, float, float]], float]:
        out = []
        for c in self.consumers:
            y0 = y
            y += PAD + STATE_H + 4
            for tp in self.rows_of(c):
                self.row_y[(c.name, tp)] = y
                y += ROW_H
            y += PAD
            out.append((c, y0, y))
        return out, y

    def layout_partitions(self, y: float) -> tuple[list[tuple[GroupKey, dict[TP, list[list[Interval]]], float]], float]:
        by_group: dict[GroupKey, dict[TP, list[Interval]]] = defaultdict(lambda: defaultdict(list))
        for v in self.tl.intervals:
            by_group[self.tl.consumers[v.consumer].group][v.tp].append(v)
        out = []
        for group in sorted(by_group, key=str):
            tps = {tp: lanes(vs) for tp, vs in sorted(by_group[group].items())}
            out.append((group, tps, y))
            y += 20 + sum(len(ls) * LANE_H + 5 for ls in tps.values())
        return out, y

    # -- drawing --------------------------------------------------------------------------------------

    def band(self, c: ConsumerInfo, y0: float, y1: float) -> None:
        n = self.consumers.index(c)
        fill = "#f4f6f8" if n % 2 == 0 else "#ffffff"
        attrs = {"x": 0, "y": y0, "width": int(self.width), "height": y1 - y0, "fill": fill, "class": "band"}
        self.add("bg", element("rect", {**attrs, "data-consumer": c.name}), required=True)
        swatch = {"x": 0, "y": y0, "width": 4, "height": y1 - y0, "fill": self.color[c.name]}
        self.add("bg", element("rect", swatch), required=True)
        group = "no started line" if not isinstance(c.group, str) and c.group is not None else fmt_group(c.group)
        about = (
            f"{c.name} (client {c.client}, {group}): lines {self.rel(c.first_t)} .. {self.rel(c.last_t)}, "
            f"generations {sorted(c.generations) or 'none'}" + (", closed" if c.closed else ", never closed")
        )
        sy = y0 + PAD
        self.add(
            "labels", element("text", {"x": 10, "y": sy + 10, "class": "cl"}, title=about, text=self.label[c.name])
        )
        if self.label[c.name] != c.name:
            self.add("labels", element("text", {"x": 10, "y": sy + 21, "class": "cid"}, text=c.name))
        self.add(
            "labels", element("text", {"x": LEFT - 6, "y": sy + 9, "class": "pl", "text-anchor": "end"}, text="state")
        )
        self.states(c, sy)
        for tp in self.rows_of(c):
            ry = self.row_y[(c.name, tp)]
            name = fmt_tp(tp)
            shown = name if len(name) <= 26 else "…" + name[-25:]
            attrs = {"x": LEFT - 6, "y": ry + 9, "class": "pl", "text-anchor": "end"}
            self.add("labels", element("text", attrs, title=name, text=shown), required=True)
        for gap in self.gaps.get(c.name, []):
            x0, x1 = self.x(gap.t0), self.x(gap.t1)
            tip = (
                f"no line from {self.label[c.name]} for {duration(gap.t1 - gap.t0)} ({self.rel(gap.t0)} .. "
                f"{self.rel(gap.t1)}): the process was frozen or stalled, or had nothing to log"
            )
            attrs = {"x": x0, "y": sy - 2, "width": max(1.0, x1 - x0), "height": y1 - sy - PAD + 4, "class": "gap"}
            attrs["data-consumer"] = c.name
            self.add("gaps", element("rect", attrs, title=tip), "silent stretches")
            if x1 - x0 > 56 and gap.t1 - gap.t0 >= 2 * self.gap_ms:
                label = f"silent {duration(gap.t1 - gap.t0)}"
                w = text_width(label, 9) + 6
                box = {"x": (x0 + x1 - w) / 2, "y": sy, "width": w, "height": STATE_H, "fill": "#fff", "rx": 2}
                self.add("gaps", element("rect", {**box, "fill-opacity": 0.85}), required=True)
                text = {"x": (x0 + x1) / 2, "y": sy + 9, "class": "gl", "text-anchor": "middle"}
                self.add("gaps", element("text", text, text=label), required=True)
        marks: dict[int, list[str]] = defaultdict(list)
        for f in self.faults.get(c.name, []):
            marks[int(self.x(f.t))].append(f"{self.rel(f.t)} (t={f.t:.1f} ms): {f.text}")
        for px, texts in marks.items():
            pts = f"{px - 4},{num(sy - 4)} {px + 4},{num(sy - 4)} {px},{num(sy + 6)}"
            tip = "\n".join(texts[:5] + ([f"... and {len(texts) - 5} more"] if len(texts) > 5 else []))
            self.add("faults", element("polygon", {"points": pts, "class": "fault"}, title=tip), "faults")

    def states(self, c: ConsumerInfo, sy: float) -> None:
        segments = merge_segments(membership_segments(self.tl, c.name), self.x)
        if not segments:
            attrs = {"x": LEFT + 4, "y": sy + 9, "class": "st", "style": "fill:#888"}
            self.add("labels", element("text", attrs, text="(no membership transitions)"))
        for s in segments:
            self.states_used.add(s.state)
            x0, x1 = self.x(s.t0), self.x(s.t1)
            tip = f"{s.state}: {self.rel(s.t0)} .. {self.rel(s.t1)} ({duration(s.t1 - s.t0)})" + (
                f", entered by {s.via}" if s.via else ""
            )
            tip += f", generation {s.generation}" if s.generation >= 0 else ""
            tip += f" ({s.merged} briefer state(s) merged in)" if s.merged else ""
            attrs = {"x": x0, "y": sy, "width": max(0.5, x1 - x0), "height": STATE_H, "fill": state_color(s.state)}
            self.add("states", element("rect", {**attrs, "class": "state", "data-state": s.state}, title=tip), "states")
            if x1 - x0 > text_width(s.state, 8.5) + 6:
                attrs = {"x": x0 + 3, "y": sy + 9, "class": "st", "style": f"fill:{state_text_color(s.state)}"}
                self.add("states", element("text", attrs, text=s.state), "state labels")

    def bar(self, v: Interval, y: float, h: float, label: str, view: str) -> None:
        """An ownership bar: in its consumer's band (``view`` "consumer") or its partition's row ("partition")."""
        x0, x1 = self.x(v.start_t), self.x(v.end_t)
        reads = within(self.reads.get((v.consumer, v.tp), []), v)
        read = (
            f"read {min(r.first for r in reads)}..{max(r.last for r in reads)} "
            f"({sum(r.count for r in reads)} records in {len(reads)} reads)"
            if reads
            else "read nothing"
        )
        acked = committed_within(self.commits.get((v.consumer, v.tp), []), v)
        committed = "" if acked is None else f", committed up to {acked}"
        tip = (
            f"{fmt_tp(v.tp)} owned by {self.label[v.consumer]} in generation {v.generation}: {self.rel(v.start_t)} .. "
            f"{self.rel(v.end_t)} ({duration(v.end_t - v.start_t)}), ended by {v.ended_by}; {read}{committed}"
        )
        owned = self.model.owned[v]
        if owned.end_t < v.end_t or owned.void_by is not None:
            tip += f"; by the group's word, {owned.ended()} (hatched: owned in its own view only)"
        attrs = {"x": x0, "y": y, "width": max(1.0, x1 - x0), "height": h, "fill": self.color[v.consumer], "rx": 1.5}
        data: dict[str, object] = {
            "data-view": view,
            "data-consumer": v.consumer,
            "data-tp": fmt_tp(v.tp),
            "data-t0": repr(v.start_t),
        }
        data |= {"data-t1": repr(v.end_t), "data-generation": v.generation, "data-ended-by": v.ended_by}
        self.add("bars", element("rect", {**attrs, "class": "own", **data}, title=tip), "ownership bars")
        if owned.end_t < v.end_t or owned.void_by is not None:
            # the part its group had given to another member: the model every rule judges by
            gone = self.x(owned.end_t if owned.void_by is None else v.start_t)
            tail = {
                "x": gone,
                "y": y,
                "width": max(1.0, x1 - gone),
                "height": h,
                "class": "ov",
                "data-legit-t1": repr(owned.end_t),
            }
            self.add("bars", element("rect", tail, title=f"{fmt_tp(v.tp)}: {owned.ended()}"), "ownership bars")
        if v.ended_by in ("session_expired", "lost", "abandoned"):
            cap = {"x": max(x0, x1 - 2.5), "y": y - 1, "width": 2.5, "height": h + 2, "fill": RED}
            self.add("bars", element("rect", cap, title=f"ended by {v.ended_by}"), "ownership bars")
        if label and x1 - x0 > text_width(label, 8.5) + 6:
            self.add("bars", element("text", {"x": x0 + 3, "y": y + h - 2, "class": "bl"}, text=label), "bar labels")

    def partition_view(self, group: GroupKey, tps: dict[TP, list[list[Interval]]], y: float) -> None:
        several = len({c.group for c in self.consumers}) > 1
        head = "Owners by partition" + (f" ({fmt_group(group)})" if several else "")
        self.add("labels", element("text", {"x": 10, "y": y + 13, "class": "sec"}, text=head), required=True)
        y += 20
        for tp, tp_lanes in tps.items():
            name = fmt_tp(tp)
            shown = name if len(name) <= 26 else "…" + name[-25:]
            attrs = {"x": LEFT - 6, "y": y + 9, "class": "pl", "text-anchor": "end"}
            self.add("labels", element("text", attrs, title=name, text=shown), required=True)
            lane_of = {id(v): n for n, lane in enumerate(tp_lanes) for v in lane}
            for n, lane in enumerate(tp_lanes):
                for v in lane:
                    self.bar(
                        v, y + n * LANE_H + 1, LANE_H - 2, f"{self.label[v.consumer]} g{v.generation}", "partition"
                    )
            for o in overlaps([v for lane in tp_lanes for v in lane]):
                la, lb = sorted((lane_of[id(o.a)], lane_of[id(o.b)]))
                x0, x1 = self.x(o.t0), self.x(o.t1)
                tip = (
                    f"{name} owned by {self.label[o.a.consumer]} (generation {o.a.generation}) and "
                    f"{self.label[o.b.consumer]} (generation {o.b.generation}) at once: {self.rel(o.t0)} .. "
                    f"{self.rel(o.t1)} ({duration(o.t1 - o.t0)})"
                )
                attrs = {"x": x0, "y": y + la * LANE_H, "width": max(2.0, x1 - x0), "height": (lb - la + 1) * LANE_H}
                self.add("overlaps", element("rect", {**attrs, "class": "ov"}, title=tip), "overlaps")
            y += len(tp_lanes) * LANE_H + 5

    def marks(self) -> None:
        """Each consumer's ownership bars, then its commits and reads, merged per pixel (or wider buckets
        when they would pass half the element budget)."""
        keys = sorted(self.row_y)
        for key in keys:
            for v in self.owned.get(key, []):
                self.bar(v, self.row_y[key] + BAR_Y, BAR_H, f"g{v.generation}", "consumer")
        rows = [(self.reads.get(k, []), self.commits.get(k, [])) for k in keys]
        px = bucket_px(rows, self.x, self.max_elements // 2)
        outside = outside_reads(self.model)
        n_reads = n_ticks = n_commits = n_marks = 0
        for key in keys:
            y = self.row_y[key]
            for m in merge_commits(self.commits.get(key, []), self.x, px):
                n_commits, n_marks = n_commits + m.commits, n_marks + 1
                x = self.x(m.t0)
                offsets = str(m.low) if m.low == m.high else f"{m.low}..{m.high}"
                gens = ",".join(str(g) for g in sorted(m.generations))
                what = "acknowledged" if m.acked else "FAILED: " + "; ".join(m.errors)
                when = self.rel(m.t0) if m.commits == 1 else f"{self.rel(m.t0)} .. {self.rel(m.t1)}"
                tip = f"{m.commits} commit(s) of offset {offsets} at {when} (generation {gens}), {what}"
                base, tip_y = y + BAR_Y + BAR_H + 0.5, y + ROW_H - 1
                data = {"data-offset": m.high, "data-t": repr(m.t0)}
                if m.acked:
                    pts = f"{num(x)},{num(base)} {num(x - 3)},{num(tip_y)} {num(x + 3)},{num(tip_y)}"
                    svg = element("polygon", {"points": pts, "class": "ca", **data}, title=tip)
                else:
                    a, b = f"{num(x - 3)} {num(base)}", f"{num(x + 3)} {num(tip_y)}"
                    c, d = f"{num(x + 3)} {num(base)}", f"{num(x - 3)} {num(tip_y)}"
                    d = f"M{a}L{b}M{c}L{d}"
                    svg = element("path", {"d": d, "class": "cf", **data}, title=tip)
                self.add("commits", svg, "commit marks")
            for r in merge_reads(self.reads.get(key, []), outside, self.x, px):
                n_reads, n_ticks = n_reads + r.reads, n_ticks + 1
                x = self.x(r.t0)
                gens = ",".join(str(g) for g in sorted(r.generations))
                when = self.rel(r.t0) if r.reads == 1 else f"{self.rel(r.t0)} .. {self.rel(r.t1)}"
                tip = (
                    f"{r.reads} read(s) at {when}: offsets {r.first}..{r.last}, {r.records} records (generation {gens})"
                )
                if r.outside:
                    tip += " - while this consumer did not own the partition (rule E)"
                    attrs = {"x1": x, "x2": x, "y1": y, "y2": y + ROW_H - 2, "class": "srd"}
                else:
                    y1, y2 = y + BAR_Y - 1, y + BAR_Y + BAR_H + 1
                    attrs = {"x1": x, "x2": x, "y1": y1, "y2": y2, "class": "rd"}
                self.add("reads", element("line", attrs, title=tip), "read ticks")
        if n_ticks < n_reads or n_marks < n_commits:
            self.notes.append(
                f"{n_reads} reads drawn as {n_ticks} ticks and {n_commits} commits as {n_marks} marks: those closer "
                f"than {px:g} px ({px / self.scale:.1f} ms) merged (hover a tick for what it holds)"
            )
        if outside:
            self.notes.append(
                f"{len(outside)} read(s) made while their consumer did not own the partition (red ticks: rule E)"
            )
        allowed = sum(1 for v in self.model.verdicts.values() if v.kind is Kind.ALLOWED)
        if allowed:
            self.notes.append(
                f"{allowed} read(s) of a poll under way when its consumer's ownership ended, handed out after it "
                "(rule E's allowance)"
            )


__all__ = ["draw_timeline"]
