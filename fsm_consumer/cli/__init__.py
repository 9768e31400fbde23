"""The ``fsm-consumer`` command."""

from __future__ import annotations

import sys

from ._specs import check_specs, render_diagrams, spec_coverage

_COMMANDS = {"check-specs": check_specs, "diagrams": render_diagrams, "spec-coverage": spec_coverage}


def _demo(argv: list[str]) -> int:
    from ._demo import demo

    return demo(argv)


def _consume(argv: list[str]) -> int:
    from ._consume import consume

    return consume(argv)


def _ingest(argv: list[str]) -> int:
    from ._ingest import ingest

    return ingest(argv)


def _check_history(argv: list[str]) -> int:
    from ._history import check_history

    return check_history(argv)


def _timeline(argv: list[str]) -> int:
    from ._timeline import timeline

    return timeline(argv)


def _broker(argv: list[str]) -> int:
    from ._broker import broker

    return broker(argv)


_COMMANDS["ingest"] = _ingest
_COMMANDS["broker"] = _broker
_COMMANDS["demo"] = _demo
_COMMANDS["consume"] = _consume
_COMMANDS["check-history"] = _check_history
_COMMANDS["timeline"] = _timeline


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in _COMMANDS:
        print("usage: fsm-consumer {" + ",".join(_COMMANDS) + "} [options]", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return _COMMANDS[argv[0]](argv[1:])


__all__ = ["main"]
