"""``KafkaDataSource``: the ``fsm_kafka`` Python data source (pyspark's ``pyspark.sql.datasource`` API).

Reads (``spark.read`` / ``spark.readStream``) take Spark's Kafka source options and give its rows
(``_schema``); writes (``df.write`` / ``df.writeStream``) are ``_write``'s ``KafkaBatchWriter`` and
``KafkaStreamWriter``, imported only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from ._options import ReadOptions, check_batch, check_stream, parse
from ._schema import read_schema

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from ._batch import KafkaBatchReader
    from ._stream import KafkaStreamReader
    from ._write import KafkaBatchWriter, KafkaStreamWriter

NAME = "fsm_kafka"


def _check_schema(schema: StructType | None, opts: ReadOptions) -> None:
    """Like Spark's Kafka source, the schema is fixed: a user-specified one is refused."""
    expected = read_schema(opts)
    if schema is not None and schema != expected:
        raise ValueError(
            f"{NAME} has a fixed schema and cannot be read with a user-specified one: expected "
            f"{expected.simpleString()}, got {schema.simpleString()}"
        )


class KafkaDataSource(DataSource):
    """Kafka topics as a DataFrame: ``spark.read.format("fsm_kafka").option("kafka.bootstrap.servers", ...)
    .option("subscribe", "events").load()`` (or ``spark.readStream``), read with fsm_consumer."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # reads only (pyspark does not ask a write for it): every read option is checked here, at load()
        return read_schema(self._read_options())

    def reader(self, schema: StructType) -> KafkaBatchReader:
        from ._batch import KafkaBatchReader

        opts = check_batch(self._read_options()).with_group_id("batch")
        _check_schema(schema, opts)
        return KafkaBatchReader(opts)

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        from ._stream import KafkaStreamReader

        opts = check_stream(self._read_options()).with_group_id("stream")
        _check_schema(schema, opts)
        return KafkaStreamReader(opts)

    def _read_options(self) -> ReadOptions:
        """The options parsed, and the typed columns' reader schemas chosen, once for this read: schema() and
        the reader must agree on them, whatever the registry is given meanwhile."""
        opts = getattr(self, "_pinned", None)
        if opts is None:
            opts = self._pinned = parse(self.options).with_formats_pinned()
        return opts

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        from ._write import KafkaBatchWriter

        return KafkaBatchWriter(dict(self.options), schema, overwrite)  # overwrite is refused: topics are append-only

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        from ._write import KafkaStreamWriter

        return KafkaStreamWriter(dict(self.options), schema, overwrite)
