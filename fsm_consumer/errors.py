"""The exceptions fsm_consumer raises. Each is a ``kafka.errors.KafkaError`` so code written for
kafka-python keeps catching them; broker error codes surface as kafka-python's typed errors."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

# kafka-python ships no type information: its error classes are Any to mypy, so a class below that
# subclasses one ignores [misc] ("untyped base"), the only way to keep kafka-python's hierarchy
import kafka.errors as _ke

if TYPE_CHECKING:
    from .structs import TopicPartition


class FsmConsumerError(_ke.KafkaError):  # type: ignore[misc]  # untyped base
    """Base of the errors this library defines itself."""

    def __str__(self) -> str:
        # kafka-python's KafkaError prefixes the class name, which a traceback already shows
        return Exception.__str__(self) or type(self).__name__


class ConfigError(FsmConsumerError, _ke.KafkaConfigurationError, ValueError):  # type: ignore[misc]  # untyped base
    """A configuration key is unknown or its value is not allowed; ``key`` names it (kafka-python's
    ``KafkaConfigurationError``)."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class KafkaTimeoutError(FsmConsumerError, _ke.KafkaTimeoutError):  # type: ignore[misc]  # untyped base
    """A blocking call's deadline passed before the background thread completed it."""


class WakeupException(FsmConsumerError):
    """``wakeup()`` interrupted a blocking call from another thread."""


class NoOffsetForPartitionError(FsmConsumerError, _ke.NoOffsetForPartitionError):  # type: ignore[misc]  # untyped base
    """No committed offset and ``auto_offset_reset='none'``; ``partitions`` says which."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.partitions = set(partitions)
        super().__init__(f"no offset and no reset policy for {sorted(self.partitions)}")


class IllegalStateError(FsmConsumerError, _ke.IllegalStateError):  # type: ignore[misc]  # untyped base
    """The call does not fit the consumer's state (closed, not assigned, not subscribed...)."""


class CommitFailedError(FsmConsumerError, _ke.CommitFailedError):  # type: ignore[misc]  # untyped base
    """The group moved to a new generation: this member's commit cannot be accepted."""


class RebalanceInProgressError(FsmConsumerError, _ke.RebalanceInProgressError):  # type: ignore[misc]  # untyped base
    """A commit was asked for while the group rebalances (this member is rejoining): retriable.
    The member may keep its partitions; call poll() (it completes the rebalance) and commit again,
    as with the Java client's RebalanceInProgressException."""

    retriable = True


class ConsumerClosedError(IllegalStateError):
    """The consumer was closed."""


class BackgroundThreadError(FsmConsumerError):
    """The background thread hit an unexpected error; the consumer cannot go on. ``__cause__`` says why."""


class AuthenticationFailedError(FsmConsumerError):
    """TLS or SASL refused the connection (untrusted certificate, wrong credentials or mechanism, TLS
    against a plaintext listener). Held and raised by every call until a connection succeeds; the
    message says what failed and how to fix it, ``__cause__`` is the transport's error."""


class AcknowledgementFailedError(FsmConsumerError):
    """A share consumer's acknowledgements of ``offsets`` of ``partition`` did not take effect: the broker refused
    them (``error_code``, e.g. INVALID_RECORD_STATE: the records were no longer acquired by this member), or their
    acquisition lock ran out or their share session ended before they were sent (``error_code`` None). The
    records go back to the group (delivered again while under the delivery limit): processing must be idempotent
    to survive it."""

    def __init__(self, partition: TopicPartition, offsets: Iterable[int], message: str, error_code: int | None = None):
        super().__init__(message)
        self.partition = partition
        self.offsets = sorted(offsets)
        self.error_code = error_code
