"""What every fault scenario test asserts of its run (fsm_consumer.testing's ``_*_run``): the report printed,
no violation of any rule, records produced and all of them read, and, on Apache Kafka, the broker's commit
log read and judged. Then the checker is proved on that clean history: mutants of it, each with one kind of
violation injected (``fsm_consumer.history.mutation_report``), must every one be caught; ``TRIED`` counts them
per broker, so that the session can say which kinds were tried where (conftest.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from fsm_consumer.history import CheckResult, mutation_report

#: broker kind -> mutant kind -> mutants tried (all of them caught, or the test failed)
TRIED: dict[str, Counter[str]] = {}


def judged(result: CheckResult, histories: Path, kind: str, rules: str = "LEDMC") -> tuple[dict[str, Any], str]:
    """Assert the run clean by ``rules``, and every mutant of its history caught; its context and the report
    (for the test's own asserts)."""
    context = result.summary["context"]
    shown = {k: v for k, v in context.items() if k != "produced_counts"}
    report = f"{result.format()}\n{shown}\nhistories: {histories}"
    print(report)
    assert result.violations == [] and result.ok, report
    assert {rule: result.status(rule) for rule in rules} == dict.fromkeys(rules, "passed"), report
    assert context["produced"] > 0 and context["drained"], report
    if kind == "kafka":
        assert context["broker_commit_log_entries"], report
    # one mutant of each kind the history hosts (two doubled the report's time for CI's 60 minutes; a kind is
    # tried on every fault history of both brokers, each a different random pick, and FSM_REQUIRE_ALL_MUTANTS
    # still holds the run to every kind on each broker)
    mutated = mutation_report(result, rounds=1)
    print(mutated.format())
    assert mutated.all_caught, f"{mutated.format()}\nhistories: {histories}"
    TRIED.setdefault(kind, Counter()).update(o.mutant.kind for o in mutated.outcomes)
    return context, report
