#!/usr/bin/env bash
# tests/infra/prometheus.sh — Debian's Prometheus server on 127.0.0.1 for tests.
#
#   tests/infra/prometheus.sh start DIR CONFIG   start with CONFIG, data in DIR; print PORT=… and PID=…
#   tests/infra/prometheus.sh stop DIR           stop the one started in DIR (by its pid) and wait
#
# Design: the server listens on 127.0.0.1 on a port picked free by the
# kernel (bind to 0, read the number, release, start on it: retried if another
# process takes it first), keeps its TSDB in DIR and is stopped by the pid in
# DIR/prometheus.pid — never by name. start waits (bounded) for /-/ready.
# Exit codes: 0 ok; 1 failed (with the server's log tail on stderr).
set -euo pipefail
say() { echo "prometheus.sh: $*" >&2; }
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
ready() { # port → 0 when /-/ready answers 200
    python3 - "$1" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen("http://127.0.0.1:%s/-/ready" % sys.argv[1], timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

start() {
    local dir=$1 config=$2 port pid attempt i
    command -v prometheus >/dev/null || { say "prometheus not found: run tests/deps.sh"; exit 1; }
    mkdir -p "$dir/data"
    for attempt in 1 2 3; do
        port=$(free_port)
        prometheus --config.file="$config" --storage.tsdb.path="$dir/data" \
            --web.listen-address="127.0.0.1:$port" \
            --log.level=warn >"$dir/prometheus.log" 2>&1 &
        pid=$!
        echo "$pid" >"$dir/prometheus.pid"
        for ((i = 0; i < 150; i++)); do # 30 s
            if ! kill -0 "$pid" 2>/dev/null; then break; fi
            if ready "$port"; then
                echo "PORT=$port"
                echo "PID=$pid"
                return 0
            fi
            sleep 0.2
        done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        grep -q "address already in use" "$dir/prometheus.log" || break
    done
    say "prometheus did not become ready:"
    tail -20 "$dir/prometheus.log" >&2
    exit 1
}

stop() {
    local dir=$1 pid i
    [[ -f $dir/prometheus.pid ]] || return 0
    pid=$(cat "$dir/prometheus.pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$dir/prometheus.pid"
}

case ${1:-} in
start) [[ $# -eq 3 ]] || { say "usage: start DIR CONFIG"; exit 2; }; start "$2" "$3" ;;
stop) [[ $# -eq 2 ]] || { say "usage: stop DIR"; exit 2; }; stop "$2" ;;
*) sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
