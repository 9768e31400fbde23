"""Consumer histories (docs/histories.md): their checker and their timeline, tools a user runs.

A consumer given ``history_path`` writes JSON lines of what it owned, handed out, committed and did (its
writer, ``fsm_consumer._history_writer``, lives apart: no consumer imports this package);
``load`` reads those of a directory, ``check`` judges them by the rules ``RULES`` (L E D M C K, and H N A S
for share groups) and returns a ``CheckResult``: its ``violations`` (``Violation``: the rule, a one-line
message naming the consumers, partition, offsets and times, the details, the transitions of those consumers
around it) and a ``summary``; ``CheckResult.format()`` is what ``fsm-consumer check-history`` prints.

    from fsm_consumer.history import check, load, read_produced

    result = check(load("histories/"), produced=read_produced("produced.json"))
    assert result.ok, result.format()

The rule functions (``rule_l`` ... ``rule_k``) each take the lines (or a ``Timeline``) and return that
rule's violations. ``draw_timeline`` draws the lines as one SVG picture (``fsm-consumer timeline``): every
consumer's states, ownership, reads, commits and faults on one time axis, with the violations marked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._check import WINDOW_MS, CheckResult, check, summarize
    from ._clock import IncomparableHistories
    from ._load import History, HistoryError, Unparseable, load, read_broker_commits, read_produced
    from ._model import Timeline
    from ._mutants import (
        CONSUMER_MUTANT_KINDS,
        MUTANT_KINDS,
        SHARE_MUTANT_KINDS,
        MutationReport,
        mutation_report,
    )
    from ._ownership import Model
    from ._rules import (
        broker_backwards,
        normalize_produced,
        rule_a,
        rule_c,
        rule_d,
        rule_e,
        rule_h,
        rule_k,
        rule_l,
        rule_m,
        rule_n,
        rule_s,
    )
    from ._timeline import draw_timeline
    from ._violation import RULES, Violation

# imported when first used: the checker, the mutants and the timeline are large, and a caller needs one of them
_WHERE = {
    **dict.fromkeys(("WINDOW_MS", "CheckResult", "check", "summarize"), "._check"),
    **dict.fromkeys(
        ("History", "HistoryError", "Unparseable", "load", "read_broker_commits", "read_produced"), "._load"
    ),
    "Timeline": "._model",
    "Model": "._ownership",
    "MutationReport": "._mutants",
    "MUTANT_KINDS": "._mutants",
    "CONSUMER_MUTANT_KINDS": "._mutants",
    "SHARE_MUTANT_KINDS": "._mutants",
    "mutation_report": "._mutants",
    "IncomparableHistories": "._clock",
    "draw_timeline": "._timeline",
    **dict.fromkeys(
        (
            "broker_backwards",
            "normalize_produced",
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
        ),
        "._rules",
    ),
    **dict.fromkeys(("RULES", "Violation"), "._violation"),
}


__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())


__all__ = [
    "RULES",
    "WINDOW_MS",
    "CheckResult",
    "History",
    "HistoryError",
    "IncomparableHistories",
    "MUTANT_KINDS",
    "CONSUMER_MUTANT_KINDS",
    "SHARE_MUTANT_KINDS",
    "Model",
    "MutationReport",
    "Timeline",
    "Unparseable",
    "Violation",
    "broker_backwards",
    "check",
    "draw_timeline",
    "load",
    "mutation_report",
    "normalize_produced",
    "read_broker_commits",
    "read_produced",
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
    "summarize",
]
