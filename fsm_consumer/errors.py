"""The exceptions fsm_consumer raises. Each is a ``kafka.errors.KafkaError`` so code written for
kafka-python keeps catching them; broker error codes surface as kafka-python's typed errors."""

from __future__ import annotations

import kafka.errors as _ke


class FsmConsumerError(_ke.KafkaError):
    """Base of the errors this library defines itself."""

    def __str__(self) -> str:
        # kafka-python's KafkaError prefixes the class name, which a traceback already shows
        return Exception.__str__(self) or type(self).__name__


class ConfigError(FsmConsumerError, _ke.KafkaConfigurationError, ValueError):
    """A configuration key is unknown or its value is not allowed; ``key`` names it (kafka-python's
    ``KafkaConfigurationError``)."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class KafkaTimeoutError(FsmConsumerError, _ke.KafkaTimeoutError):
    """A blocking call's deadline passed before the background thread completed it."""


class WakeupException(FsmConsumerError):
    """``wakeup()`` interrupted a blocking call from another thread."""


class NoOffsetForPartitionError(FsmConsumerError, _ke.NoOffsetForPartitionError):
    """No committed offset and ``auto_offset_reset='none'``; ``partitions`` says which."""

    def __init__(self, partitions) -> None:
        self.partitions = set(partitions)
        super().__init__(f"no offset and no reset policy for {sorted(self.partitions)}")


class IllegalStateError(FsmConsumerError, _ke.IllegalStateError):
    """The call does not fit the consumer's state (closed, not assigned, not subscribed...)."""


class CommitFailedError(FsmConsumerError, _ke.CommitFailedError):
    """The group moved to a new generation: this member's commit cannot be accepted."""


class RebalanceInProgressError(FsmConsumerError, _ke.RebalanceInProgressError):
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
