"""Test aids that ship with the package: a checker over group members' logged histories.

``_member_process`` (a member in its own process, logging its history) and ``_freeze_run`` (members of
one group, one of them frozen again and again, then the checker) are run by the group tests and by
``tools/group-freeze-check``; they are not imported here because the run needs confluent-kafka, a dev
dependency."""

from ._group_history import (
    CheckResult,
    Violation,
    broker_commits_backwards,
    check,
    commits_backwards,
    load_histories,
    reads_below_commit,
    shared_reads,
    stale_reads,
    summarize,
)

__all__ = [
    "CheckResult",
    "Violation",
    "broker_commits_backwards",
    "check",
    "commits_backwards",
    "load_histories",
    "reads_below_commit",
    "shared_reads",
    "stale_reads",
    "summarize",
]
