#!/usr/bin/env python3
"""Benchmark (not a test): N client-go informers on Pods served by kbridge's Kubernetes API versus the
same N directly on a real kube-apiserver (tests/infra/controlplane.sh), same churn, in the same run.

For each N (default 10, 100, 1000) and each setup:
  - N informers (tests/clientgo `kbclientgo watchers`: N lists, N watches, one process) sync;
  - UPDATES pod updates are made at RATE/s through the API server, each stamped with the time it was
    sent (annotation kb-bench/t), until every informer has seen every update;
  - printed: CPU seconds of the serving side per 1000 delivered watch events (kbridge alone, or
    kube-apiserver + etcd), its RSS, p50/p99 latency from the update request to the informer's handler,
    and the LIST and WATCH requests on pods the API server received during the setup.

kbridge is the release build (--build, default build-rel), serving plain HTTP on 127.0.0.1 (the API
server serves HTTPS/HTTP2, all N watches over one connection; kbridge HTTP/1.1, one connection each).
The client process is the same binary in both setups and competes for the same cores.

Usage: bench/kapi_watchers.py [--build build-rel] [--n 10,100,1000] [--pods 50] [--updates 200] [--rate 20]
"""
import argparse
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
os.environ.setdefault("KB_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
import kbtest  # noqa: E402
from benchutil import pid_of  # noqa: E402
from kafka_pipeline import cpu_seconds, rss_mib  # noqa: E402


def pod_requests(cp):
    """LIST requests on pods the API server completed so far (a watch is counted only when it ends), and the
    WATCHes on pods open now."""
    status, body = cp.request("GET", "/metrics")
    text = body.decode() if isinstance(body, bytes) else str(body)
    n = {"LIST": 0, "WATCH": 0}
    for line in text.splitlines():
        if 'resource="pods"' not in line or 'subresource=""' not in line:
            continue
        if line.startswith("apiserver_request_total{") and 'verb="LIST"' in line:
            n["LIST"] += int(float(line.rsplit(" ", 1)[1]))
        if line.startswith("apiserver_longrunning_requests{") and 'verb="WATCH"' in line:
            n["WATCH"] += int(float(line.rsplit(" ", 1)[1]))
    return n


class Patcher:
    def __init__(self, cp):
        self.cp = cp
        self.ctx = ssl.create_default_context(cafile=cp.ca)

    def annotate(self, name):
        body = json.dumps({"metadata": {"annotations": {"kb-bench/t": str(time.time_ns())}}}).encode()
        req = urllib.request.Request(self.cp.server + "/api/v1/namespaces/bench/pods/" + name, data=body,
                                     method="PATCH")
        req.add_header("Authorization", "Bearer " + self.cp.env["KB_K8S_ADMIN_TOKEN"])
        req.add_header("Content-Type", "application/merge-patch+json")
        with urllib.request.urlopen(req, timeout=60, context=self.ctx) as r:
            r.read()


def run_setup(args, cp, exe, kubeconfig, n, pods, server_pids, api_pids, workdir, label):
    w = subprocess.Popen([exe, "watchers", "--kubeconfig", kubeconfig, "--n", str(n)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=open(os.path.join(workdir, "watchers-%s-%d.log" % (label, n)),
                                                             "w"), text=True)

    def ask(cmd):
        w.stdin.write(cmd + "\n")
        w.stdin.flush()
        return json.loads(w.stdout.readline())
    try:
        before = pod_requests(cp)
        deadline = time.monotonic() + 600
        while ask("stats")["synced"] < n:
            if time.monotonic() > deadline:
                raise SystemExit("%s N=%d: informers did not sync within 600 s" % (label, n))
            time.sleep(0.5)
        time.sleep(2)
        ask("reset")
        cpu0 = sum(cpu_seconds(p) for p in server_pids)
        api0 = sum(cpu_seconds(p) for p in api_pids)
        patch = Patcher(cp)
        t0 = time.monotonic()
        for i in range(args.updates):
            patch.annotate(pods[i % len(pods)])
            delay = t0 + (i + 1) / args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        want = n * args.updates
        deadline = time.monotonic() + 300
        st = ask("stats")
        while st["measured"] < want and time.monotonic() < deadline:
            time.sleep(0.5)
            st = ask("stats")
        cpu = sum(cpu_seconds(p) for p in server_pids) - cpu0
        api_cpu = sum(cpu_seconds(p) for p in api_pids) - api0
        rss = sum(rss_mib(p) for p in server_pids)
        after = pod_requests(cp)
        return {"n": n, "setup": label, "events": st["measured"], "want": want,
                "cpu_per_1k": cpu / max(st["measured"], 1) * 1000, "cpu": cpu, "rss_mib": rss,
                "p50_ms": st["p50_ms"], "p99_ms": st["p99_ms"], "lists": after["LIST"] - before["LIST"],
                "watches": after["WATCH"], "api_cpu": api_cpu}
    finally:
        try:
            w.stdin.write("quit\n")
            w.stdin.flush()
            w.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            w.kill()
            w.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build-rel"))
    ap.add_argument("--n", default="10,100,1000")
    ap.add_argument("--pods", type=int, default=50)
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--rate", type=float, default=20.0)
    args = ap.parse_args()
    kbtest.KBRIDGE = os.path.join(args.build, "kbridge")
    from kbclientgo import binary, kubeconfig
    exe = binary()
    cp = kbtest.ControlPlane()
    cp.kubectl("create", "namespace", "bench")
    cp.kubectl("create", "serviceaccount", "default", "-n", "bench")
    pods = ["p%03d" % i for i in range(args.pods)]
    manifest = "".join("---\napiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: bench}\nspec:\n"
                       "  automountServiceAccountToken: false\n  containers: [{name: c, image: registry.invalid/x:1}]\n"
                       % p for p in pods)
    cp.kubectl("apply", "-f", "-", input=manifest)
    work = tempfile.mkdtemp(prefix="kb-bench-kapi-")
    port = kbtest._free_port()
    b = kbtest.ConfigBridge("""
cluster = { name = "bench"; kubeconfig = "%s"; };
http = { listen = "127.0.0.1:%d"; max_per_address = 2000; };
kube_api = { max_watches = 2000; };
log = { level = "info"; };
informers = ( { name = "pods"; version = "v1"; resource = "pods"; namespaces = [ "bench" ]; } );
sinks = ( { name = "out"; type = "file"; path = "/dev/null"; } );
routes = ( { informer = "pods"; sink = "out"; } );
""" % (cp.kubeconfig, port), workdir=work)
    b.wait_log("informer=pods namespace=bench listed", 120)
    kb_kc = kubeconfig(os.path.join(work, "kbridge.kubeconfig"), "http://127.0.0.1:%d" % port)
    api_pids = [pid_of(cp, "kube-apiserver"), pid_of(cp, "etcd")]
    rows = []
    for n in (int(x) for x in args.n.split(",")):
        rows.append(run_setup(args, cp, exe, kb_kc, n, pods, [b.proc.pid], api_pids, work, "kbridge"))
        print(json.dumps(rows[-1]), flush=True)
        rows.append(run_setup(args, cp, exe, cp.kubeconfig, n, pods, api_pids, api_pids, work, "kube-apiserver"))
        print(json.dumps(rows[-1]), flush=True)
    b.stop()
    print("\n| N | watchers on | events delivered | serving CPU s / 1k events | serving RSS MiB | p50 ms | p99 ms "
          "| API server CPU s (whole run) | API server LISTs on pods / open WATCHes on pods |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        side = "kbridge" if r["setup"] == "kbridge" else "kube-apiserver + etcd"
        print("| %d | %s | %d / %d | %.3f | %.0f | %.1f | %.1f | %.2f | %d / %d |" % (
            r["n"], side, r["events"], r["want"], r["cpu_per_1k"], r["rss_mib"], r["p50_ms"], r["p99_ms"],
            r["api_cpu"], r["lists"], r["watches"]))
    print("\nmachine: %s, %d cores shared with other jobs (load average %s)" % (
        os.uname().machine, os.cpu_count(), open("/proc/loadavg").read().split()[0]))


if __name__ == "__main__":
    main()
