"""Typed errors raised by the embedded broker helpers."""

from __future__ import annotations


class BrokerError(Exception):
    """Base class for every error raised by ``fsm_consumer.broker``."""


class TansuNotFoundError(BrokerError):
    """No usable Tansu executable could be located."""


class BrokerStartError(BrokerError):
    """The broker (or the storage it depends on) did not come up in time."""


class BrokerNotRunningError(BrokerError):
    """An operation needs a running broker, but it is stopped."""


class BrokerRequestError(BrokerError):
    """A Kafka request to the broker failed on the wire or returned an error code."""


class TopicCreateError(BrokerRequestError):
    """CreateTopics failed, or the topic never showed up in Metadata."""


class S3StorageError(BrokerError):
    """The local S3 server used by ``storage="s3"`` could not be started or prepared."""
