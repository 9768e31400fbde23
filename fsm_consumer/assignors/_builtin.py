"""The built-in strategies (range, roundrobin, sticky, cooperative-sticky) and :func:`resolve`.

They reuse kafka-python's algorithms where those are right and fix what is
not (see each class). kafka-python's assignors take a ``cluster`` object and
``JoinGroupResponseMember``-like members; :class:`KafkaPythonAssignor`
builds those from our plain data.
"""

from __future__ import annotations

import abc
import io
import struct
import types
from collections.abc import Iterable, Mapping, Sequence
from itertools import cycle
from typing import Any, TypeAlias

from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor as _KpCooperativeSticky
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import (
    StickyAssignmentExecutor,
    StickyAssignorMemberMetadataV1,
    StickyPartitionAssignor,
)
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.structs import TopicPartition as _KpTopicPartition

from fsm_consumer.errors import ConfigError

from ..structs import TopicPartition
from ._base import Assignment, Assignor, RebalanceProtocol, Subscription, check_assignor

# -- adapting our plain data to what kafka-python's assignors expect -------------------


class _Cluster:
    """The two ``ClusterMetadata`` methods kafka-python's assignors call."""

    def __init__(self, partitions_per_topic: Mapping[str, int], subscribed: Iterable[str]) -> None:
        # Only subscribed topics: the sticky executor treats any other topic as
        # "a partition no member can take", which defeats its fast path for
        # identical subscriptions.
        self._counts = {t: partitions_per_topic[t] for t in set(subscribed) if partitions_per_topic.get(t, 0) > 0}

    def topics(self) -> set[str]:
        return set(self._counts)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self._counts.get(topic)
        return None if count is None else set(range(count))


def member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Member ids in Java's ``MemberInfo`` order: static members by instance id, then dynamic ones.

    Static members first keeps their share stable across restarts (their
    member ids change, their instance ids do not).
    """
    static = sorted((s.group_instance_id, m) for m, s in subscriptions.items() if s.group_instance_id is not None)
    dynamic = sorted(m for m, s in subscriptions.items() if s.group_instance_id is None)
    return [m for _, m in static] + dynamic


def _subscribed_topics(subscriptions: Mapping[str, Subscription]) -> set[str]:
    return {t for s in subscriptions.values() for t in s.topics}


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, (bytes, bytearray, memoryview)):
        return None if value is None else bytes(value)
    return value.encode()  # a kafka-python ApiData: encoded the way its own coordinator would


def _kp_subscription(sub: Subscription) -> ConsumerProtocolSubscription:
    # Nested containers need the version too: kafka-python iterates them as tuples.
    version = ConsumerProtocolSubscription.max_version
    tp_type = ConsumerProtocolSubscription.TopicPartition
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sub.owned_partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ConsumerProtocolSubscription(
        version=version,
        topics=list(sub.topics),
        user_data=sub.user_data,
        owned_partitions=[tp_type(version=version, topic=t, partitions=ps) for t, ps in by_topic.items()],
        generation_id=sub.generation,
        rack_id=sub.rack,
    )


class KafkaPythonAssignor(Assignor):
    """Runs a kafka-python ``AbstractPartitionAssignor`` (class or instance) as an :class:`Assignor`.

    Members are passed in :func:`member_order`: kafka-python's range and
    roundrobin split static from dynamic members with ``itertools.groupby`` on
    the unsorted list, which drops members when static and dynamic ones
    alternate; sorted input keeps every member.
    """

    def __init__(self, inner: AbstractPartitionAssignor | type[AbstractPartitionAssignor]) -> None:
        self.inner = inner() if isinstance(inner, type) else inner
        self.name = self.inner.name  # type: ignore[misc]
        supported = getattr(self.inner, "supported_protocols", lambda: [RebalanceProtocol.EAGER])()
        self.protocols = tuple(RebalanceProtocol[p.name] for p in supported)  # type: ignore[misc]

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        cluster = _Cluster(partitions_per_topic, _subscribed_topics(subscriptions))
        members = [
            types.SimpleNamespace(
                member_id=m,
                group_instance_id=subscriptions[m].group_instance_id,
                metadata=_kp_subscription(subscriptions[m]),
            )
            for m in member_order(subscriptions)
        ]
        result = self.inner.assign(cluster, members)
        out = {}
        for m in subscriptions:
            kp = result.get(m)
            out[m] = (
                Assignment(partitions=())
                if kp is None
                else Assignment(
                    partitions=sorted(TopicPartition(*tp) for tp in kp.partitions()),
                    # kafka-python fills b"" where Java sends null: one "no data" value is enough.
                    user_data=_as_bytes(kp.user_data) or None,
                )
            )
        return out

    def subscription_user_data(
        self, topics: Iterable[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return _as_bytes(self.inner.metadata(set(topics)).user_data) or None

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        version = ConsumerProtocolAssignment.max_version
        tp_type = ConsumerProtocolAssignment.TopicPartition
        by_topic: dict[str, list[int]] = {}
        for topic, partition in assignment.partitions:
            by_topic.setdefault(topic, []).append(partition)
        self.inner.on_assignment(
            ConsumerProtocolAssignment(
                version=version,
                assigned_partitions=[tp_type(version=version, topic=t, partitions=ps) for t, ps in by_topic.items()],
                user_data=assignment.user_data,
            ),
            generation,
        )


# -- range, roundrobin -------------------------------------------------------------------


class RangeAssignor(KafkaPythonAssignor):
    """Per topic, consecutive partition ranges to members in :func:`member_order` (kafka-python's)."""

    name = "range"
    protocols = (RebalanceProtocol.EAGER,)

    def __init__(self) -> None:
        super().__init__(RangePartitionAssignor)


class RoundRobinAssignor(Assignor):
    """All partitions, sorted by topic then partition, dealt round the members in :func:`member_order`.

    A member not subscribed to a partition's topic is skipped (the deal
    carries on from the next one), as in Java's RoundRobinAssignor.

    Not kafka-python's: whenever it has to skip a member it rebinds
    ``member_id`` to an ``(instance_id, member_id)`` tuple and fails with a
    KeyError, so any group with differing subscriptions breaks it.
    """

    name = "roundrobin"
    protocols = (RebalanceProtocol.EAGER,)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        topics_of = {m: frozenset(s.topics) for m, s in subscriptions.items()}
        assigned: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        # Each of these topics has a subscriber, so the skipping loop below ends.
        topics = sorted(t for t in _subscribed_topics(subscriptions) if partitions_per_topic.get(t, 0) > 0)
        ring = cycle(member_order(subscriptions))
        for topic in topics:
            for partition in range(partitions_per_topic[topic]):
                member = next(ring)
                while topic not in topics_of[member]:
                    member = next(ring)
                assigned[member].append(TopicPartition(topic, partition))
        return {m: Assignment(partitions=ps) for m, ps in assigned.items()}


# -- sticky, cooperative-sticky ------------------------------------------------------------


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int) -> bytes:
    """StickyAssignorUserData v1 as Java and librdkafka write it: no version header.

    kafka-python 3.0 prefixes an int16 version (its ApiData default), which
    Java and librdkafka cannot read, so members lose their stickiness in
    mixed groups; we write the common format and read all three.
    """
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return StickyAssignorUserData(list(by_topic.items()), generation).encode(version=1, header=False)


def decode_sticky_user_data(data: bytes) -> tuple[tuple[TopicPartition, ...], int] | None:
    """(previous partitions, generation) from sticky user data; None if it is in no known format.

    Tried in order: Java/librdkafka v1 (with generation), v0 (without), then
    kafka-python 3.0's header-prefixed form. A format only counts if it
    consumes every byte, so one cannot be mistaken for another.
    """
    for version, header in ((1, False), (0, False), (None, True)):
        buf = io.BytesIO(data)
        try:
            decoded = StickyAssignorUserData.decode(buf, version=version, header=header)
        except Exception:  # malformed for this layout: try the next
            continue
        if buf.tell() != len(data):
            continue
        partitions = tuple(TopicPartition(tp.topic, p) for tp in decoded.previous_assignment for p in tp.partitions)
        return partitions, getattr(decoded, "generation", -1)
    return None


class _StickyBase(Assignor):
    """Runs kafka-python's ``StickyAssignmentExecutor`` (KIP-54 algorithm) on our data.

    The executor is reused as is; what kafka-python's two sticky assignor
    classes wrap around it (reading previous ownership out of a member's
    subscription) is where they are wrong, so subclasses do that part.
    """

    @abc.abstractmethod
    def _previous(self, sub: Subscription) -> tuple[Sequence[TopicPartition], int]:
        """The partitions ``sub``'s member held before this rebalance, and since which generation."""

    def _final(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        members = {}
        for m in member_order(subscriptions):
            sub = subscriptions[m]
            previous, generation = self._previous(sub)
            topics = set(sub.topics)
            members[m] = StickyAssignorMemberMetadataV1(
                subscription=list(sub.topics),
                # Only partitions of topics the member still subscribes to: the
                # executor records a partition's older-generation claimant as its
                # "previous owner" and moves it back there to rebalance without
                # checking that owner's subscription, which hands it a topic it
                # did not ask for. Deduplicated: the executor keeps one entry per claim.
                partitions=[_KpTopicPartition(*tp) for tp in dict.fromkeys(previous) if tp.topic in topics],
                generation=generation,
            )
        executor = StickyAssignmentExecutor(_Cluster(partitions_per_topic, _subscribed_topics(subscriptions)), members)
        executor.perform_initial_assignment()
        executor.balance()
        return {m: sorted(TopicPartition(*tp) for tp in executor.current_assignment.get(m, ())) for m in subscriptions}


class StickyAssignor(_StickyBase):
    """Eager sticky assignment (KIP-54): balanced, and moving as few partitions as possible.

    Eager members revoke everything before they join, so what a member sticks
    to is its last assignment, which this assignor remembers
    (:meth:`on_assignment`) and sends as user data, as Java does.
    """

    name = "sticky"
    protocols = (RebalanceProtocol.EAGER,)

    def __init__(self) -> None:
        self._last: tuple[TopicPartition, ...] | None = None
        self._last_generation = -1

    def subscription_user_data(
        self, topics: Iterable[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        if self._last is not None:
            return encode_sticky_user_data(self._last, self._last_generation)
        # No assignment received yet: what the caller says it owns is all we know.
        return encode_sticky_user_data(owned, generation) if owned else None

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self._last = assignment.partitions
        self._last_generation = generation

    def _previous(self, sub: Subscription) -> tuple[Sequence[TopicPartition], int]:
        decoded = decode_sticky_user_data(sub.user_data) if sub.user_data else None
        return decoded if decoded is not None else (sub.owned_partitions, sub.generation)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        return {m: Assignment(partitions=ps) for m, ps in self._final(partitions_per_topic, subscriptions).items()}


class CooperativeStickyAssignor(_StickyBase):
    """Sticky assignment under the cooperative protocol (KIP-429).

    The target assignment is the sticky one computed from what members own
    (``owned_partitions``). A partition that target moves from its current
    owner to another member is left out of this round: the owner is no
    longer given it, so it revokes it and rejoins, and the next round hands
    it to the new owner. That is Java's ``CooperativeStickyAssignor.adjustAssignment``.

    kafka-python's CooperativeStickyAssignor applies the same rule but keys
    "current owner" on the last member in the list claiming a partition, so
    when two members claim one (a stale generation), it can withhold it even
    from the claimant the sticky algorithm keeps it with, forcing a needless
    revoke. It also offers only COOPERATIVE; Java lists EAGER second so a
    group can upgrade from an eager assignor with rolling restarts.
    """

    name = "cooperative-sticky"
    protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def subscription_user_data(
        self, topics: Iterable[str], owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        # Java sends the generation as one int32 here too, for leaders that
        # read subscriptions older than v2 (which have no GenerationId field).
        return struct.pack(">i", generation)

    def _previous(self, sub: Subscription) -> tuple[Sequence[TopicPartition], int]:
        generation = sub.generation
        if generation < 0 and sub.user_data:
            # v0/v1 subscription: the generation, if any, is in the user data,
            # as Java's int32 or inside librdkafka's sticky user data.
            if len(sub.user_data) == 4:
                generation = struct.unpack(">i", sub.user_data)[0]
            elif (decoded := decode_sticky_user_data(sub.user_data)) is not None:
                generation = decoded[1]
        return sub.owned_partitions, generation

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        final = self._final(partitions_per_topic, subscriptions)
        return {
            m: Assignment(partitions=ps)
            for m, ps in withhold_transfers(final, {m: s.owned_partitions for m, s in subscriptions.items()}).items()
        }


def withhold_transfers(
    target: Mapping[str, Sequence[TopicPartition]], owned: Mapping[str, Iterable[TopicPartition]]
) -> dict[str, list[TopicPartition]]:
    """Drop from ``target`` every partition some member owns and must give up to another.

    A partition is held back from member M when M does not own it and some
    other member owns it without keeping it in ``target``: that owner has to
    revoke it first. Every member's reported ownership counts, even a stale
    claim, because an owner that is still processing must never overlap with
    the next one.
    """
    owned_sets = {m: set(ps) for m, ps in owned.items()}
    kept = {m: set(ps) for m, ps in target.items()}
    revoked = {tp for m, ps in owned_sets.items() for tp in ps if tp not in kept.get(m, ())}
    return {m: [tp for tp in ps if tp in owned_sets.get(m, ()) or tp not in revoked] for m, ps in target.items()}


# -- resolve ------------------------------------------------------------------------------

BUILTIN_ASSIGNORS: Mapping[str, type[Assignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}

# kafka-python's own strategies map to ours (kafka-python's default config is
# its range + roundrobin pair), so code migrating from it gets the fixed versions.
_KAFKA_PYTHON_EQUIVALENTS: Mapping[type, type[Assignor]] = {
    RangePartitionAssignor: RangeAssignor,
    RoundRobinPartitionAssignor: RoundRobinAssignor,
    StickyPartitionAssignor: StickyAssignor,
    _KpCooperativeSticky: CooperativeStickyAssignor,
}


Strategy: TypeAlias = str | Assignor | type[Assignor] | AbstractPartitionAssignor | type[AbstractPartitionAssignor]


def resolve(strategy: Strategy) -> Assignor:
    """An :class:`Assignor` for one ``partition_assignment_strategy`` entry.

    Accepts a built-in name ("range", "roundrobin", "sticky",
    "cooperative-sticky"), an Assignor instance (used as is) or subclass
    (instantiated without arguments), or a kafka-python assignor class or
    instance (wrapped in :class:`KafkaPythonAssignor`; kafka-python's four
    built-ins become ours). Names and classes yield a fresh instance: sticky
    assignors keep per-consumer state.
    """
    if isinstance(strategy, str):
        try:
            return BUILTIN_ASSIGNORS[strategy]()
        except KeyError:
            raise ConfigError(
                f"unknown partition assignment strategy {strategy!r}; built-ins are " + ", ".join(BUILTIN_ASSIGNORS),
                key="partition_assignment_strategy",
            ) from None
    if isinstance(strategy, Assignor):
        return check_assignor(strategy)
    if isinstance(strategy, type) and issubclass(strategy, Assignor):
        return check_assignor(strategy())
    kp_type = strategy if isinstance(strategy, type) else type(strategy)
    if issubclass(kp_type, AbstractPartitionAssignor):
        equivalent = _KAFKA_PYTHON_EQUIVALENTS.get(kp_type)
        if equivalent is not None:
            return equivalent()
        return check_assignor(KafkaPythonAssignor(strategy))
    raise ConfigError(
        f"partition assignment strategy must be a name, an Assignor or a kafka-python assignor, not {strategy!r}",
        key="partition_assignment_strategy",
    )
