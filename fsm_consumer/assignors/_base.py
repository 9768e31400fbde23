"""The assignor interface: what the group leader runs to split partitions among members.

Everything here is plain data plus one abstract method, so the membership
manager can call an assignor without sharing any of its own state with it.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar

import attrs

from ..structs import TopicPartition


class RebalanceProtocol(enum.Enum):
    """How members give partitions up during a rebalance (KIP-429).

    EAGER: every member revokes all its partitions before it rejoins.
    COOPERATIVE: members keep their partitions across the rebalance and only
    revoke the ones the new assignment takes away; a partition that moves is
    handed to its new owner in a follow-up rebalance.
    """

    EAGER = 0
    COOPERATIVE = 1


def _topic_partitions(items: Iterable[Sequence[object]]) -> tuple[TopicPartition, ...]:
    # Accept kafka-python's TopicPartition or plain (topic, partition) pairs too:
    # everything downstream can then rely on one type.
    return tuple(tp if type(tp) is TopicPartition else TopicPartition(*tp) for tp in items)


def _str_tuple(items: Iterable[str]) -> tuple[str, ...]:
    if isinstance(items, str):  # a lone topic name would otherwise become its letters
        raise TypeError(f"topics must be a collection of names, not the string {items!r}")
    if isinstance(items, (set, frozenset)):
        # Same topics, same JoinGroup bytes: the coordinator rebalances a stable
        # group when a member rejoins with metadata that differs.
        return tuple(sorted(items))
    return tuple(items)


@attrs.frozen
class Subscription:
    """One member's JoinGroup metadata, as the leader sees it.

    ``owned_partitions`` are the partitions the member holds while it joins
    (always empty for eager members, which revoke first); ``generation`` is the
    generation in which it got them, -1 if unknown. ``rack`` and
    ``group_instance_id`` (static membership) are None when not set.
    """

    topics: tuple[str, ...] = attrs.field(converter=_str_tuple)
    owned_partitions: tuple[TopicPartition, ...] = attrs.field(default=(), converter=_topic_partitions)
    generation: int = -1
    user_data: bytes | None = None
    rack: str | None = None
    group_instance_id: str | None = None


@attrs.frozen
class Assignment:
    """The partitions one member gets, plus the assignor's opaque ``user_data``."""

    partitions: tuple[TopicPartition, ...] = attrs.field(converter=_topic_partitions)
    user_data: bytes | None = None


class Assignor(abc.ABC):
    """A partition assignment strategy. Subclass it to write your own.

    A subclass sets ``name`` (the protocol name sent in JoinGroup; every member
    of a group must offer the one the coordinator picks) and ``protocols``
    (the rebalance protocols it supports, preferred first) and implements
    :meth:`assign`. The other two hooks are optional.

    One instance serves one consumer. Only the leader calls :meth:`assign`;
    every member calls :meth:`subscription_user_data` before joining and
    :meth:`on_assignment` after each SyncGroup.
    """

    name: ClassVar[str]
    protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)

    @abc.abstractmethod
    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        """Return an :class:`Assignment` for every member id in ``subscriptions``.

        ``partitions_per_topic`` holds the partition count of each subscribed
        topic the leader has metadata for (partitions are ``0..count-1``);
        topics missing from it must be skipped, not failed on.
        """

    def subscription_user_data(
        self, topics: Iterable[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        """Opaque bytes to put in this member's subscription; None sends none."""
        return None

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        """Called on every member with its own assignment once SyncGroup succeeds."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {getattr(self, 'name', '?')!r}>"


def check_assignor(assignor: Assignor) -> Assignor:
    """Fail early, with a clear message, on a subclass that forgot ``name`` or ``protocols``."""
    name = getattr(assignor, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{type(assignor).__name__}.name must be a non-empty string, not {name!r}")
    protocols = getattr(assignor, "protocols", None)
    if (
        not isinstance(protocols, tuple)
        or not protocols
        or not all(isinstance(p, RebalanceProtocol) for p in protocols)
    ):
        raise TypeError(
            f"{type(assignor).__name__}.protocols must be a non-empty tuple of RebalanceProtocol, not {protocols!r}"
        )
    return assignor
