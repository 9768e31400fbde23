"""The rebalance listener a ParallelConsumer puts in front of the user's: on revocation its partitions are
drained and committed before the user hears of it; on assignment their progress is restored."""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable
from typing import Any, Protocol

from ..structs import TopicPartition


class _Owner(Protocol):
    """What the listener uses of its ParallelConsumer (a protocol: no import back up to _parallel)."""

    @property
    def _user_listener(self) -> Any: ...  # the user's listener, duck-typed: either method may be missing
    @property
    def _parts(self) -> Container[TopicPartition]: ...
    def _give_up(self, tps: Iterable[TopicPartition], trigger: str) -> None: ...
    def _adopt(self, tps: Iterable[TopicPartition]) -> object: ...


class DrainingListener:
    """Ours first (drain and commit on revocation, restore on assignment), then the user's."""

    def __init__(self, owner: _Owner) -> None:
        self.owner = owner

    def _user(self, name: str, partitions: Collection[TopicPartition]) -> None:
        user = self.owner._user_listener
        fn = getattr(user, name, None) if user is not None else None
        if fn is None and name == "on_partitions_lost" and user is not None:
            fn = getattr(user, "on_partitions_revoked", None)
        if fn is not None:
            fn(partitions)

    def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        self.owner._give_up(revoked, "revoke")
        self._user("on_partitions_revoked", revoked)

    def on_partitions_lost(self, lost: Collection[TopicPartition]) -> None:
        self.owner._give_up(lost, "lose")
        self._user("on_partitions_lost", lost)

    def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        self.owner._adopt([tp for tp in assigned if TopicPartition(*tp) not in self.owner._parts])
        self._user("on_partitions_assigned", assigned)
