"""Spark's own Kafka connector (`format("kafka")`, spark-sql-kafka-0-10 at pyspark's
version) for the spark tier: the jars scripts/fetch_jvm.sh copies into
.cache/spark-kafka/lib (from jvm/spark/pom.xml), which the tier's SparkSession gets as
`spark.jars` when it is created (tests/spark/conftest.py).

Tests that need the connector skip with a clear reason when the jars are missing and the
run is not CI (``bash scripts/test.sh`` fetches them first; CI=true makes a missing jar a
failure, as tests/jvm.py's require_jars does).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyspark
import pytest

REPO = Path(__file__).resolve().parent.parent.parent
LIB = REPO / ".cache" / "spark-kafka" / "lib"


def jars() -> list[Path]:
    """The connector's jars, if they were fetched for this pyspark's version (else none:
    a connector of another Spark version would fail in confusing ways)."""
    if not any(LIB.glob(f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar")):
        return []
    return sorted(LIB.glob("*.jar"))


def require_connector() -> None:
    """Skip (locally) or fail (CI) when the connector's jars are not there."""
    if jars():
        return
    message = (f"Spark's Kafka connector {pyspark.__version__} is not in {LIB}: "
               f"run bash scripts/fetch_jvm.sh")
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
