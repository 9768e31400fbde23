"""The rebalance listener a ParallelConsumer puts in front of the user's: on revocation its partitions are
drained and committed before the user hears of it; on assignment their progress is restored."""

from __future__ import annotations

from typing import Any

from ..structs import TopicPartition


class DrainingListener:
    """Ours first (drain and commit on revocation, restore on assignment), then the user's."""

    def __init__(self, owner: Any) -> None:  # the ParallelConsumer
        self.owner = owner

    def _user(self, name: str, partitions) -> None:
        user = self.owner._user_listener
        fn = getattr(user, name, None) if user is not None else None
        if fn is None and name == "on_partitions_lost" and user is not None:
            fn = getattr(user, "on_partitions_revoked", None)
        if fn is not None:
            fn(partitions)

    def on_partitions_revoked(self, revoked) -> None:
        self.owner._give_up(revoked, "revoke")
        self._user("on_partitions_revoked", revoked)

    def on_partitions_lost(self, lost) -> None:
        self.owner._give_up(lost, "lose")
        self._user("on_partitions_lost", lost)

    def on_partitions_assigned(self, assigned) -> None:
        self.owner._adopt([tp for tp in assigned if TopicPartition(*tp) not in self.owner._parts])
        self._user("on_partitions_assigned", assigned)
