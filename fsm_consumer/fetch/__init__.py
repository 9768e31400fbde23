"""Fetched record data to records: the consumer's per-record path.

``decode_partition`` turns the ``records`` bytes of one Fetch response
partition into ``ConsumerRecord``s: CRC checks, decompression (gzip, snappy,
lz4, zstd via cramjam), control batches and aborted transactions dropped,
deserializers applied. It returns a ``DecodedPartition`` and never raises on
bad data; a ``RecordError`` in its ``error`` says what went wrong where.
"""

from ..structs import ConsumerRecord, OffsetAndMetadata, TopicPartition
from ._decode import READ_COMMITTED, READ_UNCOMMITTED, DecodedPartition, decode_partition
from ._errors import CorruptRecordError, DeserializationError, RecordError, RecordTooLargeError

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "ConsumerRecord",
    "CorruptRecordError",
    "DecodedPartition",
    "DeserializationError",
    "OffsetAndMetadata",
    "RecordError",
    "RecordTooLargeError",
    "TopicPartition",
    "decode_partition",
]
