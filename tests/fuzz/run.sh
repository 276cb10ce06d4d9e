#!/usr/bin/env bash
# Build one libFuzzer target with clang and run it for a bounded time over its
# seed corpus. Usage: tests/fuzz/run.sh TARGET SECONDS
# Targets and the sources each needs are listed below; the build goes to
# $KB_BUILD_DIR/fuzz. A finding fails the test and leaves the crash file there.
set -euo pipefail
target=$1 secs=${2:-20}
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${KB_BUILD_DIR:-$src/build}/fuzz
mkdir -p "$out"
common=("$src"/common/*.c)
case $target in
  config)      srcs=("$src"/config/*.c); libs=(-lconfig) ;;
  watch_frame|list|object)
               srcs=("$src"/informer/json.c "$src"/informer/decode.c); libs=(-ljansson) ;;
  fieldsel)    srcs=("$src"/informer/json.c); libs=() ;;  # common/fieldsel.c is in common
  selector|template) srcs=(); libs=() ;;
  ktable_crd)  srcs=("$src"/bridge/ktable.c "$src"/bridge/ktable_kinds.c "$src"/bridge/ktable_crd.c)
               libs=(-ljansson -lm) ;;
  *) echo "unknown fuzz target $target" >&2; exit 2 ;;
esac
bin=$out/fuzz_$target
clang -g -O1 -std=c11 -D_GNU_SOURCE -DKB_VERSION='"fuzz"' -I"$src" -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined "$src/tests/fuzz/fuzz_$target.c" "${srcs[@]}" "${common[@]}" "${libs[@]}" -lpthread -o "$bin"
corpus=$out/corpus-$target
mkdir -p "$corpus"
seeds=$src/tests/fuzz/corpus/$target
[ -d "$seeds" ] || seeds=$src/tests/fuzz/corpus/${target%_frame}
cd "$out"
"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$corpus" "$seeds" 2>&1 | tail -n 12
