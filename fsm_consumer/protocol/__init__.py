"""Kafka messages kafka-python 3.0 does not define, defined with its own message machinery.

Each class is kafka-python's ``ApiMessage`` built from a JSON file beside this module that states the
message's field layout as in Kafka's message definitions (``clients/src/main/resources/common/message``):
kafka-python encodes and decodes them, nothing here touches bytes.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

__all__ = ["ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse"]


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """KIP-848: join, heartbeat, acknowledge an assignment and leave, in one request (API key 68)."""


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=__name__):  # type: ignore[call-arg]  # untyped metaclass
    """The member id and epoch, the heartbeat interval and, when it changed, the target assignment."""
