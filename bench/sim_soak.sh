#!/usr/bin/env bash
# bench/sim_soak.sh — run the core's deterministic simulation for a while and
# print histories/s. Usage: bench/sim_soak.sh [SECONDS] [FIRST_SEED] [STEPS]
# (defaults 600, a seed from the clock, 300). A failure prints its seed and
# the command that replays it. Builds build/tests/kb_sim if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
first=${2:-$(date +%s)}
steps=${3:-300}
[ -x build/tests/kb_sim ] || { cmake -S . -B build >/dev/null && cmake --build build -j "$(nproc)" --target kb_sim >/dev/null; }
echo "sim_soak: ${seconds}s from seed $first, $steps steps a history, on $(nproc) core(s)"
exec build/tests/kb_sim --seconds "$seconds" --first "$first" --steps "$steps"
