"""The row schema of Spark's Kafka source, and ``Consumer.poll_batch`` columns turned into it.

key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
timestampType int (0 create time, 1 log append time, -1 none), and with ``includeHeaders``
``headers array<struct<key: string, value: binary>>`` (null for a record without headers, as Spark's); every field
nullable, as in Spark.
Executors hand Spark ``pyarrow.RecordBatch``es whose schema is exactly what pyspark checks against
(``to_arrow_schema(schema, timezone="UTC")``: timestamp[us, tz=UTC], int32, plain strings).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

    from ._options import ReadOptions

_FIELDS = "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType int"
_HEADERS = "headers array<struct<key: string, value: binary>>"


@lru_cache(maxsize=16)
def spark_schema(
    include_headers: bool, key: DataType | None = None, value: DataType | None = None, errors: tuple[str, ...] = ()
) -> StructType:
    """The StructType of the rows (Spark's Kafka source's, to the field); ``key`` and ``value``: their types
    when a format types them (``_formats``), else binary; ``errors``: the ``keyError``/``valueError`` string
    columns of a PERMISSIVE read."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", key or BinaryType()),
        StructField("value", value or BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(
            StructField(
                "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
            )
        )
    fields += [StructField(name, StringType()) for name in errors]
    return StructType(fields)


def read_schema(opts: ReadOptions) -> StructType:
    """The rows' schema: Spark's Kafka source's, the key and value typed by their formats (``_formats``)."""
    if not opts.formats.typed:
        return spark_schema(opts.include_headers)
    topic = (opts.subscribe or ("",))[0]
    key, value = opts.formats.spark_types(topic)
    errors = tuple(f"{s.origin}Error" for s in (opts.formats.key, opts.formats.value) if s.typed)
    return spark_schema(opts.include_headers, key, value, errors if opts.formats.permissive else ())


@lru_cache(maxsize=16)
def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema pyspark expects the record batches of a read of ``schema`` to have."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def to_spark(batch: pa.RecordBatch, include_headers: bool, spark: StructType | None = None) -> pa.RecordBatch:
    """One ``poll_batch()`` RecordBatch (a single topic-partition's rows) as Spark's Kafka rows of ``spark``
    (default: the binary columns'); typed keys and values are cast to Spark's Arrow types."""
    import pyarrow as pa

    from ..fetch._arrow import array, nulls
    from ..fetch._arrow import numpy as values

    schema = arrow_schema(spark or spark_schema(include_headers))
    # built from buffers, not cast: Arrow's compute kernels cost every Python worker memory and time
    stamps = batch.column("timestamp")
    missing = nulls(stamps) if stamps.null_count else None
    timestamp = array(values(stamps) * 1000, schema.field("timestamp").type, mask=missing)
    kind = batch.column("timestamp_type")
    if missing is not None:  # no timestamp (magic v0 data): Kafka's NO_TIMESTAMP_TYPE
        kinds = values(kind).copy()
        kinds[missing] = -1
        kind = array(kinds)
    topic = batch.column("topic")
    if pa.types.is_dictionary(topic.type):
        topic = _plain_strings(topic)
    columns = [
        _as(batch.column("key"), schema.field("key").type),
        _as(batch.column("value"), schema.field("value").type),
        topic,
        batch.column("partition"),
        batch.column("offset"),
        timestamp,
        kind,
    ]
    if include_headers:
        columns.append(_headers_or_null(batch.column("headers"), schema.field("headers").type))
    for name in schema.names[len(columns) :]:  # keyError, valueError
        columns.append(batch.column(name.replace("Error", "_error")))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _as(column: pa.Array, typ: pa.DataType) -> pa.Array:
    """A typed key or value column as Spark's Arrow type of it (a cast: only typed columns differ)."""
    return column if column.type == typ else column.cast(typ)


def _plain_strings(column: pa.DictionaryArray) -> pa.Array:
    """A dictionary-encoded string column as plain strings (one topic name, as a read task's batches have,
    repeated through buffers)."""
    import numpy as np
    import pyarrow as pa

    from ..fetch._arrow import binary
    from ..fetch._arrow import numpy as values

    names = column.dictionary.to_pylist()
    n = len(column)
    if len(names) != 1:  # poll_batch()'s topic is never null
        return binary([names[i] for i in values(column.indices)], pa.string())
    name = names[0].encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(name)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(name * n)])


def _headers_or_null(headers: pa.Array, type: pa.DataType) -> pa.Array:
    """The headers column as Spark's type (its list's item named as pyspark names it), where a record without
    headers has null headers, as in Spark's Kafka source, not an empty array (a query counting nulls or
    filtering ``headers IS NULL`` must get Spark's answer). Built from the list's buffers, not cast: a cast
    loads Arrow's compute kernels, and its scalars would import pandas, in every task (see ``fetch._arrow``)."""
    import numpy as np
    import pyarrow as pa

    from ..fetch._arrow import nulls

    n = len(headers)
    if not n:
        return pa.nulls(0, type)
    offsets = np.frombuffer(headers.buffers()[1], dtype=np.int32, count=n + 1, offset=headers.offset * 4)
    null = (offsets[1:] == offsets[:-1]) | nulls(headers)
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if null.any() else None
    # the offsets of this slice (they index the whole child array, which ``values`` is)
    return pa.Array.from_buffers(type, n, [validity, pa.py_buffer(offsets.copy())], children=[headers.values])
