"""Partition assignment strategies for consumer-group membership.

The group leader picks one assignor (the coordinator chooses its name among
those every member offers) and calls :meth:`Assignor.assign` with each
member's :class:`Subscription`; the resulting :class:`Assignment` of each
member travels in SyncGroup. Nothing here holds a connection or group state:
the membership manager owns all of that and calls in with plain data.

- :func:`resolve` turns a ``partition_assignment_strategy`` entry (a name,
  an :class:`Assignor`, or a kafka-python assignor) into an :class:`Assignor`.
- ``encode_*``/``decode_*`` convert subscriptions and assignments to and from
  the "consumer" protocol bytes exchanged via JoinGroup and SyncGroup.

Write your own strategy by subclassing :class:`Assignor`::

    class OneTopicPerMember(Assignor):
        name = "one-topic-per-member"
        protocols = (RebalanceProtocol.EAGER,)

        def assign(self, partitions_per_topic, subscriptions):
            ...
"""

from ._base import Assignment, Assignor, RebalanceProtocol, Subscription
from ._builtin import (
    BUILTIN_ASSIGNORS,
    CooperativeStickyAssignor,
    KafkaPythonAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    member_order,
    resolve,
    withhold_transfers,
)
from ._protocol import (
    ConsumerProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

__all__ = [
    "BUILTIN_ASSIGNORS",
    "Assignment",
    "Assignor",
    "ConsumerProtocolError",
    "CooperativeStickyAssignor",
    "KafkaPythonAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "member_order",
    "resolve",
    "withhold_transfers",
]
