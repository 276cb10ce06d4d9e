#!/bin/sh
# bench/mqtt.sh — the MQTT sink over each client library vs `mosquitto_pub -l`, same broker, same bytes.
#
#   bench/mqtt.sh [BUILD_DIR] [COUNT]      (defaults: build, 50000)
#
# Starts a private Mosquitto (tests/infra/mosquitto.sh; its max_inflight_messages,
# i.e. the Receive Maximum it announces, is KB_BENCH_BROKER_INFLIGHT, default 256),
# then for envelopes of ~500 B and ~5 KB at QoS 0, 1 and 2 runs, one after the
# other: bench_mqtt over paho, bench_mqtt over libmosquitto (kb_sink_mqtt_ops,
# MQTT 5, max_inflight KB_BENCH_INFLIGHT, default 256) and mosquitto_pub -l -V 5
# on the same envelope bytes. Prints one table: messages/s, CPU time
# (user+system) per message of each publisher, and each client's ratio to
# mosquitto_pub, each the best of KB_BENCH_REPEAT (default 3) interleaved runs
# (best msg/s, lowest CPU: the box may be shared). KB_BENCH_CLIENTS="paho mosquitto" chooses the clients,
# KB_BENCH_QOS="0 1 2" and KB_BENCH_SIZES="500 5000" the cases.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
count=${2:-50000}
inflight=${KB_BENCH_INFLIGHT:-256}
clients=${KB_BENCH_CLIENTS:-paho mosquitto}
repeat=${KB_BENCH_REPEAT:-3}
dir=$(mktemp -d "${TMPDIR:-/tmp}/kb-bench-mqtt.XXXXXX")
trap 'KB_MQTT_DIR=$dir/broker "$src/tests/infra/mosquitto.sh" stop; rm -rf "$dir"' EXIT
KB_MQTT_DIR=$dir/broker KB_MQTT_MAX_INFLIGHT=${KB_BENCH_BROKER_INFLIGHT:-256} \
    "$src/tests/infra/mosquitto.sh" start plain >"$dir/env"
uri=$(sed -n 's/^KB_MQTT_URI=//p' "$dir/env")
port=$(sed -n 's/^KB_MQTT_PORT=//p' "$dir/env")
echo "machine: $(nproc) cpu, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1); mosquitto $(mosquitto -h | sed -n 's/^mosquitto version //p'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "count=$count per case, best of $repeat interleaved runs; sink max_inflight=$inflight; broker max_inflight_messages=${KB_BENCH_BROKER_INFLIGHT:-256}"
# cpu_us FILE: microseconds of CPU per message from /usr/bin/time's "user sys" line
cpu_us() { python3 -c "import sys; u, s = open(sys.argv[1]).read().split()[-2:]; print(round((float(u) + float(s)) * 1e6 / $count, 1))" "$1"; }
rate() { sed -n 's/.*: \([0-9]*\) msg\/s.*/\1/p'; }
# best(FILE): the best msg/s and the lowest CPU of the repeats, "rate:cpu"
best() { python3 -c "import sys; r = [l.split(':') for l in open(sys.argv[1]).read().split()]; print('%d:%s' % (max(int(x[0]) for x in r), min(float(x[1]) for x in r)))" "$1"; }
printf '%-6s %-4s %-22s %10s %10s %8s\n' size qos publisher msg/s cpu_us/msg ratio
for size in ${KB_BENCH_SIZES:-500 5000}; do
    for qos in ${KB_BENCH_QOS:-0 1 2}; do
        rm -f "$dir/lines" "$dir"/r.*
        rep=0
        while [ "$rep" -lt "$repeat" ]; do # interleaved, so a burst of load on the box hits every publisher alike
            for client in $clients; do
                line=$(KB_BENCH_CLIENT=$client /usr/bin/time -f "%U %S" -o "$dir/cpu" "$build/bench/bench_mqtt" "$uri" \
                    "$count" "$size" "$qos" "$inflight" "$dir/lines" "kb-bench-$client" 2>"$dir/err") \
                    || { echo "bench_mqtt ($client) failed: $(tail -3 "$dir/err")"; exit 1; }
                echo "$(echo "$line" | rate):$(cpu_us "$dir/cpu")" >>"$dir/r.$client"
            done
            t0=$(date +%s.%N)
            /usr/bin/time -f "%U %S" -o "$dir/cpu" mosquitto_pub -h 127.0.0.1 -p "$port" -V 5 -q "$qos" -t k8s/bench/pub -l <"$dir/lines"
            t1=$(date +%s.%N)
            echo "$(python3 -c "print(round($count/($t1-$t0)))"):$(cpu_us "$dir/cpu")" >>"$dir/r.pub"
            rep=$((rep + 1))
        done
        bytes=$(($(head -1 "$dir/lines" | wc -c) - 1))
        pub=$(best "$dir/r.pub"); theirs=${pub%%:*}
        for client in $clients; do
            r=$(best "$dir/r.$client"); ours=${r%%:*}
            printf '%-6s %-4s %-22s %10s %10s %7s%%\n' "$bytes" "$qos" "kbridge/$client" "$ours" "${r#*:}" \
                "$(python3 -c "print(round($ours/$theirs*100))")"
        done
        printf '%-6s %-4s %-22s %10s %10s %8s\n' "$bytes" "$qos" "mosquitto_pub -l" "$theirs" "${pub#*:}" "100%"
    done
done
