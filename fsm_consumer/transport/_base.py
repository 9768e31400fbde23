"""What every transport offers: ``Pending`` (one request's life) and the ``Transport`` interface.

A transport owns the sockets of one client. It is driven by a single thread (the consumer's
background thread): ``send`` queues a request and ``poll`` does the I/O and hands back the
requests that completed. Only ``wakeup`` (and ``close`` once the loop has stopped) may be
called from other threads.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from kafka.protocol.api_message import ApiMessage

from ._errors import AuthenticationError

__all__ = ["Pending", "Transport"]


@attrs.define(eq=False)
class Pending:
    """One request's life, from ``send`` until it comes back from ``poll`` with ``done`` set.

    Exactly one of ``response`` and ``error`` is set once done (``response`` stays None for a
    request that expects no answer, such as Produce with acks=0).
    """

    request: ApiMessage  # unversioned or versioned kafka-python request
    node: int | None  # target node id; None = the least-loaded ready node
    deadline_ms: float  # clock time after which it fails with RequestTimedOut
    tag: Any = None  # the sender's routing tag, returned untouched
    min_version: int = 0
    max_version: int | None = None
    sent_to: int | None = None  # node it was written to (None while waiting for a connection)
    response: ApiMessage | None = None
    error: Exception | None = None
    done: bool = False
    # the earliest the broker can have answered, as the loop that read the answer judges it (set by the
    # consumer's engine): an answer read after the process was stopped may have waited unread meanwhile
    heard_after: float | None = None

    def settle(self, response: ApiMessage | None = None, error: Exception | None = None) -> bool:
        """Done with ``response`` or ``error``; False (nothing changed) if it was done already."""
        if self.done:
            return False
        self.response, self.error, self.done = response, error, True
        return True

    def __repr__(self) -> str:
        state = "done" if self.done else ("in flight" if self.sent_to is not None else "queued")
        outcome = f" error={type(self.error).__name__}" if self.error is not None else ""
        return (
            f"<Pending {type(self.request).__name__} node={self.node} sent_to={self.sent_to} "
            f"{state}{outcome} tag={self.tag!r}>"
        )


class Transport(abc.ABC):
    """The network side of a client, one connection per broker node."""

    @abc.abstractmethod
    def send(
        self,
        request: ApiMessage,
        node: int | None = None,
        *,
        timeout_ms: float | None = None,
        tag: Any = None,
        min_version: int = 0,
        max_version: int | None = None,
    ) -> Pending:
        """Queue ``request`` for ``node`` (None: the least-loaded node). It is written on the next
        ``poll``; the version is picked when it is written, from what that broker supports."""

    @abc.abstractmethod
    def poll(self, timeout_ms: float) -> list[Pending]:
        """Do the ready I/O, waiting at most ``timeout_ms`` (less if a deadline comes first);
        return the requests that completed since the last poll."""

    @abc.abstractmethod
    def wakeup(self) -> None:
        """From any thread: make a blocked (or the next) ``poll`` return at once."""

    @abc.abstractmethod
    def update_brokers(self, brokers: Mapping[int, tuple[str, int]]) -> None:
        """The cluster's brokers from Metadata: node id -> (host, port)."""

    @abc.abstractmethod
    def ready(self, node: int) -> bool:
        """Whether a request to ``node`` would be written at once."""

    @abc.abstractmethod
    def least_loaded_node(self) -> int | None:
        """The node with the fewest outstanding requests, preferring ready ones; None if every
        node is backing off."""

    @abc.abstractmethod
    def disconnect(self, node: int) -> None:
        """Close the connection to ``node`` now: its in-flight requests fail with ConnectionLost,
        queued ones wait for the reconnect."""

    @abc.abstractmethod
    def next_wakeup_ms(self) -> float | None:
        """The earliest connection or request deadline (clock ms), for the caller's loop."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close every connection; outstanding requests fail with ConnectionLost. Idempotent."""

    # Health, for the layers above (not abstract: a transport without connections has none to report).
    @property
    def auth_failure(self) -> AuthenticationError | None:
        """The newest authentication failure (TLS or SASL) of any node that has not been ready
        since: a setting is wrong and reconnecting will not fix it. None when there is none."""
        return None

    def will_send(self, request_classes: Iterable[type[ApiMessage]]) -> None:
        """Requests its client sends later on, not in its first exchanges (a commit, a heartbeat, an
        acknowledgement): a transport with a cost at a request's first use makes them ready ahead, at the version
        each connection would send (kafka-python compiles a request's encoder and its response's decoders at
        their first use: 2-8 ms each, which would fall in the middle of the records). None by default."""
        return None

    def node_states(self) -> dict[int, dict[str, Any]]:
        """Per node id: ``address`` ("host:port"), ``state`` (its connection machine's),
        ``failures`` (in a row since it was last ready) and ``last_error`` (str or None).
        Any thread may call it; the answer is a snapshot."""
        return {}

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
