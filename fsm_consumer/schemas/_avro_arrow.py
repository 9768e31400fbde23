"""Avro schemas as Arrow types, the way Spark's ``from_avro`` types them (``SchemaConverters``), and fastavro's
decoded values made ready for ``pyarrow.array`` of that type.

* record -> struct; array -> list; map -> map<string, T>; enum -> string; fixed and bytes -> binary;
* a union of null and one type -> that type, nullable; ``[int, long]`` -> int64 and ``[float, double]`` ->
  float64 (Spark's widening); any other union -> a struct of ``member0``, ``member1``, ... (nulls left out),
  one member set per row;
* logical types: decimal -> decimal128(precision, scale); date -> date32; timestamp-millis/-micros ->
  timestamp[ms/us, UTC]; local-timestamp-millis/-micros -> timestamp[ms/us] without a zone;
  time-millis -> time32[ms]; time-micros -> time64[us]; uuid -> string.

Recursive schemas have no Arrow type: ``UnsupportedSchemaError`` names the record.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ._column import by_name, items, map_values
from ._errors import SchemaError

_PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_LOGICAL = {
    ("int", "date"): pa.date32(),
    ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("ms"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
    ("int", "time-millis"): pa.time32("ms"),
    ("long", "time-micros"): pa.time64("us"),
    ("string", "uuid"): pa.string(),
}

Convert = Callable[[Any], Any] | None  # None: the value is ready as it is


class UnsupportedSchemaError(SchemaError):
    """An Avro schema with no Arrow type (a recursive record)."""


def arrow_type(schema: Any) -> pa.DataType:
    """The Arrow type of an expanded Avro schema (``fastavro.parse_schema(..., expand=True)``)."""
    return _typed(schema, ())[0]


def converter(schema: Any) -> Convert:
    """What turns fastavro's value for ``schema`` into what ``pyarrow.array`` takes for ``arrow_type(schema)``;
    None when nothing needs turning."""
    return _typed(schema, ())[1]


def _typed(schema: Any, seen: tuple[str, ...]) -> tuple[pa.DataType, Convert]:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema], None
        raise UnsupportedSchemaError(f"the Avro type {schema!r} is not defined (a recursive or unknown named type)")
    if isinstance(schema, list):
        return _union(schema, seen)
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(schema["precision"], schema.get("scale", 0)), None
    if (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)], (_uuid if logical == "uuid" else None)
    if kind == "record" or kind == "error":
        name = schema["name"]
        if name in seen:
            raise UnsupportedSchemaError(
                f"the Avro record {name!r} contains itself: a recursive schema has no Arrow type"
            )
        fields, converts = [], []
        for field in schema["fields"]:
            ftype, fconv = _typed(field["type"], (*seen, name))
            fields.append(pa.field(field["name"], ftype, nullable=_nullable(field["type"])))
            if fconv is not None:
                converts.append((field["name"], fconv))
        return pa.struct(fields), (by_name(converts) if converts else None)
    if kind == "array":
        item, conv = _typed(schema["items"], seen)
        return pa.list_(pa.field("element", item, nullable=_nullable(schema["items"]))), (items(conv) if conv else None)
    if kind == "map":
        value, conv = _typed(schema["values"], seen)
        mapped = pa.map_(pa.string(), pa.field("value", value, nullable=_nullable(schema["values"])))
        return mapped, (map_values(conv) if conv else None)
    if kind == "enum":
        return pa.string(), None
    if kind == "fixed":
        return pa.binary(), None
    return _typed(kind, seen)  # {"type": "int"} and primitives with an unknown logical type


def _nullable(schema: Any) -> bool:
    return schema == "null" or (isinstance(schema, list) and "null" in schema)


def _union(branches: list, seen: tuple[str, ...]) -> tuple[pa.DataType, Convert]:
    present = [b for b in branches if b != "null"]
    if not present:
        return pa.null(), None
    if len(present) == 1:
        return _typed(present[0], seen)
    if all(isinstance(b, str) for b in present) and set(present) in ({"int", "long"}, {"float", "double"}):
        return (pa.int64(), None) if "long" in present else (pa.float64(), None)
    typed = [_typed(b, seen) for b in present]
    members = pa.struct([pa.field(f"member{i}", t) for i, (t, _) in enumerate(typed)])
    matchers = [(_matches(b), conv) for b, (_, conv) in zip(present, typed, strict=False)]
    names = [f"member{i}" for i in range(len(present))]

    by_type: dict[type, tuple[str, Convert]] = {}  # the branch a Python type matches: the same for every value

    def to_members(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, tuple):  # (record name, value) from return_record_name
            name, value = value
            for i, branch in enumerate(present):
                if isinstance(branch, dict) and branch.get("name") == name:
                    conv = typed[i][1]
                    return {names[i]: conv(value) if conv else value}
        found = by_type.get(type(value))
        if found is None:
            for name, (matches, conv) in zip(names, matchers, strict=True):
                if matches(value):
                    found = by_type[type(value)] = (name, conv)
                    break
            else:
                raise SchemaError(f"a union value {value!r} matches none of its branches")
        name, conv = found
        return {name: conv(value) if conv else value}

    return members, to_members


def _matches(branch: Any) -> Callable[[Any], bool]:
    """Whether fastavro's value came from ``branch``: by its Python type (fastavro says no branch but a record's)."""
    kind = branch if isinstance(branch, str) else branch["type"]
    logical = branch.get("logicalType") if isinstance(branch, dict) else None
    if logical in _LOGICAL_PYTHON:
        python = _LOGICAL_PYTHON[logical]
        return lambda v: isinstance(v, python)
    if kind in _KIND_PYTHON:
        python = _KIND_PYTHON[kind]
        return lambda v: isinstance(v, python) and not (isinstance(v, bool) and python is int)
    return lambda v: True


_LOGICAL_PYTHON: dict[str, Any] = {
    "decimal": decimal.Decimal,
    "date": datetime.date,
    "timestamp-millis": datetime.datetime,
    "timestamp-micros": datetime.datetime,
    "local-timestamp-millis": datetime.datetime,
    "local-timestamp-micros": datetime.datetime,
    "time-millis": datetime.time,
    "time-micros": datetime.time,
    "uuid": (uuid.UUID, str),
}
_KIND_PYTHON: dict[str, Any] = {
    "boolean": bool,
    "int": int,
    "long": int,
    "float": float,
    "double": float,
    "bytes": bytes,
    "fixed": bytes,
    "string": str,
    "enum": str,
    "record": dict,
    "error": dict,
    "map": dict,
    "array": list,
}


def _uuid(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else value
