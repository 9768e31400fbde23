"""Request managers: sans-IO, each ``poll(now) -> (wait_ms, requests)`` plus response handlers."""

from ._base import Outgoing, RequestManager
from ._commit import CommitManager
from ._consumer_membership import ConsumerMembershipManager
from ._coordinator import CoordinatorManager
from ._fetch import FetchManager
from ._membership import MembershipManager
from ._metadata import MetadataManager
from ._offsets import OffsetsManager
from ._self_assign import SelfAssignManager

__all__ = [
    "CommitManager",
    "CoordinatorManager",
    "FetchManager",
    "ConsumerMembershipManager",
    "MembershipManager",
    "MetadataManager",
    "OffsetsManager",
    "Outgoing",
    "RequestManager",
    "SelfAssignManager",
]
