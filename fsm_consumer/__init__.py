"""fsm_consumer: a Kafka consumer whose control logic is finite-state machines declared in YAML.

The public names live here; everything in a module whose name starts with ``_`` is private.
"""

from ._config import ConsumerConfig
from ._version import __version__
from .assignors import Assignor, RebalanceProtocol
from .consumer import Consumer, ConsumerRebalanceListener, KafkaConsumer
from .errors import (BackgroundThreadError, CommitFailedError, ConfigError, ConsumerClosedError,
                     FsmConsumerError, IllegalStateError, KafkaTimeoutError, NoOffsetForPartitionError,
                     RebalanceInProgressError, WakeupException)
from .fetch import (ConsumerRecord, CorruptRecordError, DeserializationError, OffsetAndMetadata, RecordError,
                    RecordTooLargeError, TopicPartition)

__all__ = [
    "Assignor", "BackgroundThreadError", "CommitFailedError", "ConfigError", "Consumer", "ConsumerClosedError",
    "ConsumerConfig", "ConsumerRebalanceListener", "ConsumerRecord", "CorruptRecordError", "DeserializationError",
    "FsmConsumerError", "IllegalStateError", "KafkaConsumer", "KafkaTimeoutError", "NoOffsetForPartitionError",
    "OffsetAndMetadata", "RebalanceInProgressError", "RebalanceProtocol", "RecordError", "RecordTooLargeError", "TopicPartition",
    "WakeupException", "__version__",
]
