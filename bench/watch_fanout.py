#!/usr/bin/env python3
"""Benchmark (not a test): node-scoped pod watches (fieldSelector=spec.nodeName=node-i, as node agents
hold them) served by kbridge's Kubernetes API versus directly by a real kube-apiserver + etcd.

A real kube-apiserver (tests/infra/controlplane.sh) holds NODES x PODS_PER_NODE pods in namespace bench
(spec.nodeName set at creation; nothing runs them). A churn of RATE changes/s spread over all nodes runs
for SECONDS per setup: half are updates (an annotation), a quarter phase changes (the status subresource,
Pending -> Running -> Succeeded), a quarter moves (the API server cannot change spec.nodeName, so a move is
a delete with gracePeriodSeconds=0 and a create of the same name on another node). Every write stamps
the annotation kb-bench/t with the time it was sent.

Watchers: AGENTS watches per node, on the first nodes (N watchers = ceil(N / AGENTS) nodes x AGENTS),
each `GET /api/v1/namespaces/bench/pods?watch=1&fieldSelector=spec.nodeName=node-i` without a
resourceVersion (ADDED for the node's pods, then changes), all in one asyncio process of this script
(--client) reading raw HTTP/1.1 chunked streams, one connection per watch (TLS on the API server).

Per setup and N, printed: CPU seconds per 1,000 events delivered to watchers (/proc/PID/stat utime+stime
over the churn and its drain: kbridge alone; kube-apiserver + etcd), the same per 1,000 changes made,
RSS (kbridge; kube-apiserver + etcd), p50/p99 delivery latency (kb-bench/t of an ADDED or MODIFIED
event -> read by the watcher; DELETED events carry the old stamp and are not timed), established
connections to the serving port, the client's own CPU, and whether every watcher's final view (name,
uid, resourceVersion of each pod) equals the API server's pods on its node.

kbridge is the release build (--build, default build-rel), informing from the same API server, serving
plain HTTP on 127.0.0.1. kbridge's setups run first (every --kb-n), then kbridge is stopped and the
API server's setups run (every --api-n).

Usage: bench/watch_fanout.py [--build build-rel] [--nodes 1000] [--agents 5] [--pods-per-node 2]
                             [--rate 40] [--seconds 30] [--kb-n 1,100,1000,5000] [--api-n 5000]
"""
import argparse
import asyncio
import http.client
import json
import math
import os
import random
import resource
import ssl
import subprocess
import sys
import tempfile
import threading
import time

from benchutil import percentile, pid_of

HERE = os.path.dirname(os.path.abspath(__file__))
NS = "bench"
STAMP = "kb-bench/t"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build-rel"))
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--agents", type=int, default=5)
    ap.add_argument("--pods-per-node", type=int, default=2)
    ap.add_argument("--rate", type=float, default=40.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--kb-n", default="1,100,1000,5000")
    ap.add_argument("--api-n", default="5000")
    ap.add_argument("--connect-timeout", type=float, default=240.0, help="seconds for all watches to open")
    ap.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args()


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# ---------------------------------------------------------------- the watcher process (--client)

class Watchers:
    """Every watch's view (name -> [uid, rv]) and the delivery counters, owned by the event loop."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.views = {}
        self.connected = 0
        self.failed = {}
        self.retries = 0
        self.events = 0
        self.deleted = 0
        self.lat = []
        self.slow = []
        self.since_ns = 0
        self.last_event = time.monotonic()
        self.gate = asyncio.Semaphore(100)  # connections being opened at once

    async def open(self, node):
        c = self.cfg
        ctx = None
        if c["tls"]:
            ctx = ssl.create_default_context(cafile=c["ca"])
        r, w = await asyncio.open_connection(c["host"], c["port"], ssl=ctx, limit=1 << 22)
        req = ("GET /api/v1/namespaces/%s/pods?watch=1&fieldSelector=spec.nodeName%%3Dnode-%d HTTP/1.1\r\n"
               "Host: %s:%d\r\nAccept: application/json\r\n%s\r\n" % (
                   NS, node, c["host"], c["port"],
                   ("Authorization: Bearer %s\r\n" % c["token"]) if c["token"] else ""))
        w.write(req.encode())
        await w.drain()
        status = (await r.readline()).decode(errors="replace")
        headers = {}
        while True:
            line = (await r.readline()).decode(errors="replace").strip()
            if not line:
                break
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        code = int(status.split()[1]) if len(status.split()) > 1 else 0
        if code != 200:
            w.close()
            return None, None, code
        if headers.get("transfer-encoding", "").lower() != "chunked":
            w.close()
            return None, None, -1
        return r, w, 200

    async def watch(self, key, node):
        for attempt in range(5):
            try:
                async with self.gate:
                    r, w, code = await asyncio.wait_for(self.open(node), 60)
            except OSError as e:
                code = "%s" % (e.strerror or type(e).__name__)
                r = None
            except asyncio.TimeoutError:
                code, r = "no answer in 60 s", None
            if r is not None:
                break
            self.retries += 1
            if attempt == 4:
                self.failed[str(code)] = self.failed.get(str(code), 0) + 1
                return
            await asyncio.sleep(0.5 + random.random())
        view = self.views[key] = {}
        opened_ns = time.time_ns()
        self.connected += 1
        buf = b""
        try:
            while True:
                size = int((await r.readline()).split(b";")[0], 16)
                if size == 0:
                    self.failed["ended by the server"] = self.failed.get("ended by the server", 0) + 1
                    break
                buf += await r.readexactly(size)
                await r.readexactly(2)
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self.event(view, line, opened_ns)
        except (OSError, ValueError, asyncio.IncompleteReadError) as e:
            self.failed["ended: " + type(e).__name__] = self.failed.get("ended: " + type(e).__name__, 0) + 1
        self.connected -= 1

    def event(self, view, line, opened_ns):
        now = time.time_ns()
        ev = json.loads(line)
        t, obj = ev["type"], ev["object"]
        md = obj.get("metadata", {})
        if t == "BOOKMARK":
            return
        self.events += 1
        self.last_event = time.monotonic()
        if t == "DELETED":
            view.pop(md["name"], None)
            self.deleted += 1
            return
        if t not in ("ADDED", "MODIFIED"):
            msg = "event %s: %s" % (t, obj.get("message", ""))
            self.failed[msg] = self.failed.get(msg, 0) + 1
            return
        view[md["name"]] = [md.get("uid"), md.get("resourceVersion")]
        # A delete first marks the pod (deletionTimestamp, a MODIFIED with the previous stamp): not timed.
        stamp = 0 if md.get("deletionTimestamp") else int((md.get("annotations") or {}).get(STAMP, "0"))
        if stamp > max(self.since_ns, opened_ns):  # not the initial state of a watch opened late
            self.lat.append((now - stamp) / 1e6)
            if self.lat[-1] > 1000 and len(self.slow) < 5:
                self.slow.append([round(self.lat[-1]), t, md["name"], stamp])

    def command(self, cmd):
        if cmd == "reset":
            self.events = self.deleted = 0
            self.lat = []
            self.slow = []
            self.since_ns = time.time_ns()
            return {}
        if cmd == "views":
            return {"views": [[k[0], k[1], v] for k, v in self.views.items()]}
        return {"connected": self.connected, "failed": self.failed, "retries": self.retries,
                "events": self.events, "deleted": self.deleted, "timed": len(self.lat), "over_1s": sum(1 for x in self.lat if x > 1000), "slow": self.slow,
                "p50_ms": percentile(self.lat, 50), "p99_ms": percentile(self.lat, 99),
                "quiet_s": time.monotonic() - self.last_event}


async def client_main():
    raise_nofile()
    cfg = json.loads(sys.stdin.readline())
    ws = Watchers(cfg)
    loop = asyncio.get_running_loop()
    tasks = [asyncio.ensure_future(ws.watch((node, a), node)) for node, a in cfg["watches"]]
    q = asyncio.Queue()

    def stdin_reader():
        for line in sys.stdin:
            loop.call_soon_threadsafe(q.put_nowait, line.strip())
        loop.call_soon_threadsafe(q.put_nowait, "quit")
    threading.Thread(target=stdin_reader, daemon=True).start()
    while True:
        cmd = await q.get()
        if cmd == "quit":
            break
        sys.stdout.write(json.dumps(ws.command(cmd)) + "\n")
        sys.stdout.flush()
    for t in tasks:
        t.cancel()


# ---------------------------------------------------------------- the driver

def established(port):
    """Established TCP connections whose local port is port (the server's side of each)."""
    n = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            next(f)
            for l in f:
                parts = l.split()
                if parts[3] == "01" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    n += 1
    return n


class Api:
    """Keep-alive HTTPS to the API server with the admin token (one per thread)."""

    def __init__(self, cp):
        self.host, port = cp.server[len("https://"):].rsplit(":", 1)
        self.port = int(port)
        self.ctx = ssl.create_default_context(cafile=cp.ca)
        self.token = cp.env["KB_K8S_ADMIN_TOKEN"]
        self.conn = None

    def call(self, method, path, body=None, ctype="application/json"):
        for attempt in range(5):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)
            try:
                self.conn.request(method, path, json.dumps(body) if body is not None else None,
                                  {"Authorization": "Bearer " + self.token, "Content-Type": ctype})
                r = self.conn.getresponse()
                return r.status, json.loads(r.read() or b"{}")
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 4:
                    raise
        return 0, {}


def pod_body(name, node):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "annotations": {STAMP: str(time.time_ns())}},
            "spec": {"nodeName": "node-%d" % node, "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": "registry.invalid/x:1"}]}}


def create_pods(cp, names, nodes, threads=4):
    errors = []

    def worker(idx):
        api = Api(cp)
        for i in range(idx, len(names), threads):
            s, b = api.call("POST", "/api/v1/namespaces/%s/pods" % NS, pod_body(names[i], nodes[names[i]]))
            if s != 201:
                errors.append((names[i], s, b.get("message")))
                return
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise SystemExit("creating pods failed: %s" % errors[:3])


class Churn:
    """RATE changes/s over all pods for SECONDS, by THREADS threads each owning every THREADS-th pod."""
    PHASES = ("Pending", "Running", "Succeeded")

    def __init__(self, cp, args, nodes, threads=4):
        self.cp, self.args, self.nodes, self.threads = cp, args, nodes, threads
        self.phase = {n: "Pending" for n in nodes}
        self.ops = {"update": 0, "phase": 0, "move": 0}
        self.errors = []
        self.dropped_stamps = 0
        self.lock = threading.Lock()

    def op(self, api, name, rnd):
        path = "/api/v1/namespaces/%s/pods/%s" % (NS, name)
        x = rnd.random()
        kind = "update" if x < 0.5 else "phase" if x < 0.75 else "move"
        if kind == "phase" and self.phase[name] == "Succeeded":
            kind = "move"  # a terminal phase cannot change: the pod is made again
        stamp = str(time.time_ns())
        if kind == "update":
            s, b = api.call("PATCH", path, {"metadata": {"annotations": {STAMP: stamp, "kb-bench/n": str(rnd.random())}}},
                            "application/merge-patch+json")
        elif kind == "phase":
            nxt = self.PHASES[self.PHASES.index(self.phase[name]) + 1]
            s, b = api.call("PATCH", path + "/status", {"metadata": {"annotations": {STAMP: stamp}},
                                                        "status": {"phase": nxt}}, "application/merge-patch+json")
            if s == 200:
                self.phase[name] = nxt
        else:
            s, b = api.call("DELETE", path + "?gracePeriodSeconds=0")
            if s == 200:
                node = rnd.randrange(self.args.nodes - 1)
                node = node if node < self.nodes[name] else node + 1
                s, b = api.call("POST", "/api/v1/namespaces/%s/pods" % NS, pod_body(name, node))
                if s == 201:
                    self.nodes[name] = node
                    self.phase[name] = "Pending"
                    stamp = b["metadata"]["annotations"][STAMP]
        if s not in (200, 201):
            with self.lock:
                self.errors.append((kind, name, s, b.get("message")))
            return
        if (b.get("metadata", {}).get("annotations") or {}).get(STAMP) != stamp:
            with self.lock:
                self.dropped_stamps += 1
        with self.lock:
            self.ops[kind] += 1

    def run(self):
        names = sorted(self.nodes)
        total = int(self.args.rate * self.args.seconds)
        t0 = time.monotonic()

        def worker(idx):
            api, rnd = Api(self.cp), random.Random(idx * 7919 + int(t0))
            mine = names[idx::self.threads]
            for i in range(idx, total, self.threads):
                delay = t0 + i / self.args.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                self.op(api, rnd.choice(mine), rnd)
        ts = [threading.Thread(target=worker, args=(t,)) for t in range(self.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return time.monotonic() - t0


class Client:
    def __init__(self, cfg, log):
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--client"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
        self.send(json.dumps(cfg))

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def ask(self, cmd="stats"):
        self.send(cmd)
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit("the watcher process ended; see its log")
        return json.loads(line)

    def stop(self):
        try:
            self.send("quit")
            self.p.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()


def server_state(cp):
    api = Api(cp)
    s, b = api.call("GET", "/api/v1/namespaces/%s/pods" % NS)
    want = {}
    for p in b["items"]:
        node = int(p["spec"]["nodeName"].split("-")[1])
        want.setdefault(node, {})[p["metadata"]["name"]] = [p["metadata"]["uid"], p["metadata"]["resourceVersion"]]
    return want


def check_views(cp, client, deadline_s=60):
    """Number of watchers whose view differs from the API server's pods on their node (0 when converged)."""
    deadline = time.monotonic() + deadline_s
    while True:
        want = server_state(cp)
        views = client.ask("views")["views"]
        bad = [(node, a) for node, a, v in views if v != want.get(node, {})]
        if not bad or time.monotonic() > deadline:
            return len(views), len(bad), bad[:3]
        time.sleep(2)


def wait_quiet(client, quiet=3.0, limit=180.0):
    deadline = time.monotonic() + limit
    while True:
        st = client.ask()
        if st["quiet_s"] >= quiet or time.monotonic() > deadline:
            return st
        time.sleep(0.5)


def run_setup(args, cp, label, n, cfg, server_pids, port, nodes, work):
    watches = [(node, a) for node in range(math.ceil(n / args.agents)) for a in range(args.agents)][:n]
    cfg = dict(cfg, watches=watches)
    client = Client(cfg, os.path.join(work, "client-%s-%d.log" % (label, n)))
    try:
        t0 = time.monotonic()
        st = client.ask()
        while st["connected"] + sum(st["failed"].values()) < n and time.monotonic() - t0 < args.connect_timeout:
            time.sleep(1)
            st = client.ask()
        opened = st["connected"]
        print("%s N=%d: %d watches open in %.0f s (failed: %s, retries %d)" % (
            label, n, opened, time.monotonic() - t0, st["failed"] or "none", st["retries"]), flush=True)
        wait_quiet(client)
        client.ask("reset")
        cpu0 = sum(cpu_seconds(p) for p in server_pids)
        ccpu0 = cpu_seconds(client.p.pid)
        churn = Churn(cp, args, nodes)
        took = churn.run()
        st = wait_quiet(client)
        cpu = sum(cpu_seconds(p) for p in server_pids) - cpu0
        ccpu = cpu_seconds(client.p.pid) - ccpu0
        rss = sum(rss_mib(p) for p in server_pids)
        conns = established(port)
        checked, bad, examples = check_views(cp, client)
        changes = sum(churn.ops.values())
        row = {"setup": label, "n": n, "open": opened, "changes": changes, "ops": churn.ops, "took_s": took,
               "errors": len(churn.errors), "dropped_stamps": churn.dropped_stamps,
               "events": st["events"], "deleted": st["deleted"], "timed": st["timed"], "over_1s": st["over_1s"], "slow": st["slow"],
               "cpu_s": cpu, "cpu_per_1k_events": cpu / max(st["events"], 1) * 1000,
               "cpu_per_1k_changes": cpu / max(changes, 1) * 1000, "rss_mib": rss, "conns": conns,
               "p50_ms": st["p50_ms"], "p99_ms": st["p99_ms"], "client_cpu_s": ccpu,
               "open_at_end": st["connected"], "failed": st["failed"], "views_checked": checked, "views_wrong": bad, "wrong_examples": examples}
        if churn.errors:
            row["error_examples"] = churn.errors[:3]
        if label == "kbridge":
            row["kbridge_metrics"] = kbridge_metrics(cfg["host"], cfg["port"])
        print(json.dumps(row), flush=True)
        return row
    finally:
        client.stop()


def kbridge_metrics(host, port):
    """kbridge's watch counters: why watches ended, wake-ups, events written."""
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics")
    out = {}
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith(("kbridge_api_watches_ended_total", "kbridge_api_watch_wakeups_total",
                            "kbridge_api_watch_events_sent_total")):
            k, v = line.rsplit(" ", 1)
            if float(v):
                out[k.replace("kbridge_api_", "")] = int(float(v))
    c.close()
    return out


def table(args, rows, version):
    print("\nNode-scoped pod watches (fieldSelector=spec.nodeName=node-i), kube-apiserver %s, %d nodes x %d pods, "
          "%d agents per node, churn %.0f changes/s for %.0f s (1/2 updates, 1/4 phase changes, 1/4 moves):" % (
              version, args.nodes, args.pods_per_node, args.agents, args.rate, args.seconds))
    print("\n| served by | watches open / asked | changes | events delivered | CPU s / 1k events | CPU s / 1k changes "
          "| RSS MiB | p50 ms | p99 ms | connections | client CPU s | views equal to the server |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        side = "kbridge" if r["setup"] == "kbridge" else "kube-apiserver + etcd"
        print("| %s | %d / %d | %d | %d | %.3f | %.3f | %.0f | %.1f | %.1f | %d | %.1f | %d / %d |" % (
            side, r["open"], r["n"], r["changes"], r["events"], r["cpu_per_1k_events"], r["cpu_per_1k_changes"],
            r["rss_mib"], r["p50_ms"], r["p99_ms"], r["conns"], r["client_cpu_s"],
            r["views_checked"] - r["views_wrong"], r["views_checked"]))
    kb = {r["n"]: r for r in rows if r["setup"] == "kbridge"}
    for r in rows:
        if r["setup"] != "kube-apiserver" or r["n"] not in kb:
            continue
        k = kb[r["n"]]
        cpu_ratio = k["cpu_per_1k_events"] / max(r["cpu_per_1k_events"], 1e-9)
        mem_ratio = k["rss_mib"] / max(r["rss_mib"], 1e-9)
        print("\nN=%d targets: kbridge CPU per event %.2f x kube-apiserver+etcd's (target <= 0.20: %s); "
              "RSS %.2f x (target <= 0.20: %s); kbridge p99 %.1f ms (target <= 100 ms: %s)" % (
                  r["n"], cpu_ratio, "met" if cpu_ratio <= 0.2 else "NOT met", mem_ratio,
                  "met" if mem_ratio <= 0.2 else "NOT met", k["p99_ms"], "met" if k["p99_ms"] <= 100 else "NOT met"))
    for r in rows:
        if r.get("kbridge_metrics"):
            print("\nkbridge N=%d counters since it started (all setups so far): %s" % (r["n"], r["kbridge_metrics"]))
    print("\nmachine: %s, %d cores shared with other jobs (a test suite ran beside it; load average %s)" % (
        os.uname().machine, os.cpu_count(), open("/proc/loadavg").read().split()[0]))


def main(args):
    hard = raise_nofile()
    os.environ["KB_BUILD_DIR"] = os.path.abspath(args.build)
    os.environ.setdefault("KB_SOURCE_DIR", os.path.join(HERE, ".."))
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
    import kbtest
    global cpu_seconds, rss_mib
    from kafka_pipeline import cpu_seconds, rss_mib  # the benches' readers of /proc, once kbtest sees this build
    kbtest.KBRIDGE = os.path.join(os.path.abspath(args.build), "kbridge")
    kb_ns = [int(x) for x in args.kb_n.split(",") if x]
    api_ns = [int(x) for x in args.api_n.split(",") if x]
    if max(kb_ns + api_ns) > args.nodes * args.agents:
        raise SystemExit("N above nodes x agents")
    print("open files limit %d" % hard)
    cp = kbtest.ControlPlane()
    cp.kubectl("create", "namespace", NS)
    cp.kubectl("create", "serviceaccount", "default", "-n", NS)
    names = ["p%05d" % i for i in range(args.nodes * args.pods_per_node)]
    nodes = {name: i % args.nodes for i, name in enumerate(names)}
    t0 = time.monotonic()
    create_pods(cp, names, nodes)
    print("%d pods made in %.0f s" % (len(names), time.monotonic() - t0), flush=True)
    work = tempfile.mkdtemp(prefix="kb-bench-fanout-")
    port = kbtest._free_port()
    b = kbtest.ConfigBridge("""
cluster = { name = "bench"; kubeconfig = "%s"; };
http = { listen = "127.0.0.1:%d"; max_per_address = 100000; max_streams = 1000; };
kube_api = { max_watches = 100000; };
log = { level = "info"; };
informers = ( { name = "pods"; version = "v1"; resource = "pods"; namespaces = [ "%s" ]; } );
sinks = ( { name = "out"; type = "file"; path = "/dev/null"; } );
routes = ( { informer = "pods"; sink = "out"; } );
""" % (cp.kubeconfig, port, NS), workdir=work)
    b.wait_log("informer=pods namespace=%s listed" % NS, 120)
    api_pids = [pid_of(cp, "kube-apiserver"), pid_of(cp, "etcd")]
    host, aport = cp.server[len("https://"):].rsplit(":", 1)
    rows = []
    kb_cfg = {"host": "127.0.0.1", "port": port, "tls": False, "ca": None, "token": None}
    for n in kb_ns:
        rows.append(run_setup(args, cp, "kbridge", n, kb_cfg, [b.proc.pid], port, nodes, work))
    b.stop()
    api_cfg = {"host": host, "port": int(aport), "tls": True, "ca": cp.ca, "token": cp.env["KB_K8S_ADMIN_TOKEN"]}
    for n in api_ns:
        rows.append(run_setup(args, cp, "kube-apiserver", n, api_cfg, api_pids, int(aport), nodes, work))
    table(args, rows, cp.version)


if __name__ == "__main__":
    ARGS = parse_args()
    if ARGS.client:
        asyncio.run(client_main())
    else:
        main(ARGS)
