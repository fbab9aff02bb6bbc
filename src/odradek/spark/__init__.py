"""The `odradek` PySpark data source: Kafka topics in Spark batch and Structured Streaming
jobs, over the Kafka protocol (so any Kafka-compatible broker), with the options and
columns of Spark's built-in Kafka source and sink. Needs the `spark` extra
(`pip install 'odradek[spark]'`).

    from odradek.spark import register
    register(spark)
    df = (spark.read.format("odradek").option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

An optional layer beside `odradek.server`: it talks to brokers over the network only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.spark.source import OdradekDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["OdradekDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make `format("odradek")` available in this Spark session."""
    spark.dataSource.register(OdradekDataSource)
