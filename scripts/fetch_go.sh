#!/usr/bin/env bash
# Builds the Go interop programs (tests/interop/go: franz-go, sarama, kafka-go) into
# .cache/go/bin, with their modules (from the Go module proxy, checked against go.sum)
# and Go's build cache under .cache/go, which git ignores. Quick when nothing changed: a
# stamp records the go.mod, go.sum and sources it built.
# tests/interop/test_go_clients.py runs .cache/go/bin/{franz,sarama,kafkago}.
set -euo pipefail
cd "$(dirname "$0")/.."

SRC=tests/interop/go
OUT=$PWD/.cache/go
STAMP=$OUT/.build-cksum
PROGRAMS=(franz sarama kafkago)
want=$(cd "$SRC" && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort |
  xargs cksum | cksum)
built=yes
for p in "${PROGRAMS[@]}"; do [ -x "$OUT/bin/$p" ] || built=no; done
if [ "$built" = yes ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "scripts/fetch_go.sh: needs Go (go 1.26+)" >&2; exit 1; }
echo "scripts/fetch_go.sh: building ${PROGRAMS[*]} from $SRC into $OUT/bin" >&2
# GOTOOLCHAIN=local: build with the installed Go, never fetch another toolchain.
# -modcacherw: the module cache stays deletable (rm -rf .cache) like every other cache.
export GOMODCACHE=$OUT/mod GOCACHE=$OUT/build GOTOOLCHAIN=local GOFLAGS=-modcacherw
mkdir -p "$OUT/bin"
(cd "$SRC" && go mod download && go build -trimpath -o "$OUT/bin/" \
  "${PROGRAMS[@]/#/./cmd/}")
echo "$want" >"$STAMP"
