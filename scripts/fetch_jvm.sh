#!/usr/bin/env bash
# Copies Kafka's JVM artifacts and their dependencies from Maven Central into .cache
# (which git ignores), one classpath directory per pom:
#   jvm/pom.xml         -> .cache/jvm/lib      kafka-clients, kafka-streams, kafka-tools and
#                                              the kafka_2.13 broker (4.4.0)
#   jvm/connect/pom.xml -> .cache/connect/lib  Kafka Connect and MirrorMaker 2 (4.3.1)
#   jvm/spark/pom.xml   -> .cache/spark-kafka/lib  Spark's own Kafka connector
#                          (spark-sql-kafka-0-10_2.13 at pyspark's version) and the jars
#                          it needs that pyspark/jars lacks (kafka-clients,
#                          spark-token-provider-kafka-0-10, commons-pool2): the spark
#                          tier gives a SparkSession these files as spark.jars
# Quick when nothing changed: a stamp beside each directory records the pom it copied for.
# Tests and benchmarks put a directory's jars on a java -cp (odradek.devcluster.jvm).
set -euo pipefail
cd "$(dirname "$0")/.."

copy() {  # copy POM DIRECTORY
  local pom=$1 lib=$PWD/.cache/$2/lib stamp=$PWD/.cache/$2/.pom-cksum want
  want=$(cksum <"$pom")
  if [ -d "$lib" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || { echo "scripts/fetch_jvm.sh: needs Maven (mvn)" >&2; exit 1; }
  echo "scripts/fetch_jvm.sh: copying $pom's jars from Maven Central into $lib" >&2
  rm -rf "$lib"
  mkdir -p "$lib"
  # -B: no colours or progress bars in CI logs; the local repository stays Maven's own
  # (~/.m2), so a second checkout on the machine copies without downloading.
  mvn -B -q -f "$pom" dependency:copy-dependencies -DoutputDirectory="$lib" \
    -DincludeScope=runtime
  echo "$want" >"$stamp"
}

copy jvm/pom.xml jvm
copy jvm/connect/pom.xml connect
copy jvm/spark/pom.xml spark-kafka
