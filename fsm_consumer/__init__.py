"""fsm_consumer: a Kafka consumer whose control logic is finite-state machines declared in YAML.

The public names live here; everything in a module whose name starts with ``_`` is private.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_names
from ._version import __version__

# Every public name is imported on first use (PEP 562): a process that needs only part of the package (a
# Spark worker looking up the data source by name, which imports fsm_consumer.spark) does not pay for the
# consumer, kafka-python's package and the compiled specs, ~0.3 s and ~20 MB.
_LAZY = {
    "ConsumerConfig": "._config",
    "Assignor": ".assignors",
    "RebalanceProtocol": ".assignors",
    "Consumer": ".consumer",
    "ConsumerRebalanceListener": ".consumer",
    "KafkaConsumer": ".consumer",
    "AcknowledgeType": ".share",
    "AcknowledgementFailedError": ".errors",
    "ShareConsumer": ".share",
    "ShareRecord": ".share",
    "BackgroundThreadError": ".errors",
    "CommitFailedError": ".errors",
    "ConfigError": ".errors",
    "ConsumerClosedError": ".errors",
    "FsmConsumerError": ".errors",
    "IllegalStateError": ".errors",
    "KafkaTimeoutError": ".errors",
    "NoOffsetForPartitionError": ".errors",
    "RebalanceInProgressError": ".errors",
    "WakeupException": ".errors",
    # a failing deserializer's own exception is raised as it is (kafka-python's behaviour): fetch's
    # DeserializationError, what decode_partition reports, is no error a consumer raises
    "ConsumerRecord": ".fetch",
    "CorruptRecordError": ".fetch",
    "OffsetAndMetadata": ".fetch",
    "RecordError": ".fetch",
    "RecordTooLargeError": ".fetch",
    "TopicPartition": ".fetch",
    "ParallelConsumer": ".parallel",
}

if TYPE_CHECKING:  # what a type checker sees; at run time each is imported on first use (__getattr__)
    from ._config import ConsumerConfig
    from .assignors import Assignor, RebalanceProtocol
    from .consumer import Consumer, ConsumerRebalanceListener, KafkaConsumer
    from .errors import (
        BackgroundThreadError,
        CommitFailedError,
        ConfigError,
        ConsumerClosedError,
        FsmConsumerError,
        IllegalStateError,
        KafkaTimeoutError,
        NoOffsetForPartitionError,
        RebalanceInProgressError,
        WakeupException,
    )
    from .fetch import (
        ConsumerRecord,
        CorruptRecordError,
        OffsetAndMetadata,
        RecordError,
        RecordTooLargeError,
        TopicPartition,
    )
    from .parallel import ParallelConsumer

__all__ = [
    "AcknowledgeType",
    "AcknowledgementFailedError",
    "Assignor",
    "BackgroundThreadError",
    "CommitFailedError",
    "ConfigError",
    "Consumer",
    "ConsumerClosedError",
    "ConsumerConfig",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "CorruptRecordError",
    "FsmConsumerError",
    "IllegalStateError",
    "KafkaConsumer",
    "KafkaTimeoutError",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "ParallelConsumer",
    "RebalanceInProgressError",
    "RebalanceProtocol",
    "RecordError",
    "RecordTooLargeError",
    "ShareConsumer",
    "ShareRecord",
    "TopicPartition",
    "WakeupException",
    "__version__",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
