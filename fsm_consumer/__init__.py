"""fsm_consumer: a Kafka consumer whose control logic is finite-state machines declared in YAML.

The public names live here; everything in a module whose name starts with ``_`` is private.
"""

from typing import TYPE_CHECKING

from ._config import ConsumerConfig
from ._version import __version__
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

# a failing deserializer's own exception is raised as it is (kafka-python's behaviour): fetch's
# DeserializationError, what decode_partition reports, is no error a consumer raises
from .fetch import (
    ConsumerRecord,
    CorruptRecordError,
    OffsetAndMetadata,
    RecordError,
    RecordTooLargeError,
    TopicPartition,
)

if TYPE_CHECKING:  # imported on first use (__getattr__ below); a type checker sees it here
    from .parallel import ParallelConsumer

__all__ = [
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
    "TopicPartition",
    "WakeupException",
    "__version__",
]


def __getattr__(name: str) -> "type[ParallelConsumer]":  # quoted: ParallelConsumer is not imported yet
    # fsm_consumer.parallel brings asyncio and its workers: imported when first asked for, not with the package
    if name == "ParallelConsumer":
        from .parallel import ParallelConsumer

        globals()[name] = ParallelConsumer  # later lookups find it directly
        return ParallelConsumer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"ParallelConsumer"})
