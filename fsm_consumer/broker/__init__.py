"""Real brokers on 127.0.0.1 for tests and demos: Tansu (embedded, pip only) and Apache Kafka (jars from Maven).

Usage::

    with EmbeddedBroker() as broker:  # storage="s3" keeps data across restart()
        broker.create_topic("events", partitions=3)
        config = {"bootstrap.servers": broker.bootstrap_servers}

    with start_broker("kafka") as broker:  # the reference: `fsm-consumer broker fetch --kind kafka` first
        ...
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
from ._kafka import KafkaBroker
from ._kafka_jars import KAFKA_VERSION, KafkaNotFoundError, fetch_kafka
from ._kinds import BROKER_KINDS, start_broker

__all__ = [
    "BROKER_KINDS",
    "BrokerError",
    "BrokerNotRunningError",
    "BrokerRequestError",
    "BrokerStartError",
    "EmbeddedBroker",
    "KAFKA_VERSION",
    "KafkaBroker",
    "KafkaNotFoundError",
    "S3StorageError",
    "Storage",
    "TansuNotFoundError",
    "TopicCreateError",
    "fetch_kafka",
    "locate_tansu",
    "start_broker",
]
