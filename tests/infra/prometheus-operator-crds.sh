#!/usr/bin/env bash
# tests/infra/prometheus-operator-crds.sh — print the paths of prometheus-operator's
# ServiceMonitor and PrometheusRule CustomResourceDefinitions, for tests that
# apply the Helm chart's monitoring objects to a real API server.
#
# Design: the CRDs ship in the Go module github.com/prometheus-operator/
# prometheus-operator (example/prometheus-operator-crd/), so `go mod download`
# from the module proxy fetches them at a pinned release into Go's module
# cache, where every later run finds them. Nothing is copied into this tree.
set -euo pipefail
export HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
VERSION=${KB_PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
MOD=github.com/prometheus-operator/prometheus-operator
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
dir=$(GOFLAGS=-mod=mod nice go mod download -json "$MOD@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
for crd in servicemonitors prometheusrules; do
    f=$dir/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml
    [[ -f $f ]] || { echo "prometheus-operator-crds.sh: $f missing in $MOD@$VERSION" >&2; exit 1; }
    echo "$f"
done
