"""What a share consumer hands out and takes back: ``ShareRecord`` and ``AcknowledgeType``."""

from __future__ import annotations

import enum
import time
from typing import Any, NamedTuple

__all__ = ["AcknowledgeType", "ShareRecord"]


class AcknowledgeType(enum.IntEnum):
    """How a record is acknowledged (KIP-932; the values are the wire's)."""

    ACCEPT = 1  # processed: never delivered again
    RELEASE = 2  # not processed: delivered again (to any member) with its delivery count one higher
    REJECT = 3  # unprocessable: never delivered again (archived)
    RENEW = 4  # still being processed: the lock starts again (ShareFetch/ShareAcknowledge v2, Kafka 4.2+)


class ShareRecord(NamedTuple):
    """One acquired record: ``ConsumerRecord``'s fields (kafka-python's order) and the share group's two.

    ``delivery_count`` is 1 the first time the group delivers the record, one more each time it comes back
    (released, or its lock ran out). ``lock_deadline`` is when the lock runs out, on ``time.monotonic()``'s
    clock, counted from when the ShareFetch that acquired it was sent (the broker's lock started no earlier):
    acknowledge before it, or the record goes back to the group and a late acknowledgement fails.
    """

    topic: str
    partition: int
    leader_epoch: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]
    checksum: int | None
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int
    delivery_count: int
    lock_deadline: float

    def lock_remaining_s(self) -> float:
        """Seconds until the lock runs out (negative once it has)."""
        return self.lock_deadline - time.monotonic()
