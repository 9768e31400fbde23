"""``fsm_kafka``: a PySpark data source for Kafka on fsm_consumer (pyspark 4's Python data source API).

    from fsm_consumer.spark import register
    register(spark)   # or spark.dataSource.register(KafkaDataSource)
    df = (spark.read.format("fsm_kafka")            # or spark.readStream
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")             # or subscribePattern, assign
          .load())

Options, defaults and the row schema are Spark's Kafka source's (key, value, topic, partition,
offset, timestamp, timestampType, and headers with includeHeaders=true); ``kafka.*`` options go to
the fsm_consumer ``Consumer`` (``kafka.security.protocol`` -> ``security_protocol``); an unknown
option is an error naming it. Streaming adds ``commitToGroup=<group id>``: finished batches' ends are
committed to that Kafka group for lag tools. ``df.write``/``df.writeStream`` with ``format("fsm_kafka")``
produce rows to Kafka as Spark's Kafka sink does. ``ConsumerSink`` appends what a group member of
yours polls to a table, committing only what was written; ``StandaloneCluster`` starts a Spark
standalone cluster from the pyspark installation. Needs the spark extra: ``pip install 'fsm_consumer[spark]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from ._option_values import KafkaOptionError
from ._source import NAME, KafkaDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ._cluster import ClusterStartError, StandaloneCluster
    from ._consumer_sink import ConsumerSink, WrittenBatch

# imported on first use: the Python workers that look up and create the data source need only it
_LAZY = {
    "ClusterStartError": "._cluster",
    "StandaloneCluster": "._cluster",
    "ConsumerSink": "._consumer_sink",
    "WrittenBatch": "._consumer_sink",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


def register(spark: SparkSession) -> None:
    """Make ``format("fsm_kafka")`` available to ``spark`` (a SparkSession)."""
    spark.dataSource.register(KafkaDataSource)


__all__ = [
    "NAME",
    "ClusterStartError",
    "ConsumerSink",
    "KafkaDataSource",
    "KafkaOptionError",
    "StandaloneCluster",
    "WrittenBatch",
    "register",
]
