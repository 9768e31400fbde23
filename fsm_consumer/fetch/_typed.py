"""A partition's decoded columns typed by schema deserializers (``fsm_consumer.schemas``): the raw key and
value columns replaced by the Arrow arrays the deserializers make of them, a fetch at a time.

A deserializer takes part when it has ``to_arrow(topic, values, permissive)`` (values: a binary array). A
value it cannot decode (not framed, an unknown schema id, a payload its schema does not read) ends the
partition's rows before it with a ``DeserializationError``, as ``poll()`` stops at it: the position stays at
that record and the deserializer's own exception is raised (with a note saying where). With
``on_error="null"`` on the deserializer (Spark's PERMISSIVE) the row stays, its value null and the error's
text in a ``value_error`` (``key_error``) column.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ._assemble import PartitionColumns, _binary
from ._decode import deserializer_failed


def typed(deserializer: Any) -> bool:
    """Whether ``deserializer`` types whole columns for poll_batch()."""
    return deserializer is not None and hasattr(deserializer, "to_arrow")


def type_columns(decoded: Any, topic: str, partition: int, key_des: Any, value_des: Any) -> Any:
    """``decoded`` (a ``DecodedColumns``) with its keys and values typed by the deserializers that type."""
    cols: PartitionColumns = decoded.columns
    if not cols.num_rows:
        return decoded
    keys, values, errors = cols.keys, cols.values, {}
    stop = cols.stop
    failure: tuple[int, str, Exception] | None = None
    for origin, des in (("key", key_des), ("value", value_des)):
        if des is None:
            continue
        if not typed(des):
            raise TypeError(
                f"poll_batch() hands out columns: the {origin} deserializer {des!r} cannot type them (it has no "
                "to_arrow); use poll(), or a deserializer of fsm_consumer.schemas"
            )
        raw = _binary([(keys if origin == "key" else values, cols.start, stop)])
        permissive = getattr(des, "on_error", "fail") == "null"
        try:
            array, failed = des.to_arrow(topic, raw, permissive)
        except Exception as untyped:  # noqa: BLE001 - as poll() takes a deserializer's: raised, noting where
            # nothing of the column could be typed (its reader schema not to be had: the registry down): the
            # partition's rows end before its first record
            array, failed = pa.array([], pa.null()), [(0, untyped)]
            permissive = False
        # an error that ends the column even when permissive (a record newer than the reader schema, when the
        # reader asked to stop there): the rows before it are handed out, it is raised
        ending = [(i, e) for i, e in failed if not permissive or getattr(e, "ends_column", False)]
        if permissive:
            texts: list[str | None] = [None] * len(array)
            for index, exc in failed:
                if index < len(texts):
                    texts[index] = f"{type(exc).__name__}: {exc}"
            errors[origin] = pa.array(texts, pa.string())
        if ending:
            index, exc = ending[0]
            if failure is None or cols.start + index < failure[0]:
                failure = (cols.start + index, origin, exc)
            stop = min(stop, cols.start + index)
        if cols.start:
            array = pa.concat_arrays([pa.nulls(cols.start, array.type), array])
        if origin == "key":
            keys = array
        else:
            values = array
    if cols.start:
        errors = {k: pa.concat_arrays([pa.nulls(cols.start, pa.string()), v]) for k, v in errors.items()}
    typed_cols = PartitionColumns(
        cols.offsets, cols.timestamps, keys, values, cols.headers, cols.log_append, cols.start, stop, errors
    )
    if failure is None:
        return decoded._replace(columns=typed_cols)
    row, origin, exc = failure
    offset = int(cols.offsets[row])
    error = deserializer_failed(exc, topic, partition, offset, origin)
    return decoded._replace(columns=typed_cols, next_offset=offset, error=error)
