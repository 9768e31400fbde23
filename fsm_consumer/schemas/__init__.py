"""Records whose keys or values carry Avro, Protobuf or JSON Schema in Confluent's framing, decoded with the
schemas of a registry: deserializers for ``poll()`` and typed Arrow columns for ``poll_batch()``.

Usage::

    from fsm_consumer import Consumer
    from fsm_consumer.schemas import AvroDeserializer, Registry

    registry = Registry("http://127.0.0.1:8081")
    consumer = Consumer("orders", bootstrap_servers=..., value_deserializer=AvroDeserializer(registry))

Needs the ``schemas`` extra (``pip install fsm_consumer[schemas]``: confluent-kafka's registry client,
fastavro, protobuf).
"""

from ._avro import AvroDeserializer
from ._errors import (
    FramingError,
    NewerSchemaError,
    RegistryAuthError,
    RegistryUnavailableError,
    SchemaDecodeError,
    SchemaError,
    SchemaNotFoundError,
)
from ._json_schema import JsonSchemaDeserializer
from ._protobuf import ProtobufDeserializer
from ._registry import Registry

__all__ = [
    "AvroDeserializer",
    "FramingError",
    "JsonSchemaDeserializer",
    "NewerSchemaError",
    "ProtobufDeserializer",
    "Registry",
    "RegistryAuthError",
    "RegistryUnavailableError",
    "SchemaDecodeError",
    "SchemaError",
    "SchemaNotFoundError",
]
