# The compiled decoder's signature (fetch/_cdecode.c): see decode_records_compiled in _decode_v2.py.
from typing import Any

def decode_records(
    buf: bytes | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    min_offset: int,
    topic: str,
    partition: int,
    leader_epoch: int,
    out: list[Any],
    record_type: type,
    /,
) -> Any: ...
def scan_fields(
    buf: bytes | memoryview,
    count: int,
    start: int,
    base_offset: int,
    base_timestamp: int,
    starts: bytearray,
    offsets: bytearray,
    timestamps: bytearray,
    spans: bytearray,
    /,
) -> Any: ...
def views(parts: Any, starts: Any, spans: Any, field: int, /) -> Any: ...
def to_binary(pieces: Any, /) -> Any: ...
def untrack(items: list[Any], /) -> None: ...
