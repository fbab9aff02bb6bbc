#!/usr/bin/env bash
# Installs everything the test suite needs into ./.venv, then runs the whole suite:
# lint (ruff), the layer rules (import-linter), the type checker (mypy) and pytest over
# every tier.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k recovery`).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'

# The interop tier's non-Python clients: kcat (Debian's, librdkafka 2.0.2) and kafkajs
# (tests/interop/js). Installed only when missing or out of date; quiet unless they fail.
fail() { echo "scripts/test.sh: $*" >&2; exit 1; }

# Runs a command quietly; if it fails, prints its output and stops the script.
quietly() {
  local log status=0
  log=$(mktemp)
  "$@" >"$log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    cat "$log" >&2
    rm -f "$log"
    fail "failed (exit code $status): $*"
  fi
  rm -f "$log"
}

# apt-get install as root: directly, else through sudo without a password prompt.
apt_install() {
  local sudo=()
  command -v apt-get >/dev/null 2>&1 ||
    fail "the tests need $*, and there is no apt-get here: install it yourself and rerun"
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      fail "the tests need $*: run as root, allow passwordless sudo, or" \
           "'apt-get install $*' yourself and rerun"
    fi
  fi
  echo "scripts/test.sh: installing $* (apt-get)" >&2
  quietly ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
  quietly ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "$@"
}

# Debian packages the tiers need, installed in one apt-get run when any is missing:
# kcat (the interop tier), Debian's ZooKeeper (the cluster tier runs a real one as a
# plain java process: tests/zookeeper.py), node and a compiler for node-gyp (kafkajs-lz4
# builds lz4), chromium (the console tier).
missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm g++ make)
# iptables: the fault tier's network partitions (tests/netcut.py; it runs as root).
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || [ -x /sbin/iptables ] ||
  missing+=(iptables)
# Chromium: the console tier's browser (tests/console drives it with Playwright).
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  apt_install "${missing[@]}"
fi

# npm ci when node_modules is missing or was installed from another package-lock.json
# (a stamp inside node_modules, which git ignores, records which one).
JS=tests/interop/js
if [ -f "$JS/package-lock.json" ]; then
  lock_sum=$(cksum <"$JS/package-lock.json")
  stamp=$JS/node_modules/.odradek-lock-cksum
  if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
    echo "scripts/test.sh: npm ci in $JS" >&2
    quietly npm ci --prefix "$JS" --no-audit --no-fund
    echo "$lock_sum" >"$stamp"
  fi
elif [ ! -d "$JS/node_modules" ]; then
  echo "scripts/test.sh: npm install in $JS (no package-lock.json)" >&2
  quietly npm install --prefix "$JS" --no-audit --no-fund
fi

# Kafka's own JVM artifacts (the Java client, Streams, Kafka's tools, the Apache Kafka
# broker: jvm/pom.xml) for the interop and oracle tiers, Kafka Connect and MirrorMaker 2
# (jvm/connect/pom.xml) for the connect tier and Spark's own Kafka connector
# (format("kafka"), jvm/spark/pom.xml) for the spark tier, copied by Maven into .cache.
quietly bash scripts/fetch_jvm.sh
# The Go clients' interop programs (franz-go, sarama, kafka-go: tests/interop/go), built
# with their modules into .cache/go.
quietly bash scripts/fetch_go.sh

.venv/bin/ruff check src tests bench
.venv/bin/lint-imports --no-cache
.venv/bin/mypy

# --durations: the slowest tests at the end of the output, so CI's log shows where its
# time goes (it should stay under 40 minutes on a 2-core machine).
# Exit code 5 (no tests collected) is a failure here.
check() {
  if [ "$2" -eq 5 ]; then
    echo "pytest ($1) collected no tests: that is a failure here" >&2
    return 1
  fi
  return "$2"
}

if [ $# -gt 0 ]; then
  rc=0
  .venv/bin/python -m pytest --durations=25 "$@" || rc=$?
  check "$*" "$rc" || exit $?
  exit 0
fi

# The whole suite (CI): two pytest processes side by side. The second runs the spark
# tier (`-m spark`: tests/spark and the fault tier's Spark tests, a JVM and Python
# workers busy computing), then the connect tier (`-m connect`: Kafka Connect workers
# and MirrorMaker 2, JVMs of their own); the first runs everything else
# (`-m "not spark and not connect"`, mostly waiting on sockets, timeouts and other
# processes), which on 2 cores takes minutes off the sequential run. The two share
# nothing: each starts its own brokers, ZooKeepers, Spark and Connect on free ports and
# its own temporary directories. The second process's output goes to a file, printed
# after the rest (the rest prints as it runs); no cache provider there, so that the two
# don't both write .pytest_cache.
side_log=$(mktemp)
(
  side_rc=0
  .venv/bin/python -m pytest -m spark -p no:cacheprovider --durations=25 || side_rc=$?
  echo "scripts/test.sh: pytest -m spark exited with $side_rc"
  connect_rc=0
  .venv/bin/python -m pytest -m "connect and not spark" -p no:cacheprovider \
    --durations=10 || connect_rc=$?
  echo "scripts/test.sh: pytest -m connect exited with $connect_rc"
  check "-m spark" "$side_rc" && check "-m connect" "$connect_rc"
) >"$side_log" 2>&1 &
side_pid=$!
# Stopped with the script if the script is stopped first (the subshell's pytest first).
trap 'pkill -TERM -P "$side_pid" 2>/dev/null; kill "$side_pid" 2>/dev/null || true
      rm -f "$side_log"' EXIT
rest_rc=0
.venv/bin/python -m pytest -m "not spark and not connect" --durations=25 || rest_rc=$?
side_status=0
wait "$side_pid" || side_status=$?
trap 'rm -f "$side_log"' EXIT
echo
echo "============ the spark and connect tiers (pytest -m spark, then -m connect, beside the rest) ============"
cat "$side_log"
echo "scripts/test.sh: pytest -m 'not spark and not connect' exited with $rest_rc"
rc=0
check "-m 'not spark and not connect'" "$rest_rc" || rc=$?
[ "$rc" -ne 0 ] || rc=$side_status
exit "$rc"
