"""The rules of docs/histories.md, one function each: lines (or a built ``Timeline``) in, violations out.

Pure: no I/O, no clock. Times are the histories' ``time.monotonic()`` milliseconds, system-wide on Linux,
so lines of several processes on one machine compare. Where lines have equal times, the order they were
given in decides (``Timeline``: file by file, line by line), and a line's position ``i`` in that order
is what "between" and "during" are judged by.

Rules that compare consumers (E, D, M, C) compare the consumers of one group (``started``'s ``group``); a
consumer without a ``started`` line is compared with those of every group. Who owned what when is one
model for all of them (``_ownership``); each rule function takes that model when the caller built it.
The share rules (H N A S) judge share groups' lines, per record (``_share``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .._violation import Violation
from ._commits import broker_backwards, rule_c
from ._keys import rule_k
from ._lost import normalize_produced, rule_l
from ._owners import rule_e, stale_figures, stale_polls
from ._positions import rule_d, rule_m
from ._share import DELIVERY_LIMIT, rule_a, rule_h, rule_n, rule_s
from ._shared import Lines

#: rule letter -> the function that checks it over lines (L and C take more: see check())
RULE_FUNCTIONS: Mapping[str, Callable[..., list[Violation]]] = {
    "L": rule_l,
    "E": rule_e,
    "D": rule_d,
    "M": rule_m,
    "C": rule_c,
    "K": rule_k,
    "H": rule_h,
    "N": rule_n,
    "A": rule_a,
    "S": rule_s,
}

__all__ = [
    "DELIVERY_LIMIT",
    "RULE_FUNCTIONS",
    "Lines",
    "broker_backwards",
    "normalize_produced",
    "stale_figures",
    "stale_polls",
    "rule_a",
    "rule_c",
    "rule_d",
    "rule_e",
    "rule_h",
    "rule_k",
    "rule_l",
    "rule_m",
    "rule_n",
    "rule_s",
]
