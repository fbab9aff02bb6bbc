"""Discovery of the `odradek` data source without `register(spark)`.

When a Spark session first resolves a Python data source, PySpark (4.0 and later) imports
every top-level module whose name starts with `pyspark_` and registers the `DefaultSource`
it finds there under that class's `name()` (pyspark.sql.worker.lookup_data_sources). This
module exists only to be found that way: installing odradek is enough for
`spark.read.format("odradek")` to work in a session whose Python workers run an
interpreter where odradek is installed (`PYSPARK_PYTHON`).
"""

from odradek.spark.source import OdradekDataSource as DefaultSource

__all__ = ["DefaultSource"]
