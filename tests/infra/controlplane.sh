#!/usr/bin/env bash
# tests/infra/controlplane.sh — a private, real Kubernetes control plane for tests:
# kube-apiserver and etcd built from their Go modules, on 127.0.0.1 only.
#
#   tests/infra/controlplane.sh build    build (or find cached) kube-apiserver, etcd, etcdctl
#   tests/infra/controlplane.sh start    build, make certificates, start etcd + kube-apiserver, wait for /readyz
#   tests/infra/controlplane.sh stop     stop both by pid and wait until they are gone
#   tests/infra/controlplane.sh restart-apiserver   stop and start kube-apiserver alone (same etcd data)
#   tests/infra/controlplane.sh status   exit 0 if our API server runs and answers /readyz
#   tests/infra/controlplane.sh env      print the env file of the running control plane (KEY=value lines)
#   tests/infra/controlplane.sh clean    stop, then delete the run directory (data, certificates)
#
# Design: kube-apiserver comes from the Go module k8s.io/kubernetes at a
# pinned release. That module's go.mod replaces its staging modules (k8s.io/api,
# k8s.io/client-go, …) with ./staging paths, which a consumer does not see, so
# a generated module requires k8s.io/kubernetes and replaces each staging
# module with its own published tag v0.<minor>.<patch>. etcd and etcdctl come
# from go.etcd.io/etcd at the version the API server itself depends on, in a
# second module so etcdctl's dependencies cannot move the API server's.
# Binaries land in ${KB_CACHE_DIR:-$HOME/.cache/kbridge}/controlplane-<version>/bin
# and are reused by every later run; the Go module and build caches make even
# a rebuild quick. Builds run under `nice` (the machine is shared).
#
# start generates, with openssl, a CA, a serving certificate for 127.0.0.1, an
# admin client certificate (O=system:masters), a client certificate for the
# unprivileged user "kb-client", and a service-account key pair. The API server
# authenticates with --token-auth-file (an admin token and a "kb-limited"
# token with no rights until a test grants some) and client certificates,
# authorizes with Node,RBAC, and writes a kubeconfig for the admin token.
# Every start gets fresh etcd data; a second start while running only prints
# the env. Exit codes: 0 ok; 1 failed (build, start); never "skip".
set -euo pipefail

# Go's caches and ours hang off $HOME; a CI environment without it still finds them.
export HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
K8S_VERSION=${KB_K8S_VERSION:-v1.36.3}
ETCD_VERSION=${KB_ETCD_VERSION:-v3.6.8}   # what k8s.io/kubernetes $K8S_VERSION requires
ETCD_QUOTA=${KB_ETCD_QUOTA_BYTES:-2147483648}  # etcd's backend quota; bench/million.py --apiserver of a few hundred thousand Pods needs more
CACHE_DIR=${KB_CACHE_DIR:-$HOME/.cache/kbridge}
CP_DIR=$CACHE_DIR/controlplane-$K8S_VERSION
BIN_DIR=$CP_DIR/bin
RUN_DIR=${KB_CONTROLPLANE_DIR:-${TMPDIR:-/tmp}/kbridge-controlplane-$(id -u)}
ENV_FILE=$RUN_DIR/controlplane.env
START_DEADLINE=${KB_CONTROLPLANE_START_TIMEOUT:-180} # seconds
export GOFLAGS=-mod=mod

say() { echo "controlplane.sh: $*" >&2; }

staging_minor() { # v1.36.3 → v0.36.3
    echo "v0.${K8S_VERSION#v1.}"
}

# Module with k8s.io/kubernetes and every staging replace, from its own go.mod.
write_apiserver_module() {
    local dir=$1 kmod
    kmod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
        sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    [[ -f $kmod ]] || { say "cannot download k8s.io/kubernetes@$K8S_VERSION"; return 1; }
    {
        echo "module kbridge.test/apiserver"
        echo
        grep -E '^go [0-9.]+$' "$kmod"
        grep -E '^godebug ' "$kmod" || true
        echo
        echo "require k8s.io/kubernetes $K8S_VERSION"
        echo
        echo "replace ("
        sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$kmod" |
            while read -r m; do echo "	$m => $m $(staging_minor)"; done
        echo ")"
    } >"$dir/go.mod"
}

build() {
    if [[ -x $BIN_DIR/kube-apiserver && -x $BIN_DIR/etcd && -x $BIN_DIR/etcdctl ]]; then
        return 0
    fi
    command -v go >/dev/null || { say "go not found: cannot build the control plane"; exit 1; }
    mkdir -p "$CP_DIR/apiserver" "$CP_DIR/etcd" "$BIN_DIR"
    # One build at a time (parallel tests); whoever waited finds the binaries made.
    exec 9>"$CP_DIR/.build.lock"
    flock 9
    if [[ -x $BIN_DIR/kube-apiserver && -x $BIN_DIR/etcd && -x $BIN_DIR/etcdctl ]]; then
        exec 9>&-
        return 0
    fi
    local log=$CP_DIR/build.log
    : >"$log"
    say "building kube-apiserver $K8S_VERSION and etcd $ETCD_VERSION into $BIN_DIR (first run only; log: $log)"
    local t0=$SECONDS
    if [[ ! -x $BIN_DIR/kube-apiserver ]]; then
        write_apiserver_module "$CP_DIR/apiserver" >>"$log" 2>&1
        local minor=${K8S_VERSION#v1.}
        minor=${minor%%.*}
        local pkg=k8s.io/component-base/version
        if ! (cd "$CP_DIR/apiserver" &&
            nice -n 10 go build -trimpath -o "$BIN_DIR/kube-apiserver.tmp" \
                -ldflags "-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
                k8s.io/kubernetes/cmd/kube-apiserver) >>"$log" 2>&1; then
            tail -n 40 "$log" >&2
            say "FAILED: go build k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION (in $CP_DIR/apiserver)"
            exit 1
        fi
        mv "$BIN_DIR/kube-apiserver.tmp" "$BIN_DIR/kube-apiserver"
    fi
    if [[ ! -x $BIN_DIR/etcd || ! -x $BIN_DIR/etcdctl ]]; then
        cat >"$CP_DIR/etcd/go.mod" <<EOF
module kbridge.test/etcd

go 1.24

require (
	go.etcd.io/etcd/server/v3 $ETCD_VERSION
	go.etcd.io/etcd/etcdctl/v3 $ETCD_VERSION
)
EOF
        if ! (cd "$CP_DIR/etcd" &&
            nice -n 10 go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/etcd.tmp" go.etcd.io/etcd/server/v3 &&
            nice -n 10 go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/etcdctl.tmp" go.etcd.io/etcd/etcdctl/v3) \
            >>"$log" 2>&1; then
            tail -n 40 "$log" >&2
            say "FAILED: go build go.etcd.io/etcd/server/v3 + etcdctl/v3 @$ETCD_VERSION (in $CP_DIR/etcd)"
            exit 1
        fi
        mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd"
        mv "$BIN_DIR/etcdctl.tmp" "$BIN_DIR/etcdctl"
    fi
    say "built in $((SECONDS - t0)) s"
    exec 9>&-
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

running_pid() { # name (etcd|kube-apiserver) → its pid if ours runs
    local f=$RUN_DIR/$1.pid pid
    [[ -f $f ]] || return 1
    pid=$(cat "$f")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
    # The pid must still be our binary, not a recycled number.
    [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$BIN_DIR/$1"* ]] || return 1
    echo "$pid"
}

envval() { sed -n "s/^$1=//p" "$ENV_FILE" 2>/dev/null; }

ready() { # → 0 if the API server answers /readyz with 200
    [[ -f $ENV_FILE ]] || return 1
    curl -sf -m 5 --cacert "$(envval KB_K8S_CA)" -H "Authorization: Bearer $(envval KB_K8S_ADMIN_TOKEN)" \
        "$(envval KB_K8S_SERVER)/readyz" >/dev/null 2>&1
}

# CA, serving certificate for 127.0.0.1/localhost, client certificates, SA key pair.
make_certs() {
    local d=$RUN_DIR/pki
    mkdir -p "$d"
    (
        cd "$d"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 30 \
            -subj "/CN=kbridge-test-ca" -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
        sign() { # name subject extensions
            openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
            printf '%s\n' "$3" >"$1.ext"
            openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 30 \
                -extfile "$1.ext" 2>/dev/null
            rm -f "$1.csr" "$1.ext"
        }
        sign apiserver "/CN=kube-apiserver" \
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc
extendedKeyUsage=serverAuth
keyUsage=critical,digitalSignature,keyEncipherment"
        sign admin "/O=system:masters/CN=kbridge-admin" "extendedKeyUsage=clientAuth"
        sign client "/CN=kb-client" "extendedKeyUsage=clientAuth"
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        chmod 600 ./*.key
    )
}

write_kubeconfig() { # file server token
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
current-context: admin
clusters:
- name: kbridge-test
  cluster:
    server: $2
    certificate-authority: $RUN_DIR/pki/ca.crt
contexts:
- name: admin
  context: {cluster: kbridge-test, user: admin, namespace: default}
users:
- name: admin
  user:
    token: $3
EOF
}

start_apiserver() {
    local args=()
    mapfile -t args <"$RUN_DIR/kube-apiserver.args"
    setsid "$BIN_DIR/kube-apiserver" "${args[@]}" </dev/null >>"$RUN_DIR/kube-apiserver.log" 2>&1 &
    echo $! >"$RUN_DIR/kube-apiserver.pid"
}

wait_ready() {
    local deadline=$((SECONDS + START_DEADLINE)) who
    until ready; do
        for who in etcd kube-apiserver; do
            # Gone, not "not ours yet": between the fork and its exec the pid is setsid's or the
            # shell's, which running_pid does not count (on a busy machine that lasts a while).
            if ! kill -0 "$(cat "$RUN_DIR/$who.pid" 2>/dev/null)" 2>/dev/null; then
                tail -n 30 "$RUN_DIR/$who.log" >&2
                say "$who exited during start-up (log: $RUN_DIR/$who.log)"
                stop_all
                exit 1
            fi
        done
        if ((SECONDS > deadline)); then
            tail -n 30 "$RUN_DIR/kube-apiserver.log" >&2
            say "kube-apiserver not ready after ${START_DEADLINE}s"
            stop_all
            exit 1
        fi
        sleep 0.5
    done
}

# Stop kube-apiserver and start it again on the same etcd (its watch cache starts empty).
restart_apiserver() {
    [[ -f $RUN_DIR/kube-apiserver.args ]] || { say "not started"; exit 1; }
    stop_one kube-apiserver
    start_apiserver
    wait_ready
}

start() {
    if [[ -f $ENV_FILE ]] && running_pid kube-apiserver >/dev/null && ready; then
        cat "$ENV_FILE"
        return 0
    fi
    build
    stop_all 2>/dev/null || true
    rm -rf "$RUN_DIR"
    mkdir -p "$RUN_DIR"
    make_certs
    local etcd_port etcd_peer api_port admin_token limited_token
    etcd_port=$(free_port)
    etcd_peer=$(free_port)
    api_port=$(free_port)
    admin_token=$(openssl rand -hex 16)
    limited_token=$(openssl rand -hex 16)
    {
        echo "$admin_token,kbridge-admin,uid-admin,\"system:masters\""
        echo "$limited_token,kb-limited,uid-limited"
    } >"$RUN_DIR/tokens.csv"
    chmod 600 "$RUN_DIR/tokens.csv"

    # setsid: the servers outlive the shell that started them (tests call start and stop separately).
    setsid "$BIN_DIR/etcd" --name kbtest --data-dir "$RUN_DIR/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
        --initial-cluster "kbtest=http://127.0.0.1:$etcd_peer" \
        --quota-backend-bytes "$ETCD_QUOTA" --log-level warn \
        </dev/null >"$RUN_DIR/etcd.log" 2>&1 &
    echo $! >"$RUN_DIR/etcd.pid"

    local pki=$RUN_DIR/pki
    # The command line is kept so restart-apiserver brings the same server back on the same data.
    cat >"$RUN_DIR/kube-apiserver.args" <<EOF
--etcd-servers=http://127.0.0.1:$etcd_port
--bind-address=127.0.0.1
--advertise-address=127.0.0.1
--secure-port=$api_port
--tls-cert-file=$pki/apiserver.crt
--tls-private-key-file=$pki/apiserver.key
--client-ca-file=$pki/ca.crt
--token-auth-file=$RUN_DIR/tokens.csv
--authorization-mode=Node,RBAC
--service-account-issuer=https://kubernetes.default.svc
--service-account-key-file=$pki/sa.pub
--service-account-signing-key-file=$pki/sa.key
--api-audiences=https://kubernetes.default.svc
--service-cluster-ip-range=10.96.0.0/24
--endpoint-reconciler-type=none
--cert-dir=$RUN_DIR/apiserver-certs
--v=1
EOF
    # KB_APISERVER_EXTRA_ARGS: more flags, space-separated: a test turning a feature gate off or on,
    # e.g. --feature-gates=WatchList=false (0174) or --feature-gates=ShardedListAndWatch=true (0053).
    local extra
    for extra in ${KB_APISERVER_EXTRA_ARGS:-}; do echo "$extra" >>"$RUN_DIR/kube-apiserver.args"; done
    start_apiserver

    local server=https://127.0.0.1:$api_port
    cat >"$ENV_FILE" <<EOF
KB_K8S_VERSION=$K8S_VERSION
KB_K8S_SERVER=$server
KB_K8S_CA=$pki/ca.crt
KB_K8S_ADMIN_TOKEN=$admin_token
KB_K8S_LIMITED_TOKEN=$limited_token
KB_K8S_ADMIN_CERT=$pki/admin.crt
KB_K8S_ADMIN_KEY=$pki/admin.key
KB_K8S_CLIENT_CERT=$pki/client.crt
KB_K8S_CLIENT_KEY=$pki/client.key
KB_K8S_KUBECONFIG=$RUN_DIR/kubeconfig
KB_ETCD_ENDPOINT=http://127.0.0.1:$etcd_port
KB_ETCDCTL=$BIN_DIR/etcdctl
KB_CONTROLPLANE_DIR=$RUN_DIR
EOF
    write_kubeconfig "$RUN_DIR/kubeconfig" "$server" "$admin_token"
    wait_ready
    cat "$ENV_FILE"
}

stop_one() { # name
    local pid
    pid=$(running_pid "$1") || { rm -f "$RUN_DIR/$1.pid"; return 0; }
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    rm -f "$RUN_DIR/$1.pid"
}

stop_all() {
    stop_one kube-apiserver
    stop_one etcd
}

case ${1:-} in
build) build ;;
start) start ;;
stop) stop_all ;;
restart-apiserver) restart_apiserver ;;
status) running_pid kube-apiserver >/dev/null && ready ;;
env) [[ -f $ENV_FILE ]] && cat "$ENV_FILE" ;;
clean) stop_all; rm -rf "$RUN_DIR" ;;
*) echo "usage: $0 build|start|stop|restart-apiserver|status|env|clean" >&2; exit 2 ;;
esac
