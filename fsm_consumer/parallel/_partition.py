"""One assigned partition of a ParallelConsumer: its ``parallel`` machine (specs/parallel.yaml), its
progress, and how many of its records are out (queued or running).

The hooks are the spec's: ``hold``/``unhold`` stop and restart handing out the partition's records
(and its fetching), ``drop_queued`` forgets the queued ones when a drain runs out of time, the
partition is lost or sought back (a new run then tracks it from the sought offset), ``commit_final``
notes the last commit. The effects on the consumer and the scheduler go through the ``Owner`` given
(the ParallelConsumer), so this model stays free of I/O and threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..machines import SpecMachine, shipped_spec
from ._progress import PartitionProgress

if TYPE_CHECKING:
    from ..structs import TopicPartition


class Owner(Protocol):
    def hold(self, tp: TopicPartition, below: int | None = None) -> None: ...
    def unhold(self, tp: TopicPartition) -> None: ...
    def drop_queued(self, tp: TopicPartition) -> int: ...
    def final_commit(self, tp: TopicPartition, offset: int, metadata: str) -> None: ...


class PartitionRun:
    def __init__(
        self,
        tp: TopicPartition,
        progress: PartitionProgress | None,
        owner: Owner,
        settings: object,  # what the spec's durations read (revoke_timeout_ms), by attribute or key
        now: float,
        limit: int,
    ) -> None:
        self.tp = tp
        self.progress = progress  # None until the first record when nothing was committed
        self.owner = owner
        self.limit = limit
        self.out = 0  # records received and not yet completed (queued or running)
        self.completed = 0
        self.committed: tuple[int, str] | None = None  # the last (offset, metadata) committed
        self.machine = SpecMachine(
            shipped_spec("parallel"), self, config=settings, now=now, instance=f"{tp[0]}-{tp[1]}"
        )

    @property
    def state(self) -> str:
        return self.machine.state

    @property
    def live(self) -> bool:
        """Still this member's: its completions count."""
        return self.machine.state != "released"

    def receive(self, offset: int) -> bool:
        """A polled record of this partition: False when it was completed before (skip it)."""
        if self.progress is None:
            self.progress = PartitionProgress(offset, limit=self.limit)
        if not self.progress.receive(offset):
            return False
        self.out += 1
        return True

    def complete(self, offset: int) -> None:
        self.out -= 1
        self.completed += 1
        assert self.progress is not None  # set by receive(), which every completed record went through
        self.progress.complete(offset)

    def fail(self, offset: int) -> None:
        """A record failed for good (or its handler aborted run()): no longer out, so a drain does not
        wait for it, and never done, so no commit passes it."""
        self.out -= 1

    def sought_back(self, offset: int) -> bool:
        """Whether a polled record at ``offset`` means the application sought the partition back: it is
        not above the last offset received (or, before any, below the committed offset restored)."""
        return self.progress is not None and offset <= self.progress.last_received

    def check_size(self, now: float) -> None:
        """Block or unblock on the size of the metadata encoding (once per loop pass, not per record)."""
        if self.progress is None:
            return
        state = self.machine.state
        if state == "active" and self.progress.should_block():
            self.machine.fire("overflow", now)
        elif state == "blocked":
            if self.progress.may_resume():
                self.machine.fire("gap_closed", now)
            else:
                self.hold()  # the lowest unfinished record moved on

    def to_commit(self) -> tuple[int, str] | None:
        """(offset, metadata) when it differs from the last commit."""
        if self.progress is None:
            return None
        value = (self.progress.committable, self.progress.metadata())
        return None if value == self.committed else value

    def metrics(self) -> dict[str, Any]:
        p = self.progress
        return {
            "state": self.state,
            "out": self.out,
            "completed": self.completed,
            "committable": p.committable if p else None,
            "gap": p.pending if p else 0,
            "metadata-bytes": p.metadata_bytes if p else 0,
            "metadata-truncated": p.truncated if p else False,
            "metadata-committed-bytes": len(self.committed[1]) if self.committed else 0,
            "committed": self.committed[0] if self.committed else None,
        }

    # -- the spec's hooks ----------------------------------------------------------------------------
    def hold(self) -> None:
        # only the lowest unfinished record may run: completing it can only shrink the encoding
        assert self.progress is not None  # blocked is entered (and stays) only with progress: check_size()
        self.owner.hold(self.tp, below=self.progress.committable + 1)

    def unhold(self) -> None:
        self.owner.unhold(self.tp)

    def drop_queued(self) -> None:
        self.owner.hold(self.tp)
        self.out -= self.owner.drop_queued(self.tp)

    def commit_final(self) -> None:
        value = self.to_commit()
        if value is not None:
            self.owner.final_commit(self.tp, *value)
