"""Discovery of the `odradek` data source without `register(spark)`.

When a Spark session first resolves a Python data source, PySpark (4.0 and later) imports
every top-level module whose name starts with `pyspark_` and registers the `DefaultSource`
it finds there under that class's `name()` (pyspark.sql.worker.lookup_data_sources). This
module exists only to be found that way: installing odradek is enough for
`spark.read.format("odradek")` to work in a session whose Python workers run an
interpreter where odradek is installed (`PYSPARK_PYTHON`).

Without the `[spark]` extra's packages (numba, pyarrow) the real source cannot be
imported, and PySpark would skip this module silently: `format("odradek")` would fail
with DATA_SOURCE_NOT_FOUND and the cause buried. A stand-in is registered instead, whose
every use fails saying which package is missing and what to install.
"""

from pyspark.sql.datasource import DataSource

try:
    from odradek.spark.source import OdradekDataSource as DefaultSource
except ImportError as exc:  # a package of the [spark] extra is missing
    _MISSING = (f"the odradek data source needs the Python package {exc.name!r}, which is "
                f"not installed where Spark's Python runs ({exc}): install it with "
                "pip install 'odradek[spark]'")

    class DefaultSource(DataSource):  # type: ignore[no-redef]
        """Registered as `odradek` when the real source cannot be imported: says why."""

        @classmethod
        def name(cls) -> str:
            return "odradek"

        def schema(self) -> str:
            raise ImportError(_MISSING)

        def reader(self, schema):  # type: ignore[no-untyped-def]
            raise ImportError(_MISSING)

        def streamReader(self, schema):  # type: ignore[no-untyped-def]
            raise ImportError(_MISSING)

        def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
            raise ImportError(_MISSING)

__all__ = ["DefaultSource"]
