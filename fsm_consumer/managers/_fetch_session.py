"""Incremental fetch sessions (KIP-227), client side: Kafka's FetchSessionHandler, sans-IO.

One ``FetchSession`` per broker node. ``build(parts)`` says what the next Fetch to that node
carries; ``handle_response`` / ``handle_error`` move the session on once it completes. Only one
Fetch per node is in flight, so nothing changes between a ``build`` and its answer.

The broker keeps, per session, the partitions and the request fields last sent for each (it does
not advance a fetch offset by itself): an incremental request lists only partitions that are new
or whose fields changed, and names in ``forgotten_topics_data`` those to drop. Its answer omits
partitions with nothing new; the caller treats those as "no data, fetch again".
"""

from __future__ import annotations

import attrs

from ..structs import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # full request: (re)create a session
FINAL_EPOCH = -1  # full request: no session (what the consumer sends with sessions off)
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
SESSION_ERRORS = frozenset({FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH})
_MAX_EPOCH = 2**31 - 1


@attrs.frozen(slots=True)
class PartitionData:
    """The request fields the broker's session remembers per partition (compared whole)."""

    fetch_offset: int
    leader_epoch: int
    max_bytes: int
    log_start_offset: int = -1


@attrs.frozen(slots=True)
class FetchPlan:
    session_id: int
    epoch: int
    to_send: dict[TopicPartition, PartitionData]  # listed in the request
    to_forget: list[TopicPartition]  # forgotten_topics_data
    session: dict[TopicPartition, PartitionData]  # all the answer may carry: listed or implied

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    @classmethod
    def sessionless(cls, parts: dict[TopicPartition, PartitionData]) -> FetchPlan:
        """Sessions turned off: every request full, asking the broker to keep none."""
        return cls(INVALID_SESSION_ID, FINAL_EPOCH, dict(parts), [], dict(parts))


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1  # 0 means "new session": skipped on wrap


class FetchSession:
    def __init__(self, node: int) -> None:
        self.node = node
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._parts: dict[TopicPartition, PartitionData] = {}

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    @property
    def partitions(self) -> dict[TopicPartition, PartitionData]:
        return dict(self._parts)

    def build(self, parts: dict[TopicPartition, PartitionData]) -> FetchPlan:
        """The next request for this round's fetchable ``parts`` (in fetch order).

        As Java's Builder.build(): a session partition not among ``parts`` is forgotten, even if it
        is only skipped for a round (paused, its data still buffered): kept, the broker would go on
        answering it from the offset it last saw, sending again what is buffered. It is listed
        again, with its new offset, once fetchable."""
        if self.full:
            self._parts = dict(parts)
            return FetchPlan(self.session_id, self.epoch, dict(parts), [], dict(parts))
        old = self._parts
        forget = [tp for tp in old if tp not in parts]
        added = {tp: d for tp, d in parts.items() if tp not in old}
        altered = {tp: d for tp, d in parts.items() if tp in old and old[tp] != d}
        self._parts = {tp: parts[tp] for tp in old if tp in parts} | added
        return FetchPlan(self.session_id, self.epoch, added | altered, forget, dict(self._parts))

    def handle_response(self, response) -> bool:
        """Move the session on; False if the answer's partition data must not be used."""
        code = response.error_code
        if code:
            # not found: nothing to close; otherwise ask the broker to drop it and open a new one
            self._restart(INVALID_SESSION_ID if code == FETCH_SESSION_ID_NOT_FOUND else self.session_id)
            return False
        got = {(t.topic, p.partition_index) for t in response.responses for p in t.partitions}
        known = {(tp.topic, tp.partition) for tp in self._parts}
        session_id = getattr(response, "session_id", INVALID_SESSION_ID) or INVALID_SESSION_ID  # v<7: none
        if self.full:
            # An empty throttled answer (KIP-219), or one that is not the whole session, opens
            # none. Its data is still good: a full request named every partition's offset.
            if session_id == INVALID_SESSION_ID or got != known:
                self._restart(INVALID_SESSION_ID)
            else:
                self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
            return True
        if not got <= known:  # partitions we never asked for: the broker's view differs from ours
            self._restart(self.session_id)
            return False
        if session_id == INVALID_SESSION_ID:  # the broker closed the session
            self._restart(INVALID_SESSION_ID)
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """No answer (timeout, disconnect): the broker's epoch is unknown, so start over."""
        self._restart(self.session_id)

    def _restart(self, session_id: int) -> None:
        self.session_id, self.epoch = session_id, INITIAL_EPOCH
