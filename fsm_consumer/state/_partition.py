"""What the consumer knows about one assigned partition."""

from __future__ import annotations

import attrs


@attrs.define(slots=True)
class PartitionState:
    """Mutable, guarded by SubscriptionState's lock.

    ``position`` is the offset of the next record to return; None until it is known (from a
    committed offset or the reset policy). ``epoch`` counts changes that make data fetched
    earlier unusable (seek, reset, pause, reassignment): a completed fetch carries the epoch it
    was sent under and is dropped if that no longer matches.
    """

    position: int | None = None
    leader_epoch: int = -1
    paused: bool = False
    reset_strategy: str | None = None  # 'earliest' / 'latest' / a timestamp request pending
    awaiting_committed: bool = False  # position will come from the group's committed offset
    epoch: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    revoking: bool = False  # about to be revoked: not fetched, nothing returned
    fetch_in_flight: bool = False  # a Fetch for it is outstanding or its data is buffered

    @property
    def fetchable(self) -> bool:
        return (
            self.position is not None
            and not self.paused
            and not self.revoking
            and self.reset_strategy is None
            and not self.fetch_in_flight
        )

    def invalidate(self) -> None:
        self.epoch += 1
        self.fetch_in_flight = False
