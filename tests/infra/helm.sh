#!/usr/bin/env bash
# tests/infra/helm.sh — the helm binary the chart tests use, built from its Go module.
#
#   tests/infra/helm.sh path     build (or find cached) helm; print its path
#   tests/infra/helm.sh ARGS...  build if needed, then run `helm ARGS...`
#
# Design: Debian 12 has no helm package, so helm comes from the Go module
# helm.sh/helm/v3 at a pinned release, `go install`ed with GOBIN into
# ${KB_CACHE_DIR:-$HOME/.cache/kbridge}/helm-<version>/bin and reused by every
# later run (like tests/infra/controlplane.sh). The build runs under `nice`
# (the machine is shared) and under a lock, so parallel tests build it once.
# helm never talks to a cluster or a repository in the tests: its caches and
# config live in a per-call temporary HOME-like directory set by the caller
# (HELM_CACHE_HOME/HELM_CONFIG_HOME/HELM_DATA_HOME), or under the cache here.
set -euo pipefail
export HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
HELM_VERSION=${KB_HELM_VERSION:-v3.21.4}
CACHE_DIR=${KB_CACHE_DIR:-$HOME/.cache/kbridge}
DIR=$CACHE_DIR/helm-$HELM_VERSION
BIN=$DIR/bin/helm
say() { echo "helm.sh: $*" >&2; }

build() {
    [[ -x $BIN ]] && return 0
    command -v go >/dev/null || { say "go not found: cannot build helm"; exit 1; }
    mkdir -p "$DIR/bin"
    exec 9>"$DIR/.build.lock"
    flock 9
    [[ -x $BIN ]] && return 0
    say "building helm $HELM_VERSION into $DIR/bin (first run only; log: $DIR/build.log)"
    if ! GOBIN=$DIR/bin GOFLAGS=-mod=mod CGO_ENABLED=0 nice go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
            >"$DIR/build.log" 2>&1; then
        say "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed:"
        tail -20 "$DIR/build.log" >&2
        exit 1
    fi
    "$BIN" version --short >&2
}

build
export HELM_CACHE_HOME=${HELM_CACHE_HOME:-$DIR/home/cache}
export HELM_CONFIG_HOME=${HELM_CONFIG_HOME:-$DIR/home/config}
export HELM_DATA_HOME=${HELM_DATA_HOME:-$DIR/home/data}
if [[ ${1:-} == path ]]; then
    echo "$BIN"
    exit 0
fi
exec "$BIN" "$@"
