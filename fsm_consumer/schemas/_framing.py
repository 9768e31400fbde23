"""Confluent's wire framing: byte 0 is 0 (the format's version), bytes 1-4 the schema id, big-endian; then the
payload. Protobuf adds, before its payload, the path of the message in the schema file as varint message
indexes (a count, then that many indexes; a lone 0 means the first message, ``[0]``)."""

from __future__ import annotations

from ._errors import FramingError

MAGIC = 0
HEADER_SIZE = 5


def schema_id_of(data: bytes | memoryview) -> int:
    """The schema id a framed record names; FramingError for bytes not in the framing."""
    if len(data) < HEADER_SIZE:
        raise FramingError(
            f"{len(data)} bytes cannot hold Confluent's 5-byte header: the record was not written by a "
            "schema-registry serializer"
        )
    if data[0] != MAGIC:
        raise FramingError(
            f"the first byte is {data[0]}, not 0: the record was not written by a schema-registry serializer "
            "(plain JSON or Avro without the registry's header?)"
        )
    return int.from_bytes(data[1:HEADER_SIZE], "big")


def _zigzag_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while pos < len(data):
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            break
    raise FramingError("Protobuf message indexes run past the record or are not varints")


def message_indexes(data: bytes | memoryview, pos: int = HEADER_SIZE) -> tuple[list[int], int]:
    """The Protobuf message indexes at ``pos`` and where the payload begins."""
    count, pos = _zigzag_varint(data, pos)
    if count == 0:
        return [0], pos
    if count < 0 or count > len(data) - pos:  # an index takes at least a byte
        raise FramingError(f"a Protobuf message index count of {count} does not fit the record")
    indexes = []
    for _ in range(count):
        index, pos = _zigzag_varint(data, pos)
        if index < 0:
            raise FramingError(f"a negative Protobuf message index ({index})")
        indexes.append(index)
    return indexes, pos
