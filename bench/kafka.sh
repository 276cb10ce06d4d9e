#!/usr/bin/env bash
# bench/kafka.sh — the Kafka sink vs `kcat -P` on the same bytes, same broker,
# same producer settings (the sink's defaults), in one run.
#
#   bench/kafka.sh [BUILD_DIR (default build)] [COUNT (default 100000)]
#
# Starts a private broker with tests/infra/kafka.sh (stopped again at exit),
# writes COUNT ~5 KB JSON envelopes as "key<TAB>value" lines, produces them
# with kcat into one topic and through the sink into another, and prints
# events/s and CPU µs/event for both, plus the sink's p50/p99
# produce→delivery-report latency and the ratio sink/kcat. Not a test.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
count=${2:-100000}
work=$(mktemp -d)
export KB_KAFKA_DIR=$work/kafka
trap '"$src/tests/infra/kafka.sh" clean >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
brokers=$("$src/tests/infra/kafka.sh" start | sed -n 's/^KB_KAFKA_BROKERS=//p')
"$build/bench/bench_kafka" --dump "$count" "$work/records.tsv"

# The sink's producer defaults (sinks/kafka.c), given to kcat as well.
settings=(-X enable.idempotence=true -X acks=all -X partitioner=murmur2_random
          -X queue.buffering.max.kbytes=65536 -X message.timeout.ms=0 -X linger.ms=5)
# Warm up kcat's topic the way the sink warms up its own (metadata, producer id).
head -n 1 "$work/records.tsv" | kcat -P -q -b "$brokers" -t bench.kcat -K $'\t' "${settings[@]}"

TIMEFORMAT='%R %U %S'
t=$( { time kcat -P -q -b "$brokers" -t bench.kcat -K $'\t' "${settings[@]}" -l "$work/records.tsv" >/dev/null; } 2>&1 | tail -n 1)
read -r wall user sys <<<"$t"
kcat_eps=$(python3 -c "print(round($count/$wall))")
kcat_cpu=$(python3 -c "print(round(($user+$sys)*1e6/$count, 2))")
echo "kcat  events=$count wall_s=$wall events_per_s=$kcat_eps cpu_us_per_event=$kcat_cpu"

line=$("$build/bench/bench_kafka" "$brokers" bench.sink "$count" 2>/dev/null)
echo "$line"
sink_eps=$(sed -n 's/.*events_per_s=\([0-9.]*\).*/\1/p' <<<"$line")
echo "ratio sink/kcat events_per_s=$(python3 -c "print(round($sink_eps/$kcat_eps, 2))")"
echo "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), Kafka $(sed -n 's/^KB_KAFKA_VERSION=//p' "$KB_KAFKA_DIR/kafka.env"), librdkafka $(pkg-config --modversion rdkafka)"
