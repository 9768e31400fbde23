"""A ParallelConsumer's lines in its consumer's history (docs/histories.md): a ``handled`` line per
handler attempt, written by the worker that ran it, so its times are the handler's own."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._workers import is_async

if TYPE_CHECKING:
    from .._history_writer import HistoryWriter
    from ..structs import ConsumerRecord


def key_digest(key: object) -> str | None:
    """Equal keys, equal digests (within one process, as lanes are): crc32 of bytes and str, else hash()."""
    if key is None:
        return None
    if isinstance(key, (bytes, bytearray, memoryview)):
        return f"{zlib.crc32(key):08x}"
    if isinstance(key, str):
        return f"{zlib.crc32(key.encode()):08x}"
    try:
        return f"h{hash(key) & 0xFFFFFFFF:08x}"
    except TypeError:
        return f"r{zlib.crc32(repr(key).encode()):08x}"  # unhashable: ordering="key" refuses it anyway


def _write(history: HistoryWriter, record: ConsumerRecord, started: float, outcome: str) -> None:
    history.write(
        "handled",
        tp=[record.topic, record.partition],
        offset=record.offset,
        key=key_digest(record.key),
        t_start=round(started, 3),
        outcome=outcome,
    )


def recording(handler: Callable[[ConsumerRecord], Any], history: HistoryWriter) -> Callable[[ConsumerRecord], Any]:
    """``handler``, writing a ``handled`` line after each call (sync or async alike)."""
    if is_async(handler):

        async def async_recorded(record: ConsumerRecord) -> object:
            started, outcome = time.monotonic() * 1000.0, "failed"
            try:
                result = await handler(record)
                outcome = "ok"
                return result
            finally:
                _write(history, record, started, outcome)

        return async_recorded

    def recorded(record: ConsumerRecord) -> object:
        started, outcome = time.monotonic() * 1000.0, "failed"
        try:
            result = handler(record)
            outcome = "ok"
            return result
        finally:
            _write(history, record, started, outcome)

    return recorded


__all__ = ["key_digest", "recording"]
