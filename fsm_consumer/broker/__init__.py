"""A real Kafka-compatible broker (Tansu) on 127.0.0.1, for tests and demos.

Usage::

    with EmbeddedBroker() as broker:  # storage="s3" keeps data across restart()
        broker.create_topic("events", partitions=3)
        config = {"bootstrap.servers": broker.bootstrap_servers}
"""

from ._binary import locate_tansu
from ._embedded import EmbeddedBroker, Storage
from ._errors import (
    BrokerError,
    BrokerNotRunningError,
    BrokerRequestError,
    BrokerStartError,
    S3StorageError,
    TansuNotFoundError,
    TopicCreateError,
)

__all__ = [
    "BrokerError",
    "BrokerNotRunningError",
    "BrokerRequestError",
    "BrokerStartError",
    "EmbeddedBroker",
    "S3StorageError",
    "Storage",
    "TansuNotFoundError",
    "TopicCreateError",
    "locate_tansu",
]
