"""numpy to Arrow and back through buffers, never through pyarrow's pandas shim.

``pa.array(ndarray)``, ``pa.array(list)``, ``pa.scalar`` and ``Array.to_numpy()`` import pandas when it
is installed (pyarrow checks for pandas objects): about 50 MB and half a second, paid in every process
that decodes a fetch, every Spark task's Python worker included. These helpers build and read the
fixed-width and binary arrays of the fetch path from their buffers instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def _validity(mask: np.ndarray | None) -> pa.Buffer | None:
    """Arrow's validity bitmap (1 = present) of a numpy null mask (True = null)."""
    if mask is None or not mask.any():
        return None
    return pa.py_buffer(np.packbits(~mask, bitorder="little"))


def array(values: np.ndarray, type: pa.DataType | None = None, mask: np.ndarray | None = None) -> pa.Array:
    """A fixed-width Arrow array of a 1-d numpy array (int32, int64, bool; ``type`` e.g. a timestamp of the
    same width); ``mask`` True where null."""
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), len(values), [_validity(mask), data])
    values = np.ascontiguousarray(values)
    if type is None:
        type = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(type, len(values), [_validity(mask), pa.py_buffer(values)])


def binary(items: Sequence[bytes | str | None], type: pa.DataType | None = None) -> pa.Array:
    """A binary (or string, ``type=pa.string()``; str items are encoded UTF-8) array of Python items."""
    if type is None:
        type = pa.binary()
    n = len(items)
    if not n:
        return pa.nulls(0, type)
    null = np.fromiter((x is None for x in items), dtype=np.bool_, count=n)
    raw = [b"" if x is None else x.encode() if isinstance(x, str) else x for x in items]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, raw), dtype=np.int32, count=n), out=offsets[1:])
    return pa.Array.from_buffers(type, n, [_validity(null), pa.py_buffer(offsets), pa.py_buffer(b"".join(raw))])


def numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an int32/int64/timestamp column without nulls, as a zero-copy numpy view."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    dtype = np.int32 if column.type.bit_width == 32 else np.int64
    if not len(column):
        return np.empty(0, dtype=dtype)
    return np.frombuffer(column.buffers()[1], dtype=dtype, count=len(column), offset=column.offset * dtype().itemsize)


def nulls(column: pa.Array) -> np.ndarray:
    """True where ``column`` is null."""
    n = len(column)
    validity = column.buffers()[0]
    if validity is None or not column.null_count:
        return np.zeros(n, dtype=np.bool_)
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return ~bits[column.offset : column.offset + n].astype(np.bool_)


def empty(schema: pa.Schema) -> pa.RecordBatch:
    """A RecordBatch of ``schema`` with no rows."""
    return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)
