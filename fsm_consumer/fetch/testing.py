"""Build record data as a broker would return it, for tests and benchmarks.

Records are encoded by kafka-python's ``DefaultRecordBatchBuilder`` /
``LegacyRecordBatchBuilder``; what they cannot do here is added on top:

* snappy, lz4 and zstd (kafka-python's codecs need packages not installed):
  the uncompressed records are compressed with cramjam in the formats real
  producers write (xerial-framed or raw snappy, LZ4 frames with independent
  blocks) and the header is rewritten with the codec and a new CRC;
* control batches (transaction markers), which only brokers write;
* broker-assigned fields: base offset, partition leader epoch, LogAppendTime.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import cramjam
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from ._compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from ._decode_v2 import CONTROL_MASK, CRC_START, HEADER, HEADER_SIZE, LOG_OVERHEAD, TIMESTAMP_TYPE_MASK

CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
ABORT, COMMIT = 0, 1


def _codec_id(codec: int | str) -> int:
    """A codec given by name or id as its id; an unknown name fails as ``compress`` fails on it."""
    if isinstance(codec, int):
        return codec
    if codec in CODECS:
        return CODECS[codec]
    raise ValueError(f"unknown codec {codec}")


class Rec(NamedTuple):
    """A record to write: ``offset_delta`` None means the next one (gaps mimic compaction)."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int = 1_700_000_000_000
    offset_delta: int | None = None


def batch(
    records: Iterable[Rec | bytes],
    *,
    base_offset: int = 0,
    codec: int | str = NONE,
    leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    log_append_time: int | None = None,
    snappy_framing: str = "xerial",
) -> bytes:
    """One magic v2 batch as the broker stores it."""
    codec = _codec_id(codec)
    if producer_id >= 0 and base_sequence < 0:
        base_sequence = 0
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=NONE,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    delta = 0
    for rec in records:
        if not isinstance(rec, Rec):
            rec = Rec(rec)
        delta = delta if rec.offset_delta is None else rec.offset_delta
        builder.append(delta, rec.timestamp, rec.key, rec.value, list(rec.headers))
        delta += 1
    return _finish(bytearray(builder.build()), base_offset, leader_epoch, codec, log_append_time, snappy_framing)


def control_batch(
    base_offset: int,
    producer_id: int,
    *,
    marker: int = ABORT,
    producer_epoch: int = 0,
    coordinator_epoch: int = 0,
    leader_epoch: int = 0,
    timestamp: int = 1_700_000_000_000,
) -> bytes:
    """A transaction marker: a transactional control batch of one record.

    Its key is version int16 (0) + type int16 (0 ABORT, 1 COMMIT), its value
    version int16 + coordinator epoch int32 (Kafka's EndTransactionMarker).
    """
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=NONE,
        is_transactional=True,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp, struct.pack(">hh", 0, marker), struct.pack(">hi", 0, coordinator_epoch), [])
    raw = bytearray(builder.build())
    struct.pack_into(">h", raw, 21, struct.unpack_from(">h", raw, 21)[0] | CONTROL_MASK)
    return _finish(raw, base_offset, leader_epoch, NONE, None, "raw")


def legacy_batch(
    values: Sequence[bytes | None],
    *,
    magic: int = 1,
    base_offset: int = 0,
    codec: int | str = NONE,
    timestamp: int = 1_700_000_000_000,
    keys: Sequence[bytes | None] | None = None,
) -> bytes:
    """A magic v0/v1 message set: plain messages, or one compressed wrapper message.

    As the broker stores it: a v1 wrapper's inner offsets are relative
    (0..n-1) and the wrapper carries the absolute offset of the last one; v0
    inner offsets are absolute.
    """
    codec = _codec_id(codec)
    keys = keys if keys is not None else [None] * len(values)
    inner = LegacyRecordBatchBuilder(magic=magic, compression_type=NONE, batch_size=1 << 30)
    for i, (key, value) in enumerate(zip(keys, values, strict=False)):
        offset = i if codec != NONE and magic == 1 else base_offset + i
        inner.append(offset, timestamp, key, value)
    message_set = bytes(inner.build())
    if codec == NONE:
        return message_set
    payload = compress(codec, message_set, snappy_framing="xerial")
    last = base_offset + len(values) - 1
    if magic == 0:
        body = struct.pack(">bb", 0, codec)
    else:
        body = struct.pack(">bbq", 1, codec, timestamp)
    body += struct.pack(">i", -1) + struct.pack(">i", len(payload)) + payload
    return struct.pack(">qiI", last, len(body) + 4, zlib.crc32(body)) + body


def compress(codec: int, data: bytes, *, snappy_framing: str = "xerial") -> bytes:
    """Compress like a producer: Java's xerial snappy or librdkafka's raw, LZ4 frames with independent blocks."""
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        if snappy_framing == "raw":
            return bytes(cramjam.snappy.compress_raw(data))
        out = [b"\x82SNAPPY\x00", struct.pack(">ii", 1, 1)]
        for i in range(0, len(data), 32 * 1024):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + 32 * 1024]))
            out += [struct.pack(">i", len(block)), block]
        return b"".join(out)
    if codec == LZ4:
        compressor = cramjam.lz4.Compressor(block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown codec {codec}")


def _finish(
    raw: bytearray, base_offset: int, leader_epoch: int, codec: int, log_append_time: int | None, snappy_framing: str
) -> bytes:
    fields = list(HEADER.unpack_from(raw))
    if codec != NONE:
        raw = raw[:HEADER_SIZE] + compress(codec, bytes(raw[HEADER_SIZE:]), snappy_framing=snappy_framing)
        fields[5] |= codec
    if log_append_time is not None:
        fields[5] |= TIMESTAMP_TYPE_MASK
        fields[8] = log_append_time
    fields[0] = base_offset
    fields[1] = len(raw) - LOG_OVERHEAD
    fields[2] = leader_epoch
    HEADER.pack_into(raw, 0, *fields)
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[CRC_START:])))
    return bytes(raw)
