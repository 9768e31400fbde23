"""Magic v0/v1 message sets, through kafka-python's ``LegacyRecordBatch``.

Legacy data is rare (written before Kafka 0.11, read-only on brokers since
4.0), so the decoding is kafka-python's, with two fixes in a subclass:

* ``_decompress`` uses our cramjam codecs: kafka-python's need the
  python-snappy/lz4 packages, which are not installed.
* ``_read_all_headers`` checks inner message lengths: the original adds a
  negative length to its position and loops forever on corrupt data.

Its ``assert`` checks are not relied on (they vanish under ``python -O``):
the caller slices the wrapper exactly and reads the magic itself.
"""

from __future__ import annotations

import struct

from kafka.record.legacy_records import LegacyRecordBatch

from ..structs import ConsumerRecord
from . import _compression

_INNER_MIN = LegacyRecordBatch.LOG_OVERHEAD + LegacyRecordBatch.RECORD_OVERHEAD_V0
_KEY_OFFSET = {0: LegacyRecordBatch.KEY_OFFSET_V0, 1: LegacyRecordBatch.KEY_OFFSET_V1}
_I32 = struct.Struct(">i")


class _Batch(LegacyRecordBatch):
    __slots__ = ()

    def _decompress(self, key_offset):
        pos = key_offset
        (key_size,) = _I32.unpack_from(self._buffer, pos)
        pos += self.KEY_LENGTH + max(key_size, 0)
        (value_size,) = _I32.unpack_from(self._buffer, pos)
        pos += self.VALUE_LENGTH
        if value_size < 0 or pos + value_size > len(self._buffer):
            raise ValueError(f"compressed wrapper value length {value_size} is invalid")
        return _compression.decompress(self.compression_type, self._buffer[pos : pos + value_size])

    def _read_all_headers(self):
        pos = 0
        msgs = []
        buffer_len = len(self._buffer)
        while pos < buffer_len:
            if buffer_len - pos < _INNER_MIN:
                raise ValueError("inner message set truncated")
            header = self._read_header(pos)
            if header[1] < self.RECORD_OVERHEAD_V0 or pos + self.LOG_OVERHEAD + header[1] > buffer_len:
                raise ValueError(f"inner message length {header[1]} is invalid")
            if header[3] != self._magic:
                raise ValueError(f"inner message magic {header[3]} inside a magic {self._magic} wrapper")
            msgs.append((header, pos))
            pos += self.LOG_OVERHEAD + header[1]
        return msgs


def decode_batch(
    wrapper: memoryview, magic: int, check_crcs: bool, min_offset: int, topic: str, partition: int, append
) -> int:
    """Decode one v0/v1 wrapper message; ``append`` records at or past ``min_offset``.

    Returns the offset after the last message (the wrapper of a compressed set
    carries the offset of its last inner message). Corruption raises
    ``ValueError`` (or ``struct.error``/``IndexError``/``AssertionError``).
    """
    batch = _Batch(wrapper, magic)
    if check_crcs and not batch.validate_crc():
        raise ValueError("CRC mismatch")
    if batch.compression_type and batch.compression_type > _compression.LZ4:
        raise ValueError(f"unknown compression type {batch.compression_type} for magic {magic}")
    last = batch.base_offset
    new = tuple.__new__
    check_inner = check_crcs and batch.compression_type
    for record in batch:
        # Inner messages of a compressed set have CRCs of their own; Java checks them too.
        if check_inner and not record.validate_crc():
            raise ValueError(f"CRC mismatch of inner message at offset {record.offset}")
        offset = record.offset
        last = offset
        if offset < min_offset:
            continue
        key, value = record.key, record.value
        timestamp = record.timestamp
        append(
            new(
                ConsumerRecord,
                (
                    topic,
                    partition,
                    -1,
                    offset,
                    -1 if timestamp is None else timestamp,
                    -1 if magic == 0 else record.timestamp_type,
                    key,
                    value,
                    (),
                    record.checksum,
                    -1 if key is None else len(key),
                    -1 if value is None else len(value),
                    -1,
                ),
            )
        )
    return last + 1
