"""The house rules the code must keep, checked against the code itself: the layer table and the
SubscriptionState table of docs/architecture.md (recomputed by tools/architecture-tables), and no module
past 500 lines."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = runpy.run_path(str(ROOT / "tools" / "architecture-tables"))
MAX_LINES = 500


def test_no_import_runs_from_a_lower_layer_up_and_the_imports_column_is_the_codes():
    lines = TOOL["DOC"].read_text().split("\n")
    assert TOOL["check_layers"](lines, False) == []


def test_the_subscription_state_table_says_who_calls_what():
    lines = TOOL["DOC"].read_text().split("\n")
    assert TOOL["check_subscription"](lines, False) == []


def test_the_checker_sees_an_import_from_below():
    lines = TOOL["DOC"].read_text().split("\n")
    rows = TOOL["layer_rows"](lines)
    at = {units[0]: i for i, units in rows}
    # swap machines and broker: both import nothing, still fine
    lines[at["machines"]], lines[at["broker"]] = lines[at["broker"]], lines[at["machines"]]
    assert TOOL["check_layers"](lines, False) == []
    lines[at["machines"]], lines[at["broker"]] = lines[at["broker"]], lines[at["machines"]]
    transport, machines = at["transport"], at["machines"]
    lines[transport], lines[machines] = lines[machines], lines[transport]  # transport imports machines
    assert any("transport imports machines" in f for f in TOOL["check_layers"](lines, False))


def test_no_module_is_over_500_lines():
    sizes = {
        p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in (ROOT / "fsm_consumer").rglob("*.py")
    }
    assert {p: n for p, n in sizes.items() if n > MAX_LINES} == {}
