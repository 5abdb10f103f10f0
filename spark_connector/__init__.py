"""Spark connector for RocketMQ: a `rocketmq` data source (PySpark >= 4.2, Python Data Source API).

    import spark_connector
    spark_connector.register(spark)

    stream = (spark.readStream.format("rocketmq")
              .option("nameServer", "127.0.0.1:9876").option("topic", "T1,T2")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 100000)
              .option("group", "spark-etl")              # offsets also committed to the broker
              .load())
    batch = (spark.read.format("rocketmq").option("nameServer", "127.0.0.1:9876").option("topic", "T1")
             .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    df.write.format("rocketmq").option("nameServer", "127.0.0.1:9876").option("topic", "Out").save()

Reading: one Spark partition per message queue range (large ranges split by
`maxRecordsPerPartition` / `minPartitions`), read by executors through `client.reader`
(PULL_MESSAGE by offset range, no consumer-group membership) and handed to Spark as Arrow record
batches. Offsets (checkpointed by Spark) are JSON `{topic: {"brokerName/queueId": offset}}`.
Options: `spark_connector.options`; columns: `spark_connector.rows`; writing: `spark_connector.sink`;
offset and commit semantics: `spark_connector.source`.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .errors import DataLossError, OptionError, RocketMQSparkError
from .offsets import offsets_from_json, offsets_to_json
from .options import parse_sink_options, parse_source_options
from .rows import SOURCE_SCHEMA

__all__ = [
    "SOURCE_SCHEMA",
    "DataLossError",
    "OptionError",
    "RocketMQDataSource",
    "RocketMQSparkError",
    "offsets_from_json",
    "offsets_to_json",
    "register",
]


class RocketMQDataSource(DataSource):
    """The `rocketmq` data source: readStream/read (source) and writeStream/write (sink)."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from .source import RocketMQBatchReader, check_schema

        check_schema(schema)
        return RocketMQBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .source import RocketMQStreamReader, check_schema

        check_schema(schema)
        return RocketMQStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import RocketMQWriter

        return RocketMQWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import RocketMQStreamWriter

        return RocketMQStreamWriter(parse_sink_options(self.options), schema)


def register(spark: Any) -> None:
    """Register the `rocketmq` format on a SparkSession (PySpark >= 4.2)."""
    if not hasattr(spark, "dataSource"):
        raise RuntimeError("the rocketmq data source needs PySpark >= 4.2 (the Python Data Source API)")
    spark.dataSource.register(RocketMQDataSource)
