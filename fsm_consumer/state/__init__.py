"""State shared by the application and background threads: assignment, positions, held errors."""

from ._held import HeldErrors
from ._partition import PartitionState
from ._subscription import SubscriptionState

__all__ = ["HeldErrors", "PartitionState", "SubscriptionState"]
