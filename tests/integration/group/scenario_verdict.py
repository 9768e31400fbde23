"""What every fault scenario test asserts of its run (fsm_consumer.testing's ``_*_run``): the report printed,
no violation of any rule, records produced and all of them read, and, on Apache Kafka, the broker's commit
log read and judged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsm_consumer.history import CheckResult


def judged(result: CheckResult, histories: Path, kind: str, rules: str = "LEDMC") -> tuple[dict[str, Any], str]:
    """Assert the run clean by ``rules``; its context and the report (for the test's own asserts)."""
    context = result.summary["context"]
    shown = {k: v for k, v in context.items() if k != "produced_counts"}
    report = f"{result.format()}\n{shown}\nhistories: {histories}"
    print(report)
    assert result.violations == [] and result.ok, report
    assert {rule: result.status(rule) for rule in rules} == dict.fromkeys(rules, "passed"), report
    assert context["produced"] > 0 and context["drained"], report
    if kind == "kafka":
        assert context["broker_commit_log_entries"], report
    return context, report
