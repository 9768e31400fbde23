"""Decompression of record batch payloads, with cramjam.

kafka-python's own codecs need python-snappy, lz4 and zstandard, which this
project does not install (only gzip works with them), and its gzip goes
through ``GzipFile``, 3x slower than cramjam. Formats are the ones Kafka
producers write:

* gzip: one or more gzip members (``zlib.decompress`` would silently stop
  after the first, so cramjam it is).
* snappy: xerial-framed by the Java client, raw by librdkafka; both accepted.
* lz4: an LZ4 frame with independent blocks (Java's KafkaLZ4BlockOutputStream,
  librdkafka). cramjam's frame decoder costs ~50 us per call even for 16 KB,
  so frames are walked here and each block goes to the block decoder
  (~7 us); a frame with linked blocks falls back to the frame decoder. The
  header checksum is not checked: magic v0 wrote it wrong, and the batch CRC
  already covers the bytes.
* zstd: cramjam (about 12 us fixed cost per call, its context set-up).

Every failure raises ``ValueError`` with a short reason.
"""

from __future__ import annotations

import struct

import cramjam

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic, int32 version, int32 compatible version
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_MAX = {4: 1 << 16, 5: 1 << 18, 6: 1 << 20, 7: 1 << 22}
_U32_LE = struct.Struct("<I")
_I32_BE = struct.Struct(">i")


def decompress(codec: int, data) -> bytes:
    """Decompress a batch payload (bytes or memoryview) written with ``codec``."""
    try:
        if codec == LZ4:
            return _lz4(data)
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(data))
        if codec == SNAPPY:
            return _snappy(data)
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
    except cramjam.DecompressionError as exc:
        raise ValueError(f"{NAMES[codec]} decompression failed: {exc}") from None
    except struct.error:
        raise ValueError(f"{NAMES[codec]} stream truncated") from None
    raise ValueError(f"unknown compression type {codec}")


def _snappy(data) -> bytes:
    if bytes(data[:8]) != _XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    view = memoryview(data)
    parts = []
    pos, end = _XERIAL_HEADER_SIZE, len(view)
    while pos < end:
        (size,) = _I32_BE.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise ValueError("snappy: xerial block overruns the payload")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size])))
        pos += size
    return b"".join(parts)


def _lz4(data) -> bytes:
    view = memoryview(data)
    end = len(view)
    parts: list[bytes] = []
    pos = 0
    while pos < end:  # normally one frame; concatenated frames are legal
        if bytes(view[pos : pos + 4]) != _LZ4_MAGIC:
            raise ValueError("lz4: bad frame magic")
        flg, bd = view[pos + 4], view[pos + 5]
        if flg >> 6 != 1:
            raise ValueError(f"lz4: unsupported frame version {flg >> 6}")
        if not flg & 0x20:
            # Linked blocks need the previous block as dictionary: let cramjam's
            # frame decoder do it (slow, but no Kafka client writes these).
            return b"".join(parts) + bytes(cramjam.lz4.decompress(view[pos:]))
        block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 7)
        if block_max is None:
            raise ValueError("lz4: bad block maximum size")
        has_block_crc = flg & 0x10
        pos += 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0) + 1  # ... header checksum
        out = None
        while True:
            (size,) = _U32_LE.unpack_from(view, pos)
            pos += 4
            if size == 0:  # end mark
                break
            raw = size & 0x80000000
            size &= 0x7FFFFFFF
            if size > block_max or pos + size > end:
                raise ValueError("lz4: block overruns the payload")
            if raw:
                parts.append(bytes(view[pos : pos + size]))
            else:
                if out is None:
                    out = bytearray(block_max)
                n = cramjam.lz4.decompress_block_into(view[pos : pos + size], out)
                parts.append(bytes(memoryview(out)[:n]))
            pos += size + (4 if has_block_crc else 0)
        pos += 4 if flg & 0x04 else 0  # content checksum
        if pos > end:
            raise ValueError("lz4: frame truncated")
    return parts[0] if len(parts) == 1 else b"".join(parts)
