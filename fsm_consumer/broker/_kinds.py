"""A loopback broker by name, as the CLI's ``--broker`` and the tests' matrix ask for one."""

from __future__ import annotations

from typing import Any, Literal, overload

from ._admin import LoopbackBroker
from ._embedded import EmbeddedBroker
from ._kafka import KafkaBroker

#: Tansu first: the default (pip only, starts in milliseconds); Kafka is the reference.
BROKER_KINDS = ("tansu", "kafka")


@overload
def start_broker(kind: Literal["tansu"] = "tansu", **options: Any) -> EmbeddedBroker: ...
@overload
def start_broker(kind: Literal["kafka"], **options: Any) -> KafkaBroker: ...
@overload
def start_broker(kind: str, **options: Any) -> EmbeddedBroker | KafkaBroker: ...
def start_broker(kind: str = "tansu", **options: Any) -> EmbeddedBroker | KafkaBroker:
    """A started ``EmbeddedBroker`` ("tansu") or ``KafkaBroker`` ("kafka"); ``options`` go to its constructor.

    Raises ``KafkaNotFoundError`` (naming the fetch command) when "kafka" lacks Java or its jars."""
    if kind == "tansu":
        return EmbeddedBroker(**options)
    if kind == "kafka":
        return KafkaBroker(**options)
    raise ValueError(f"broker must be one of {', '.join(BROKER_KINDS)}, not {kind!r}")


def describe(broker: LoopbackBroker) -> str:
    """One line for a user: which broker, where, how fast it started."""
    name = "Tansu" if broker.kind == "tansu" else f"Apache Kafka {getattr(broker, 'version', '')}".rstrip()
    started = getattr(broker, "startup_seconds", None)
    took = f" (started in {started * 1000:.0f} ms)" if started is not None else ""
    return f"{name} pid {broker.pid} on {broker.bootstrap_servers}{took}"
