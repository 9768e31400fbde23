"""Real brokers on 127.0.0.1 for tests and demos: Tansu (embedded, pip only) and Apache Kafka (jars from Maven).

Usage::

    with EmbeddedBroker() as broker:  # storage="s3" keeps data across restart()
        broker.create_topic("events", partitions=3)
        config = {"bootstrap.servers": broker.bootstrap_servers}

    with start_broker("kafka") as broker:  # the reference: `fsm-consumer broker fetch --kind kafka` first
        ...

    with SchemaRegistry() as registry:  # Apicurio: `fsm-consumer broker fetch --kind registry` first
        config = {"url": registry.url}  # for confluent_kafka.schema_registry.SchemaRegistryClient
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
from ._registry import RegistryNotFoundError, SchemaRegistry, fetch_registry

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
    "RegistryNotFoundError",
    "S3StorageError",
    "SchemaRegistry",
    "Storage",
    "TansuNotFoundError",
    "TopicCreateError",
    "fetch_kafka",
    "fetch_registry",
    "locate_tansu",
    "start_broker",
]
