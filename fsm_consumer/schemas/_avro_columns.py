"""An Avro column typed by the compiled decoder (``_cavro``): the records of a binary column read a run of one
schema id at a time, each run with its pair's program (``_avro_plan``), into one set of Arrow builders.

Returns None where the compiled decoder leaves the column to fastavro: it is not built, a schema pair is
``Unsupported``, or a record asks a question only fastavro's answer settles (``_cavro.c`` declines it). Its
errors are the Python path's: the same exceptions and words, at the same rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ._avro_plan import K_BIN, K_LIST, K_NULL, K_STRUCT, RESOLUTION, Layout, Program, Unsupported
from ._errors import SchemaDecodeError, SchemaError
from ._framing import schema_id_of

_cavro: Any
try:
    from . import _cavro
except ImportError:  # built without a C compiler: fastavro serves
    _cavro = None

DONE, SCHEMA, FRAMING, ERROR, DECLINE = range(5)
_START = Program(__import__("array").array("q", [1, 0, -1]), ())  # until the first record names its schema


def compiled_column(
    values: pa.Array, layout: Layout, program: Callable[[int], Program], permissive: bool
) -> tuple[pa.Array, list[tuple[int, Exception]]] | None:
    """``values`` (a binary array) as the layout's column, and the (index, error) of the records that failed;
    ``program(schema_id)`` gives a pair's program (it may raise: that record fails). None: fastavro's to do."""
    if _cavro is None or values.type != pa.binary():
        return None
    cols = _cavro.Columns(tuple(layout.spec))
    valid, offsets, data = values.buffers()
    n, i, want, prog = len(values), 0, -1, _START
    failed: list[tuple[int, Exception]] = []
    while i < n:
        i, status, info = cols.decode(prog.code, prog.consts, want, valid, offsets, data, values.offset, i, n)
        if status == DONE:
            break
        if status == DECLINE:
            return None
        exc: Exception
        if status == SCHEMA:
            try:
                prog, want = program(info), info
                continue
            except Unsupported:
                return None
            except (SchemaError, ValueError) as err:
                exc = err
        elif status == FRAMING:
            exc = _framing_error(values[i].as_py())
        else:
            exc = _decode_error(info, want)
        failed.append((i, exc))
        if not permissive or getattr(exc, "ends_column", False):
            break
        cols.append_null()
        i += 1
    return _assemble(layout, cols.finish()), failed


def _framing_error(data: bytes) -> Exception:
    try:
        schema_id_of(data)
    except SchemaError as exc:
        return exc
    return SchemaDecodeError("the record is not in Confluent's framing")


def _decode_error(text: str, schema_id: int) -> SchemaDecodeError:
    if text.startswith(RESOLUTION):
        return SchemaDecodeError(
            f"the record's schema (schema id {schema_id}) cannot be resolved to the reader schema: "
            f"{text[len(RESOLUTION) :]}",
            schema_id=schema_id,
        )
    return SchemaDecodeError(
        f"the payload does not decode with its writer schema (schema id {schema_id}): {text}", schema_id=schema_id
    )


def _assemble(layout: Layout, parts: list[tuple[int, int, Any, bytes, bytes]]) -> pa.Array:
    """The builders' buffers as Arrow arrays, children first (they come after their parents)."""
    arrays: list[Any] = [None] * len(parts)
    for k in range(len(parts) - 1, -1, -1):
        kind, children = layout.spec[k]
        typ = layout.types[k]
        length, nulls, valid, data, offsets = parts[k]
        bitmap = None if valid is None else pa.py_buffer(valid)
        if kind == K_NULL:
            arrays[k] = pa.nulls(length, typ)
        elif kind == K_STRUCT:
            arrays[k] = pa.Array.from_buffers(
                typ, length, [bitmap], null_count=nulls, children=[arrays[c] for c in children]
            )
        elif kind == K_LIST:
            arrays[k] = pa.Array.from_buffers(
                typ, length, [bitmap, pa.py_buffer(offsets)], null_count=nulls, children=[arrays[children[0]]]
            )
        elif kind == K_BIN:
            arrays[k] = pa.Array.from_buffers(
                typ, length, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
            )
        else:
            arrays[k] = pa.Array.from_buffers(typ, length, [bitmap, pa.py_buffer(data)], null_count=nulls)
    return arrays[0]
