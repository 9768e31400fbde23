"""State shared by the application and background threads: assignment and positions."""

from ._partition import PartitionState
from ._subscription import SubscriptionState

__all__ = ["PartitionState", "SubscriptionState"]
