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

Bounded: bytes from the network decide how far a payload expands (a zstd batch
of 594 bytes holds 16 MiB of zeros), so no payload is decompressed past
``limit`` bytes (the consumer passes ``receive_buffer_max``, the largest answer
it accepts): beyond it, ``ValueError`` says so and names the setting. gzip,
zstd and linked-block lz4 are decompressed into a buffer that cannot grow
(first one sized for ordinary ratios, then, where that was too small, again
into one 4 times larger, up to ``limit`` bytes);
snappy and lz4 blocks say their sizes, which are checked before anything is
decompressed.
"""

from __future__ import annotations

import struct

import cramjam
import numpy as np

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic, int32 version, int32 compatible version
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_MAX = {4: 1 << 16, 5: 1 << 18, 6: 1 << 20, 7: 1 << 22}
_U32_LE = struct.Struct("<I")
_I32_BE = struct.Struct(">i")


#: the default bound on a payload decompressed (the consumer's default receive_buffer_max)
DEFAULT_LIMIT = 100 * 1024 * 1024
_FIRST_RATIO = 16  # the first buffer's size over the compressed size: ordinary batches fit it
_FIRST_MIN = 1 << 16
_GROWTH = 4
_TOO_SMALL = "failed to write whole buffer"  # cramjam's word for an output buffer that filled up


class TooLarge(ValueError):
    """A payload decompresses past the limit (the walk makes it a RecordTooLargeError)."""


def decompress(codec: int, data, limit: int = DEFAULT_LIMIT) -> bytes:
    """Decompress a batch payload (bytes or memoryview) written with ``codec``: at most ``limit`` bytes."""
    try:
        if codec == LZ4:
            return _lz4(data, limit)
        if codec == ZSTD:
            return _bounded(cramjam.zstd.decompress_into, data, limit)
        if codec == SNAPPY:
            return _snappy(data, limit)
        if codec == GZIP:
            return _bounded(cramjam.gzip.decompress_into, data, limit)
    except TooLarge:
        raise TooLarge(
            f"decompresses ({NAMES[codec]}) past {limit} bytes, the most a batch may hold here: raise "
            "receive_buffer_max to read it"
        ) from None
    except cramjam.DecompressionError as exc:
        raise ValueError(f"{NAMES[codec]} decompression failed: {exc}") from None
    except struct.error:
        raise ValueError(f"{NAMES[codec]} stream truncated") from None
    raise ValueError(f"unknown compression type {codec}")


def _bounded(decompress_into, data, limit: int) -> bytes:
    """``data`` decompressed by ``decompress_into`` into a buffer that cannot grow: TooLarge past ``limit``.
    A buffer too small is dropped for one _GROWTH times larger (up to ``limit``) and the payload decompressed
    again: the work stays within a few times the output, the buffer within _GROWTH times it."""
    size = min(limit, max(_FIRST_MIN, _FIRST_RATIO * len(data)))
    while True:
        out = np.empty(size, dtype=np.uint8)  # not written first: only the pages the output reaches are touched
        try:
            n = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if str(exc) != _TOO_SMALL:
                raise
            if size >= limit:
                raise TooLarge from None
            size = min(limit, _GROWTH * size)
            del out  # before the larger one is made
            continue
        return out[:n].tobytes()


def _snappy_raw(data, room: int) -> bytes:
    """A raw snappy block, whose header says its size: checked before it is decompressed."""
    if cramjam.snappy.decompress_raw_len(data) > room:
        raise TooLarge
    return bytes(cramjam.snappy.decompress_raw(data))


def _snappy(data, limit: int) -> bytes:
    if bytes(data[:8]) != _XERIAL_MAGIC:
        return _snappy_raw(data, limit)
    view = memoryview(data)
    parts = []
    total = 0
    pos, end = _XERIAL_HEADER_SIZE, len(view)
    while pos < end:
        (size,) = _I32_BE.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise ValueError("snappy: xerial block overruns the payload")
        parts.append(_snappy_raw(view[pos : pos + size], limit - total))
        total += len(parts[-1])
        pos += size
    return b"".join(parts)


def _lz4(data, limit: int) -> bytes:
    view = memoryview(data)
    end = len(view)
    parts: list[bytes] = []
    total = 0
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
            return b"".join(parts) + _bounded(cramjam.lz4.decompress_into, view[pos:], max(limit - total, 0))
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
            total += len(parts[-1])
            if total > limit:  # a block is at most block_max (4 MiB): never far past it
                raise TooLarge
            pos += size + (4 if has_block_crc else 0)
        pos += 4 if flg & 0x04 else 0  # content checksum
        if pos > end:
            raise ValueError("lz4: frame truncated")
    return parts[0] if len(parts) == 1 else b"".join(parts)
