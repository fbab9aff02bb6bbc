#!/usr/bin/env bash
# Copies Spark's own Kafka connector (jvm/spark/pom.xml: spark-sql-kafka-0-10_2.13 at
# pyspark's version) and the jars it needs that pyspark/jars lacks (kafka-clients,
# spark-token-provider-kafka-0-10, commons-pool2) from Maven Central into
# .cache/spark-kafka/lib, which git ignores. Quick when nothing changed: a stamp records
# the pom it copied for. tests/spark/test_kafka_connector.py gives a SparkSession these
# files as spark.jars.
set -euo pipefail
cd "$(dirname "$0")/.."

LIB=$PWD/.cache/spark-kafka/lib
STAMP=$PWD/.cache/spark-kafka/.pom-cksum
want=$(cksum <jvm/spark/pom.xml)
if [ -d "$LIB" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
command -v mvn >/dev/null 2>&1 || { echo "scripts/fetch_spark_kafka.sh: needs Maven (mvn)" >&2; exit 1; }
echo "scripts/fetch_spark_kafka.sh: copying Spark's Kafka connector into $LIB" >&2
rm -rf "$LIB"
mkdir -p "$LIB"
# -B: no colours or progress bars in CI logs; the local repository stays Maven's own (~/.m2).
mvn -B -q -f jvm/spark/pom.xml dependency:copy-dependencies -DoutputDirectory="$LIB" \
  -DincludeScope=runtime
echo "$want" >"$STAMP"
