#!/usr/bin/env python3
"""Benchmark (not a test): a labelled snapshot query through kbridge's HTTP
API, with and without a label index, end to end.

The simulator generates N Pods (default 100,000, ~3.5 KB each, labels
app ∈ {web, api, worker} and kubesim.io/shard ∈ 0..15). Two kbridge runs
sync them one after the other, the first with
index_labels = ["kubesim.io/shard"], the second without. Each answers
GET /v1/snapshot/pods?labelSelector=kubesim.io/shard=3 (1/16 of the Pods)
R times (default 5); printed: the median and best latency to the last byte,
the objects in the answer, the objects the query read (/v1/informers
"index"), and the anonymous RSS per cached Pod of each run (the index's cost).

Usage: bench/label_query.py [--build build-rel] [--pods 100000] [--size 3500] [--repeats 5]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline import post, start_sim, status_kb, wait  # noqa: E402

SELECTOR = "kubesim.io%2Fshard%3D3"


def start_bridge(build, url, workdir, index_labels):
    cfg = os.path.join(workdir, "bench.cfg")
    with open(cfg, "w") as f:
        f.write('cluster = { name = "bench"; server = "%s"; };\nhttp = { listen = "127.0.0.1:0"; };\n'
                'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 500; '
                'index_labels = [ %s ]; } );\n'
                'sinks = ( { name = "out"; type = "file"; path = "/dev/null"; } );\n'
                'routes = ( { informer = "pods"; sink = "out"; } );\n'
                % (url, ", ".join('"%s"' % k for k in index_labels)))
    logpath = os.path.join(workdir, "kbridge.log")
    log = open(logpath, "w")
    p = subprocess.Popen([os.path.join(build, "kbridge"), "--config", cfg], stderr=log)
    wait(lambda: "listening on 127.0.0.1:" in open(logpath).read(), 60)
    port = open(logpath).read().split("listening on 127.0.0.1:", 1)[1].split()[0]
    return p, log, "http://127.0.0.1:%s" % port


def get(url, timeout=600):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def run(build, sim_url, pods, repeats, index_labels):
    work = tempfile.mkdtemp(prefix="kbbench-lq-", dir="/dev/shm")
    br, log, url = start_bridge(build, sim_url, work, index_labels)
    time.sleep(0.5)
    anon_empty = status_kb(br.pid, "RssAnon")
    wait(lambda: json.loads(get(url + "/v1/informers"))["informers"][0]["objects"] >= pods and
         json.loads(get(url + "/v1/informers"))["informers"][0]["synced"], 900, 0.2)
    time.sleep(1.0)
    anon = status_kb(br.pid, "RssAnon")
    times, n_items = [], 0
    before = json.loads(get(url + "/v1/informers"))["informers"][0]["index"]
    for _ in range(repeats):
        t = time.monotonic()
        body = get(url + "/v1/snapshot/pods?labelSelector=" + SELECTOR)
        times.append((time.monotonic() - t) * 1e3)
        n_items = len(json.loads(body)["items"])
    after = json.loads(get(url + "/v1/informers"))["informers"][0]["index"]
    br.send_signal(signal.SIGTERM)
    br.wait()
    log.close()
    subprocess.run(["rm", "-rf", work])
    times.sort()
    return {"median": times[len(times) // 2], "best": times[0], "items": n_items,
            "read": (after["read"] - before["read"]) // repeats, "per_pod": (anon - anon_empty) * 1024 / pods}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-rel")
    ap.add_argument("--pods", type=int, default=100000)
    ap.add_argument("--size", type=int, default=3500)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    sim, sim_url = start_sim(a.build)
    post(sim_url + "/_sim/generate", {"resource": "pods", "namespaces": 10, "count": a.pods, "size": a.size})
    rows = [("index_labels = [\"kubesim.io/shard\"]", run(a.build, sim_url, a.pods, a.repeats, ["kubesim.io/shard"])),
            ("index_labels = [] (a full scan)", run(a.build, sim_url, a.pods, a.repeats, []))]
    sim.send_signal(signal.SIGTERM)
    sim.wait()
    cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("machine: %d cores, %s; %d Pods of ~%d B; GET /v1/snapshot/pods?labelSelector=kubesim.io/shard=3, %d runs"
          % (os.cpu_count(), cpu_model, a.pods, a.size, a.repeats))
    for name, r in rows:
        print("  %-38s %8.1f ms median %8.1f ms best  %6d items  %7d objects read  %6.0f B/Pod anonymous RSS"
              % (name, r["median"], r["best"], r["items"], r["read"], r["per_pod"]))


if __name__ == "__main__":
    sys.exit(main())
