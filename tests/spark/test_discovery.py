"""`format("odradek")` works in a Spark session that never called `register(spark)`:
installing odradek is enough (PySpark's lookup of `pyspark_*` modules with a
`DefaultSource`). A session of its own, in a separate process, since the test session
registers the source explicitly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.spark.conftest import produce
from tests.spark.pipeline_helpers import pipeline_env

SCRIPT = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .getOrCreate())
    df = (spark.read.format("odradek").option("kafka.bootstrap.servers", sys.argv[1])
          .option("subscribe", sys.argv[2]).load())
    print("values:", sorted(r.value.decode() for r in df.collect()))
    spark.stop()
""")


def test_format_odradek_is_found_without_register(broker, new_topic, tmp_path):
    topic = new_topic()
    produce(broker.bootstrap, topic, [{"value": b"a"}, {"value": b"b"}])
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), broker.bootstrap, topic],
                          capture_output=True, text=True, timeout=240, env=pipeline_env())
    assert done.returncode == 0, done.stderr[-4000:]
    assert "values: ['a', 'b']" in done.stdout


# Python started with this directory on PYTHONPATH cannot import numba (as if the
# [spark] extra were not installed): driver and workers both.
NO_NUMBA = textwrap.dedent("""
    import sys

    class _Missing:
        def find_spec(self, name, path=None, target=None):
            if name == "numba" or name.startswith("numba."):
                raise ImportError("No module named 'numba'", name="numba")

    sys.meta_path.insert(0, _Missing())
""")


def test_without_the_spark_extra_the_error_says_what_to_install(broker, new_topic,
                                                                 tmp_path):
    """pyspark installed but not numba: format("odradek") fails saying which package is
    missing and the command that installs it, not with DATA_SOURCE_NOT_FOUND."""
    topic = new_topic()
    produce(broker.bootstrap, topic, [{"value": b"a"}])
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_NUMBA)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = pipeline_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, str(script), broker.bootstrap, topic],
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode != 0
    assert "needs the Python package 'numba'" in done.stderr, done.stderr[-4000:]
    assert "pip install 'odradek[spark]'" in done.stderr
    assert "DATA_SOURCE_NOT_FOUND" not in done.stderr
