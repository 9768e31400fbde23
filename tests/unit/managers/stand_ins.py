"""Stand-ins for the managers a membership manager asks, in the unit tests of this folder."""

from __future__ import annotations


class Coordinator:
    """The coordinator manager as a membership manager reads it: found at node 7, always usable.
    ``errors_expected=False`` makes a coordinator error (``mark_unknown``) fail the test."""

    node = 7
    brokers = {7: ("127.0.0.1", 9092)}
    gone_for_close = False

    def __init__(self, *, errors_expected: bool = True) -> None:
        self._errors_expected = errors_expected

    def needed(self) -> None:
        pass

    def mark_unknown(self) -> None:
        if not self._errors_expected:
            raise AssertionError("no coordinator error expected here")
