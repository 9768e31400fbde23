"""The ``fsm-consumer`` command."""

from __future__ import annotations

import difflib
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


def _share_group(argv: list[str]) -> int:
    from ._share_group import share_group

    return share_group(argv)


_COMMANDS["ingest"] = _ingest
_COMMANDS["broker"] = _broker
_COMMANDS["demo"] = _demo
_COMMANDS["consume"] = _consume
_COMMANDS["check-history"] = _check_history
_COMMANDS["timeline"] = _timeline
_COMMANDS["share-group"] = _share_group


# each command's line in `fsm-consumer --help`, in the order shown
_SUMMARIES = {
    "ingest": "the main job: a topic into parquet with Spark (on the embedded broker unless --bootstrap-servers)",
    "consume": "print a topic's records, kcat-style or as JSON lines",
    "demo": "a tour without Spark: fill a topic, read it back, draw the state machines",
    "share-group": "describe a share group (members, start offsets, lag), show or set its settings, reset offsets",
    "broker": "start a broker for development (until Ctrl-C), or fetch Apache Kafka's jars",
    "check-history": "judge consumers' histories: nothing lost, one owner at a time, no commit backwards",
    "timeline": "draw consumers' histories as one SVG",
    "check-specs": "check the state machines' specs",
    "diagrams": "draw the state machines from their specs",
    "spec-coverage": "which transitions of the specs the last test run never fired",
}


def _usage() -> str:
    width = max(map(len, _SUMMARIES))
    lines = [f"  {name:<{width}}  {line}" for name, line in _SUMMARIES.items()]
    return (
        "usage: fsm-consumer COMMAND [options]\n\nA Kafka consumer whose control logic is state machines; "
        "its commands:\n\n" + "\n".join(lines) + "\n\n'fsm-consumer COMMAND --help' says more of one; "
        "'fsm-consumer --version' its version."
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        if len(argv) > 1 and argv[0] == "help" and argv[1] in _COMMANDS:  # help COMMAND: its own help
            return _COMMANDS[argv[1]](["--help"])
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from .._version import __version__

        print(f"fsm-consumer {__version__}")
        return 0
    if argv[0] not in _COMMANDS:
        close = difflib.get_close_matches(argv[0], list(_COMMANDS), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        print(f"fsm-consumer: no command '{argv[0]}'{hint}; 'fsm-consumer --help' lists them", file=sys.stderr)
        return 2
    return _COMMANDS[argv[0]](argv[1:])


__all__ = ["main"]
