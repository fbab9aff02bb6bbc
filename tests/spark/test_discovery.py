"""`format("odradek")` works in a Spark session that never called `register(spark)`:
installing odradek is enough (PySpark's lookup of `pyspark_*` modules with a
`DefaultSource`). A session of its own, in a separate process, since the test session
registers the source explicitly."""

from __future__ import annotations

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
