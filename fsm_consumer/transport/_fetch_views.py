"""A Fetch answer's records as views of the frame they came in, not copies.

kafka-python's generated decoder copies each partition's records out of the frame (``bytes(data[a:b])``):
on 1 KB records that copy, a fresh allocation per partition with its page faults, was ~17% of the
background thread, and the copies and the frame lived side by side. The frame is a buffer of its own for
each response (``FrameReader`` never reuses one), so a view of it is as stable as a copy, and every reader
of records takes a buffer. This builds kafka-python's own decoder for the Fetch answer, with the records
fields emitting the slice without the copy.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs import Bytes
from kafka.protocol.schemas.fields.codegen import CodegenContext

__all__ = ["fetch_body_decoder"]

_COPY = re.compile(r"bytes\((data\[[^\]]+\])\)")
# Codegen reads the fields' types and the struct's class: set for one build at a time.
_building = threading.Lock()


class _RecordsView(Bytes):
    """``Bytes`` whose generated decode keeps the slice of the frame (a memoryview) without copying it."""

    rewritten = 0  # copies turned into views: none means kafka-python's text changed, and nothing is used

    @classmethod
    def emit_decode_from(cls, ctx: Any, var_name: str, indent: str, compact: bool = False) -> None:
        start = len(ctx.lines)
        Bytes.emit_decode_from(ctx, var_name, indent, compact=compact)
        for i in range(start, len(ctx.lines)):
            ctx.lines[i], n = _COPY.subn(r"\1", ctx.lines[i])
            cls.rewritten += n


def _records_fields(field: Any) -> Iterator[Any]:
    """The records fields the decoder is generated from: an array's items are its ``array_of`` struct."""
    array_of = getattr(field, "array_of", None)
    for sub in getattr(array_of if array_of is not None else field, "_fields", None) or ():
        if getattr(sub, "_type_str", None) == "records":
            yield sub
        else:
            yield from _records_fields(sub)


def fetch_body_decoder(response_cls: type[ApiMessage], version: int, flexible: bool) -> Callable | None:
    """kafka-python's compiled body decoder for ``response_cls`` (a Fetch answer) at ``version``, records as
    views; None when its records fields are not where this expects them (the copying decoder then serves)."""
    struct: Any = response_cls._struct
    fields = list(_records_fields(struct))
    if not fields or any(f._type is not Bytes for f in fields):
        return None
    ctx = CodegenContext()
    ctx.lines.append("def _decode(data, pos):")
    with _building:
        saved = struct._data_class
        struct._data_class = response_cls  # as kafka-python's compiled_decode_from: not its weak proxy
        for f in fields:
            f._type = _RecordsView
        _RecordsView.rewritten = 0
        try:
            struct.emit_decode_from(ctx, "obj", "    ", version=version, compact=flexible, tagged=flexible)
        finally:
            for f in fields:
                f._type = Bytes
            struct._data_class = saved
        if _RecordsView.rewritten != len(fields):  # kafka-python emits other text than this rewrites
            return None
    ctx.emit("    ", "return obj, pos")
    exec(compile(ctx.source(), f"<fsm_consumer:fetch_response_v{version}>", "exec"), ctx.globs)
    decode: Callable = ctx.globs["_decode"]
    return decode
