"""Help text as a terminal shows it: the modules' docstrings are written for the documentation (RST's
double backticks), their help for people."""

from __future__ import annotations


def plain(doc: str | None) -> str:
    """``doc`` without RST's double backticks."""
    return (doc or "").replace("``", "")
