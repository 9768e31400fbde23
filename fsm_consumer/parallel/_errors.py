"""How a ParallelConsumer's run() ends in error: a record that failed for good (HandlerFailedError), or an
exception that must stop the process (KeyboardInterrupt, SystemExit...) raised as itself, noted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import FsmConsumerError
from ._workers import Outcome

if TYPE_CHECKING:
    from ..structs import ConsumerRecord


class HandlerFailedError(FsmConsumerError):
    """The handler failed on a record after its retries and no ``on_failure`` was given. What was
    completed before was committed; this record and everything after it in its partition were not."""

    def __init__(self, record: ConsumerRecord, cause: BaseException) -> None:
        super().__init__(
            f"the handler failed on {record.topic}-{record.partition}@{record.offset}: {cause!r}; "
            f"completed records were committed, this one was not (give on_failure= to dead-letter "
            f"failures and go on)"
        )
        self.record = record
        self.__cause__ = cause


def noted(outcome: Outcome) -> BaseException:
    """The aborting exception, with a note saying where it came from (it is raised from run())."""
    exc, job = outcome.error, outcome.job
    assert exc is not None  # an abort outcome always carries what aborted
    if job is None:
        exc.add_note(
            "it ended a ParallelConsumer's worker outside any record; run() stopped: the records "
            "completed were committed"
        )
    else:
        record = job.record
        exc.add_note(
            f"raised in a ParallelConsumer's worker on {record.topic}-{record.partition}@{record.offset}; "
            f"run() stopped: the records completed were committed, this one was not"
        )
    return exc
