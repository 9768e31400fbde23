"""The public consumer API."""

from ._consumer import Consumer, KafkaConsumer
from ._group_api import ConsumerRebalanceListener

__all__ = ["Consumer", "ConsumerRebalanceListener", "KafkaConsumer"]
