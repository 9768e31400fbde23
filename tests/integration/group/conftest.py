"""Fixtures of the group tests; the harness itself is in group_harness.py."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make group_harness importable

from group_harness import Member  # noqa: E402


@pytest.fixture
def members():
    made: list[Member] = []

    def make(*args, **kw) -> Member:
        m = Member(*args, **kw)
        made.append(m)
        return m

    make.made = made  # the members made so far, for a test that needs one it did not keep
    yield make
    for m in made:
        if not m._stop.is_set():
            try:
                m.stop(timeout_ms=3000)
            except Exception:
                pass


def pytest_terminal_summary(terminalreporter) -> None:
    """The mutants of the scenarios' clean histories, per broker: every one was caught (else its test failed)."""
    from scenario_verdict import TRIED

    from fsm_consumer.history import CONSUMER_MUTANT_KINDS

    for broker, counts in sorted(TRIED.items()):
        shown = ", ".join(f"{kind} {counts.get(kind, 0)}" for kind in CONSUMER_MUTANT_KINDS)
        terminalreporter.write_line(f"mutants of clean scenario histories on {broker}, all caught: {shown}")


def pytest_sessionfinish(session, exitstatus) -> None:
    """With FSM_REQUIRE_ALL_MUTANTS=1 (CI), every kind of mutant must have been tried on every broker the scenarios
    ran on: a kind no history could host proves nothing about the checker."""
    import os

    from scenario_verdict import TRIED

    from fsm_consumer.history import CONSUMER_MUTANT_KINDS

    if os.environ.get("FSM_REQUIRE_ALL_MUTANTS") != "1":
        return
    missing = {b: [k for k in CONSUMER_MUTANT_KINDS if not counts.get(k)] for b, counts in TRIED.items()}
    missing = {b: ks for b, ks in missing.items() if ks}
    if missing:
        session.config.get_terminal_writer().line(f"mutant kinds never tried (FSM_REQUIRE_ALL_MUTANTS=1): {missing}")
        session.exitstatus = 1
