#!/usr/bin/env bash
# Copies Kafka's JVM artifacts (jvm/pom.xml: kafka-clients, kafka-streams, kafka-tools,
# the kafka_2.13 broker) and their dependencies from Maven Central into .cache/jvm/lib,
# which git ignores. Quick when nothing changed: a stamp records the pom it copied for.
# Tests and benchmarks put .cache/jvm/lib/* on a java -cp (odradek.devcluster.jvm).
set -euo pipefail
cd "$(dirname "$0")/.."

LIB=$PWD/.cache/jvm/lib
STAMP=$PWD/.cache/jvm/.pom-cksum
want=$(cksum <jvm/pom.xml)
if [ -d "$LIB" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
command -v mvn >/dev/null 2>&1 || { echo "scripts/fetch_jvm.sh: needs Maven (mvn)" >&2; exit 1; }
echo "scripts/fetch_jvm.sh: copying Kafka's jars from Maven Central into $LIB" >&2
rm -rf "$LIB"
mkdir -p "$LIB"
# -B: no colours or progress bars in CI logs; the local repository stays Maven's own
# (~/.m2), so a second checkout on the machine copies without downloading.
mvn -B -q -f jvm/pom.xml dependency:copy-dependencies -DoutputDirectory="$LIB" \
  -DincludeScope=runtime
echo "$want" >"$STAMP"
