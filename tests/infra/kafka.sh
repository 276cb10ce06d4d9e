#!/usr/bin/env bash
# tests/infra/kafka.sh — a private single-node Apache Kafka (KRaft) for tests.
#
#   tests/infra/kafka.sh start    fetch (cached), format, start, wait until it answers
#   tests/infra/kafka.sh stop     stop by pid and wait for the process to go
#   tests/infra/kafka.sh status   exit 0 if our broker runs and answers, 1 if not
#   tests/infra/kafka.sh env      print KB_KAFKA_BROKERS=… (and friends) of the running broker
#   tests/infra/kafka.sh clean    stop, then delete the data directory
#
# Design: Kafka comes from Maven Central (org.apache.kafka:kafka_2.13 and its
# runtime dependencies, copied by `mvn dependency:copy-dependencies` from a
# generated pom) into ${KB_CACHE_DIR:-$HOME/.cache/kbridge}/kafka-<version>,
# so only the first run downloads. The broker runs as one KRaft node
# (broker+controller) on 127.0.0.1 only, on ports 19092/19093 or free ones
# chosen here, with its data in ${KB_KAFKA_DIR}. Every command is idempotent:
# `start` on a running broker just prints its env; a restart after `stop`
# keeps the data and the ports (tests stop and restart the broker mid-stream).
#
# Exit codes: 0 ok; 1 failed; 3 Kafka cannot be had on this machine (no java
# or no mvn and nothing cached) — tests may skip on 3, never on 1.
set -euo pipefail

VERSION=${KB_KAFKA_VERSION:-4.0.0}
SLF4J_VERSION=2.0.17
CACHE_DIR=${KB_CACHE_DIR:-$HOME/.cache/kbridge}
RUN_DIR=${KB_KAFKA_DIR:-${TMPDIR:-/tmp}/kbridge-kafka-$(id -u)}
LIB_DIR=$CACHE_DIR/kafka-$VERSION/lib
PID_FILE=$RUN_DIR/kafka.pid
ENV_FILE=$RUN_DIR/kafka.env
LOG_FILE=$RUN_DIR/kafka.log
PROPS=$RUN_DIR/server.properties
START_DEADLINE=${KB_KAFKA_START_TIMEOUT:-120} # seconds

say() { echo "kafka.sh: $*" >&2; }

running_pid() {
    [[ -f $PID_FILE ]] || return 1
    local pid
    pid=$(cat "$PID_FILE")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
    # The pid must still be our java, not a recycled number.
    grep -q "kafka.Kafka" "/proc/$pid/cmdline" 2>/dev/null || return 1
    echo "$pid"
}

brokers() { sed -n 's/^KB_KAFKA_BROKERS=//p' "$ENV_FILE" 2>/dev/null; }

ensure_kcat() {
    command -v kcat >/dev/null && return 0
    say "kcat missing; installing it with apt-get"
    if [[ $(id -u) -eq 0 ]]; then
        (apt-get install -y -q kcat >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q kcat >/dev/null 2>&1; }) || true
    fi
    command -v kcat >/dev/null || { say "kcat unavailable"; exit 3; }
}

answers() { # broker list → 0 if metadata comes back
    kcat -L -b "$1" -m 3 -X socket.timeout.ms=2000 >/dev/null 2>&1
}

fetch() {
    [[ -f $LIB_DIR/.complete ]] && return 0
    command -v java >/dev/null || { say "java not found: Kafka cannot run here"; exit 3; }
    command -v mvn >/dev/null || { say "mvn not found and kafka-$VERSION not cached"; exit 3; }
    local pomdir
    pomdir=$(mktemp -d)
    # slf4j-simple gives the broker a readable log on stderr (kafka_2.13 brings no binding).
    cat >"$pomdir/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kbridge.test</groupId><artifactId>kafka-fetch</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$SLF4J_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>$SLF4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
    say "fetching org.apache.kafka:kafka_2.13:$VERSION into $LIB_DIR"
    rm -rf "$LIB_DIR"
    mkdir -p "$LIB_DIR"
    if ! mvn -B -q -f "$pomdir/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$LIB_DIR" -DincludeScope=runtime >"$pomdir/mvn.log" 2>&1; then
        tail -n 30 "$pomdir/mvn.log" >&2
        rm -rf "$pomdir"
        say "maven could not fetch Kafka $VERSION"
        exit 1
    fi
    rm -rf "$pomdir"
    touch "$LIB_DIR/.complete"
}

port_free() { # port → 0 if nothing listens on 127.0.0.1:port
    python3 - "$1" <<'EOF'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
EOF
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

pick_ports() { # keeps the ports of an earlier start so a restart looks the same to clients
    if [[ -f $PROPS ]]; then
        BPORT=$(sed -n 's/^listeners=PLAINTEXT:\/\/127.0.0.1:\([0-9]*\),.*/\1/p' "$PROPS")
        CPORT=$(sed -n 's/^controller.quorum.voters=1@127.0.0.1:\([0-9]*\)$/\1/p' "$PROPS")
        [[ -n $BPORT && -n $CPORT ]] && return 0
    fi
    BPORT=${KB_KAFKA_PORT:-19092}
    CPORT=${KB_KAFKA_CONTROLLER_PORT:-19093}
    port_free "$BPORT" || BPORT=$(free_port)
    port_free "$CPORT" || CPORT=$(free_port)
}

write_props() {
    cat >"$PROPS" <<EOF
# Generated by tests/infra/kafka.sh: one KRaft node, loopback only, for tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$BPORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$BPORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$RUN_DIR/data
num.partitions=3
auto.create.topics.enable=true
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.cleaner.backoff.ms=1000
EOF
}

cmd_start() {
    local pid
    if pid=$(running_pid) && answers "$(brokers)"; then
        cat "$ENV_FILE"
        return 0
    fi
    ensure_kcat
    fetch
    mkdir -p "$RUN_DIR"
    pick_ports
    write_props
    local cp="$LIB_DIR/*"
    if [[ ! -f $RUN_DIR/data/meta.properties ]]; then
        local cluster_id
        # URL-safe base64 of a random UUID, as Kafka's own; never one that starts with "-", which the
        # storage tool's argument parser takes for an option (1 run in 64 failed to format).
        cluster_id=$(python3 -c 'import base64,uuid
while True:
    c = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not c.startswith("-"):
        break
print(c)')
        java -cp "$cp" kafka.tools.StorageTool format -t "$cluster_id" -c "$PROPS" >"$RUN_DIR/format.log" 2>&1 || {
            cat "$RUN_DIR/format.log" >&2
            say "formatting storage failed"
            exit 1
        }
    fi
    say "starting Kafka $VERSION on 127.0.0.1:$BPORT (log: $LOG_FILE)"
    # setsid: the broker outlives this script and the test that called it.
    setsid java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
        -Dorg.slf4j.simpleLogger.defaultLogLevel=info \
        -Dorg.slf4j.simpleLogger.showDateTime=true \
        -cp "$cp" kafka.Kafka "$PROPS" >>"$LOG_FILE" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PID_FILE"
    {
        echo "KB_KAFKA_BROKERS=127.0.0.1:$BPORT"
        echo "KB_KAFKA_PID=$pid"
        echo "KB_KAFKA_LOG=$LOG_FILE"
        echo "KB_KAFKA_VERSION=$VERSION"
    } >"$ENV_FILE"
    local deadline=$((SECONDS + START_DEADLINE))
    until answers "127.0.0.1:$BPORT"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 40 "$LOG_FILE" >&2
            say "Kafka exited during start-up"
            exit 1
        fi
        if ((SECONDS >= deadline)); then
            tail -n 40 "$LOG_FILE" >&2
            say "Kafka did not answer within ${START_DEADLINE}s"
            cmd_stop
            exit 1
        fi
        sleep 0.5
    done
    cat "$ENV_FILE"
}

cmd_stop() {
    local pid
    pid=$(running_pid) || { rm -f "$PID_FILE"; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 60))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            say "Kafka (pid $pid) ignored SIGTERM for 60s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        sleep 0.2
    done
    rm -f "$PID_FILE"
}

cmd_status() {
    if running_pid >/dev/null && answers "$(brokers)"; then
        echo "running: $(brokers)"
        return 0
    fi
    echo "not running"
    return 1
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env)
    running_pid >/dev/null || { say "not running"; exit 1; }
    cat "$ENV_FILE"
    ;;
clean)
    cmd_stop
    rm -rf "$RUN_DIR"
    ;;
*)
    echo "usage: $0 start|stop|status|env|clean" >&2
    exit 2
    ;;
esac
