#!/usr/bin/env bash
# The test suite, as CI runs it: install what is missing, build with ASan+UBSan
# and -Werror, then run the tests with ctest. The last lines are ctest's summary.
#
# Usage: tests/run.sh [--quick] [--under-load] [ctest args]
#   (none)        every unit, simulation, integration and fuzz test (what CI runs)
#   --quick       the inner loop: unit tests, the simulation, and a smoke run of
#                 each sink against its real broker (ctest label "quick"); builds
#                 no control plane, helm or client-go program
#   --under-load  a busy loop per core at normal priority runs beside the tests,
#                 started and stopped by pid: the suite must not depend on an idle
#                 machine (CI shares its cores with other work)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0 load=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --under-load) load=1 ;;
    *) break ;;
  esac
  shift
done
tests/deps.sh
# The guard: every tool, library and runtime the suite uses comes from tests/deps.list.
tests/deps-check.sh
build=${KB_TEST_BUILD:-build-test}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DKB_SANITIZE=ON -DKB_WERROR=ON >/dev/null
cmake --build "$build" -j "$(nproc)" 2>&1 | grep -vE '^\[ *[0-9]+%\]' || true
cmake --build "$build" -j "$(nproc)" >/dev/null   # fail here if the build failed
if [ $quick = 0 ]; then
  # The real control plane (kube-apiserver + etcd from their Go modules) is
  # built once and cached; building it here keeps that out of a test's time limit.
  tests/infra/controlplane.sh build >/dev/null 2>&1 || echo "run.sh: control plane build failed; the 07xx tests will say why" >&2
  # Likewise helm (Go module helm.sh/helm/v3) and prometheus-operator's CRDs for the chart test 0752.
  tests/infra/helm.sh path >/dev/null 2>&1 || echo "run.sh: helm build failed; test 0752 will say why" >&2
  tests/infra/prometheus-operator-crds.sh >/dev/null 2>&1 || echo "run.sh: prometheus-operator CRDs not fetched; test 0752 will say why" >&2
  tests/clientgo/build.sh >/dev/null 2>&1 || echo "run.sh: the client-go program did not build; test 0602 will say why" >&2
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
if [ $load = 1 ]; then
  for _ in $(seq "$(nproc)"); do
    # Bounded like every loop here: it ends by itself after 3 hours if nothing stops it.
    timeout 10800 sh -c 'while :; do :; done' &
    hogs+=($!)
  done
  echo "run.sh: under load: a busy loop per core beside the tests (pids ${hogs[*]})" >&2
fi
labels=()
[ $quick = 1 ] && labels=(-L quick)
cd "$build"
# Not exec: the hogs are stopped by pid when ctest returns; ctest's summary stays last.
rc=0
# Two tests per core: most of a test's time is spent waiting on a server (a test that
# starts Kafka or the control plane counts as two, tests/CMakeLists.txt).
ctest --output-on-failure -j "${KB_TEST_JOBS:-$(( $(nproc) * 2 ))}" "${labels[@]}" "$@" || rc=$?
exit $rc
