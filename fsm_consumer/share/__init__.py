"""Share groups (KIP-932, queues for Kafka): ``ShareConsumer`` and what it hands out and takes back.

Many members read one partition together; each record is acquired under a lock and acknowledged one by one
(accept, release, reject, renew), delivered again with a higher delivery count when released or when its
lock runs out, archived past the group's delivery limit. Apache Kafka 4.2+ (share groups on by default).
"""

from ._admin import (
    SHARE_GROUP_CONFIG_KEYS,
    GroupConfigEntry,
    ShareGroupAdmin,
    ShareGroupDescription,
    ShareMemberDescription,
    SharePartitionOffsets,
    group_config,
    set_group_config,
)
from ._config import REFUSED, ShareSettings, share_config
from ._consumer import AcknowledgementCommitCallback, ShareConsumer
from ._types import AcknowledgeType, ShareRecord

__all__ = [
    "REFUSED",
    "SHARE_GROUP_CONFIG_KEYS",
    "GroupConfigEntry",
    "ShareGroupAdmin",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffsets",
    "group_config",
    "set_group_config",
    "AcknowledgeType",
    "AcknowledgementCommitCallback",
    "ShareConsumer",
    "ShareRecord",
    "ShareSettings",
    "share_config",
]
