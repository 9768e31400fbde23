# The compiled walk's signatures (fetch/_cwalk.c): see _columns._walked_columns, _decode.decode_partition and
# managers/_log_end.fetched_end. NotImplemented where the Python walk is to take the fetch.
from collections.abc import Callable
from typing import Any

def walk_columns(
    records: bytes | memoryview,
    fetch_offset: int,
    committed: bool,
    check_crcs: bool,
    crc32c: Callable[[Any], int],
    offsets: bytearray,
    timestamps: bytearray,
    spans: bytearray,
    /,
) -> Any: ...
def walk_records(
    records: bytes | memoryview,
    fetch_offset: int,
    committed: bool,
    check_crcs: bool,
    crc32c: Callable[[Any], int],
    topic: str,
    partition: int,
    out: list[Any],
    record_type: type,
    /,
) -> Any: ...
def batches_end(records: bytes | memoryview, /) -> Any: ...
