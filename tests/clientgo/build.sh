#!/usr/bin/env bash
# tests/clientgo/build.sh — build (or find cached) kbclientgo, the client-go
# program of the Kubernetes API tests and benchmark, and print its path.
#
# The module (go.mod, go.sum in git) pins client-go; dependencies come from
# the Go module proxy into Go's module cache. The binary lands in
# ${KB_CACHE_DIR:-$HOME/.cache/kbridge}/clientgo-<hash of the sources>/ and is
# reused until main.go, go.mod or go.sum change. Builds run under `nice`.
set -euo pipefail
export HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
SRC=$(cd "$(dirname "$0")" && pwd)
CACHE_DIR=${KB_CACHE_DIR:-$HOME/.cache/kbridge}
HASH=$(cat "$SRC/main.go" "$SRC/go.mod" "$SRC/go.sum" | sha256sum | cut -c1-16)
OUT=$CACHE_DIR/clientgo-$HASH
if [[ ! -x $OUT/kbclientgo ]]; then
    command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 1; }
    mkdir -p "$OUT"
    (cd "$SRC" && GOFLAGS=-mod=mod nice go build -trimpath -o "$OUT/kbclientgo.tmp" .) >&2
    mv "$OUT/kbclientgo.tmp" "$OUT/kbclientgo"
fi
echo "$OUT/kbclientgo"
