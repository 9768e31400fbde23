"""What the consumer knows about one assigned partition."""

from __future__ import annotations

import attrs

from ..machines import TableMachine, shipped_spec


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
    fetch_ahead: bool = False  # the consumer's fetch_ahead: fetched again from the end of its buffered fetch
    # the offset after the newest buffered fetch's last whole batch (-1: none): where a Fetch ahead starts
    fetched_end: int = -1
    # what of it is in flight or buffered, and so what the next Fetch may ask (specs/fetch.yaml)
    # (a table machine: a SpecMachine per partition would cost a consumer of 1,000 partitions ~0.5 s per assignment)
    fetching: TableMachine = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.fetching = TableMachine(shipped_spec("fetch"), self)

    def fetch_offset(self) -> int | None:
        """Where the next Fetch of the partition starts, None if no Fetch may list it now."""
        if self.position is None or self.paused or self.revoking or self.reset_strategy is not None:
            return None
        send = self.fetching.attribute("send")
        if send == "from_position":
            return self.position
        return self.fetched_end if send == "from_fetched_end" else None

    def not_ahead(self) -> bool:
        """The spec's condition: no Fetch ahead of the buffered one, because the consumer does not fetch
        ahead (``fetch_ahead``), the buffered fetch's end is unknown, or it reaches what its answer said the
        log holds (the last stable offset, which is the high watermark without open transactions)."""
        if not self.fetch_ahead:
            return True
        limit = self.high_watermark
        if 0 <= self.last_stable_offset < limit:
            limit = self.last_stable_offset
        return self.fetched_end < 0 or limit <= self.fetched_end

    def invalidate(self) -> None:
        self.epoch += 1
        self.fetched_end = -1
        self.fetching.fire("invalidate")
