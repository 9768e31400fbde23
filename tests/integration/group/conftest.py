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
