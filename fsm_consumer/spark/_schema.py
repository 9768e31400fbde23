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
    from pyspark.sql.types import StructType

_FIELDS = "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType int"
_HEADERS = "headers array<struct<key: string, value: binary>>"


@lru_cache(maxsize=2)
def spark_schema(include_headers: bool) -> StructType:
    """The StructType of the rows (Spark's Kafka source's, to the field)."""
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
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
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
    return StructType(fields)


@lru_cache(maxsize=2)
def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema pyspark expects the record batches of a read to have."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")


def to_spark(batch: pa.RecordBatch, include_headers: bool) -> pa.RecordBatch:
    """One ``poll_batch()`` RecordBatch (a single topic-partition's rows) as Spark's Kafka rows."""
    import pyarrow as pa

    from ..fetch._arrow import array, nulls
    from ..fetch._arrow import numpy as values

    schema = arrow_schema(include_headers)
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
        batch.column("key"),
        batch.column("value"),
        topic,
        batch.column("partition"),
        batch.column("offset"),
        timestamp,
        kind,
    ]
    if include_headers:
        columns.append(_headers_or_null(batch.column("headers"), schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


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
