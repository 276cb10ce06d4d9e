#!/usr/bin/env bash
# The whole test suite, as CI runs it: install what is missing, build with
# ASan+UBSan and -Werror, then run every unit, integration and fuzz test with
# ctest. The last lines are ctest's summary. Usage: tests/run.sh [ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
tests/deps.sh
# The guard: every tool, library and runtime the suite uses comes from tests/deps.list.
tests/deps-check.sh
build=${KB_TEST_BUILD:-build-test}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DKB_SANITIZE=ON -DKB_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)" 2>&1 | grep -vE '^\[ *[0-9]+%\]' || true
cmake --build "$build" -j "$(nproc)" >/dev/null   # fail here if the build failed
# The real control plane (kube-apiserver + etcd from their Go modules) is
# built once and cached; building it here keeps that out of a test's time limit.
tests/infra/controlplane.sh build >/dev/null 2>&1 || echo "run.sh: control plane build failed; the 07xx tests will say why" >&2
# Likewise helm (Go module helm.sh/helm/v3) and prometheus-operator's CRDs for the chart test 0752.
tests/infra/helm.sh path >/dev/null 2>&1 || echo "run.sh: helm build failed; test 0752 will say why" >&2
tests/infra/prometheus-operator-crds.sh >/dev/null 2>&1 || echo "run.sh: prometheus-operator CRDs not fetched; test 0752 will say why" >&2
tests/clientgo/build.sh >/dev/null 2>&1 || echo "run.sh: the client-go program did not build; test 0602 will say why" >&2
# CI also runs the long tests (0707: several minutes of real watch timeouts and bookmarks).
[ "${CI:-}" = "true" ] && export KB_LONG_TESTS=${KB_LONG_TESTS:-1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build"
exec ctest --output-on-failure -j "$(nproc)" "$@"
