"""What the three formats share when they type a column: the loop over a batch's values (stop at the first
that fails, or keep it as a null row), and the converters that carry a decoded value into the form
``pyarrow.array`` takes for its type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ._errors import NewerSchemaError, SchemaError

Converter = Callable[[Any], Any]
ON_ERROR = ("fail", "null")


NEWER = ("resolve", "stop")


def check_newer(newer: str) -> str:
    if newer not in NEWER:
        raise ValueError(f"newer is 'resolve' or 'stop', got {newer!r}")
    return newer


def stop_if_newer(newer: str, schema_id: int, reader_id: int | None) -> None:
    """``newer="stop"``: a record whose schema was registered after the reader's (a higher id: registries
    number schemas as they come) ends the column with ``NewerSchemaError``."""
    if newer == "stop" and reader_id is not None and schema_id > reader_id:
        raise NewerSchemaError(
            f"the record was written with schema id {schema_id}, registered after the reader schema (id "
            f"{reader_id}) this read started with: a read started now takes its new fields",
            schema_id=schema_id,
        )


def check_on_error(on_error: str) -> str:
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error is 'fail' or 'null', got {on_error!r}")
    return on_error


def typed_column(
    values: list[bytes | None] | pa.Array,
    row: Callable[[bytes], Any],
    typ: Callable[[], pa.DataType],
    permissive: bool,
) -> tuple[pa.Array, list[tuple[int, Exception]]]:
    """``values`` (a list or a binary array) as an array of ``typ()`` (asked after the rows: a format may learn
    it from the first), each non-null one made by ``row``; the (index, error) of those that failed: permissive,
    each is a null row, else the column ends before the first."""
    if isinstance(values, pa.Array):
        values = values.to_pylist()
    rows: list[Any] = []
    failed: list[tuple[int, Exception]] = []
    for i, data in enumerate(values):
        if data is None:
            rows.append(None)
            continue
        try:
            rows.append(row(data))
        except (SchemaError, ValueError) as exc:  # the caller says where, and decides: fail or null
            failed.append((i, exc))
            if not permissive or getattr(exc, "ends_column", False):
                break
            rows.append(None)
    return pa.array(rows, type=typ()), failed


def by_name(converts: list[tuple[str, Converter]]) -> Converter:
    """A record's (dict's) fields converted by name; a non-dict is null."""

    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            return None
        out = dict(value)
        for name, conv in converts:
            if name in out:
                out[name] = conv(out[name])
        return out

    return convert


def items(conv: Converter) -> Converter:
    return lambda value: None if value is None else [conv(v) for v in value]


def map_values(conv: Converter) -> Converter:
    return lambda value: None if value is None else {k: conv(v) for k, v in value.items()}
