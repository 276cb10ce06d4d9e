#!/bin/sh
# bench/mqtt.sh — MQTT sink vs `mosquitto_pub -l`, same broker, same bytes, same QoS.
#
#   bench/mqtt.sh [BUILD_DIR] [COUNT]      (defaults: build, 50000)
#
# Starts a private Mosquitto (tests/infra/mosquitto.sh), then for payloads of
# ~500 B and ~5 KB at QoS 0 and 1 runs bench_mqtt (kb_sink_mqtt_ops, MQTT 5,
# max_inflight as given by KB_BENCH_INFLIGHT, default 1000; KB_BENCH_SINKS=N
# spreads the topics over N sinks, i.e. N paho clients in one process) and
# mosquitto_pub -l on the same envelope bytes. Prints messages/s, the CPU time
# (user+system) per message of each publisher, and the ratio.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
count=${2:-50000}
inflight=${KB_BENCH_INFLIGHT:-1000}
dir=$(mktemp -d "${TMPDIR:-/tmp}/kb-bench-mqtt.XXXXXX")
trap 'KB_MQTT_DIR=$dir/broker "$src/tests/infra/mosquitto.sh" stop; rm -rf "$dir"' EXIT
KB_MQTT_DIR=$dir/broker "$src/tests/infra/mosquitto.sh" start plain >"$dir/env"
uri=$(sed -n 's/^KB_MQTT_URI=//p' "$dir/env")
port=$(sed -n 's/^KB_MQTT_PORT=//p' "$dir/env")
echo "machine: $(nproc) cpu, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1); mosquitto $(mosquitto -h | sed -n 's/^mosquitto version //p'); load $(cut -d' ' -f1-3 /proc/loadavg)"
# cpu_us FILE: microseconds of CPU per message from /usr/bin/time's "user sys" line
cpu_us() { python3 -c "import sys; u, s = open(sys.argv[1]).read().split()[-2:]; print(round((float(u) + float(s)) * 1e6 / $count, 1))" "$1"; }
for size in 500 5000; do
    for qos in 0 1; do
        line=$(/usr/bin/time -f "%U %S" -o "$dir/cpu" "$build/bench/bench_mqtt" "$uri" "$count" "$size" "$qos" "$inflight" "$dir/lines" 2>/dev/null)
        echo "$line; cpu $(cpu_us "$dir/cpu") us/msg"
        ours=$(echo "$line" | sed -n 's/.*: \([0-9]*\) msg\/s.*/\1/p')
        t0=$(date +%s.%N)
        /usr/bin/time -f "%U %S" -o "$dir/cpu" mosquitto_pub -h 127.0.0.1 -p "$port" -V 5 -q "$qos" -t k8s/bench/pub -l <"$dir/lines"
        t1=$(date +%s.%N)
        theirs=$(python3 -c "print(round($count/($t1-$t0)))")
        echo "mosquitto_pub -l qos=$qos size=$size count=$count: $theirs msg/s; cpu $(cpu_us "$dir/cpu") us/msg; ratio kbridge/mosquitto_pub = $(python3 -c "print(round($ours/$theirs*100))") %"
    done
done
