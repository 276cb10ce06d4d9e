#!/usr/bin/env python3
"""Benchmark (not a test): the simulator's list and watch stream through
kbridge into the file sink.

Prints, for a release build:
  - initial sync of N Pods (~5 KB each): seconds from start to "listed", and
    to the last envelope written;
  - memory: RSS with an empty cache, RSS after the sync, peak RSS, and the
    bytes of memory per cached Pod;
  - watch throughput: M updates streamed as fast as the simulator sends
    them: events/s and kbridge CPU microseconds per event.

Usage: bench/pipeline.py [--build build] [--pods 100000] [--updates 200000]
                         [--size 5200] [--cache-compression auto|off|both]
--size 0 makes the simulator's Pods without padding (about 3.6 KB with
managedFields, 2.8 KB as cached with the default drop_fields); the padding
is one long run of "x", which flatters any compression. With
--cache-compression both, the whole run is made twice on the same feed
(informers[].cache_compression = "auto", then "off") and the cache's own
figure (/v1/informers cache.bytes per object) is printed for each.
The output file lives in /dev/shm so the disk is not what is measured.
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

HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def status_kb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read() or b"null")


def count_lines(path):
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def wait(cond, timeout, interval=0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(interval)
    return False


def start_sim(build):
    p = subprocess.Popen([os.path.join(build, "kubesim"), "--port", "0", "--history", "1000000"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    return p, "http://127.0.0.1:%s" % line.strip().rsplit(":", 1)[1]


def start_bridge(build, url, out, workdir, state=None, compression="auto"):
    cfg = os.path.join(workdir, "bench.cfg")
    with open(cfg, "w") as f:
        f.write('cluster = { name = "bench"; server = "%s"; };\nhttp = { listen = "127.0.0.1:0"; };\n'
                'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 500; '
                'cache_compression = "%s"; } );\n'
                'sinks = ( { name = "out"; type = "file"; path = "%s"; } );\n'
                'routes = ( { informer = "pods"; sink = "out"; } );\n' % (url, compression, out))
        if state:
            f.write('state_dir = "%s";\n' % state)
    log = open(os.path.join(workdir, "kbridge.log"), "w")
    return subprocess.Popen([os.path.join(build, "kbridge"), "--config", cfg], stderr=log), log


def cache_doc(workdir):
    """/v1/informers' cache object of the running bridge (its port from the log)."""
    port = None
    for l in open(os.path.join(workdir, "kbridge.log")):
        if "http: listening on " in l:
            port = l.split("http: listening on ", 1)[1].split()[0].rsplit(":", 1)[1]
    if not port:
        return {}
    with urllib.request.urlopen("http://127.0.0.1:%s/v1/informers" % port, timeout=60) as r:
        return json.loads(r.read())["informers"][0].get("cache", {})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pods", type=int, default=100000)
    ap.add_argument("--updates", type=int, default=200000)
    ap.add_argument("--size", type=int, default=5200)
    ap.add_argument("--cache-compression", default="auto", choices=["auto", "off", "both"])
    ap.add_argument("--state", action="store_true",
                    help="with state_dir (on the real disk, under /var/tmp): disk bytes per object, restart time")
    a = ap.parse_args()
    modes = ["auto", "off"] if a.cache_compression == "both" else [a.cache_compression]
    cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("machine: %d cores, %s" % (os.cpu_count(), cpu_model))
    for mode in modes:
        print("--- cache_compression = %s" % mode)
        run(a, mode)


def run(a, mode):
    work = tempfile.mkdtemp(prefix="kbbench-", dir="/dev/shm")
    out = os.path.join(work, "out.jsonl")
    state = tempfile.mkdtemp(prefix="kbbench-state-", dir="/var/tmp") if a.state else None

    # Baseline: a bridge with nothing to cache.
    sim, url = start_sim(a.build)
    br, log = start_bridge(a.build, url, out, work, state + "/empty" if state else None, mode)
    time.sleep(1.0)
    rss_empty = status_kb(br.pid, "VmRSS")
    anon_empty = status_kb(br.pid, "RssAnon")
    br.send_signal(signal.SIGTERM)
    br.wait()
    sim.send_signal(signal.SIGTERM)
    sim.wait()
    os.unlink(out) if os.path.exists(out) else None

    sim, url = start_sim(a.build)
    t = time.monotonic()
    post(url + "/_sim/generate", {"resource": "pods", "namespaces": 10, "count": a.pods, "size": a.size})
    gen_s = time.monotonic() - t
    t0 = time.monotonic()
    br, log = start_bridge(a.build, url, out, work, state, mode)
    logpath = os.path.join(work, "kbridge.log")
    wait(lambda: "listed items=" in open(logpath).read(), 600)
    synced_s = time.monotonic() - t0
    wait(lambda: count_lines(out) >= a.pods, 600)
    delivered_s = time.monotonic() - t0
    time.sleep(1.0)
    rss_synced = status_kb(br.pid, "VmRSS")
    anon_synced = status_kb(br.pid, "RssAnon")
    hwm = status_kb(br.pid, "VmHWM")
    per_pod = (anon_synced - anon_empty) * 1024 / a.pods
    size = os.path.getsize(out) / a.pods
    cache = cache_doc(work)

    # Watch throughput: the simulator's churn is made while kbridge is
    # stopped (SIGSTOP), so on SIGCONT the watch delivers a backlog as fast as
    # kbridge can take it and the figure is kbridge's, not the simulator's.
    base_lines = count_lines(out)
    br.send_signal(signal.SIGSTOP)
    post(url + "/_sim/churn", {"resource": "pods", "count": a.updates, "rate": 0})
    wait(lambda: json.loads(urllib.request.urlopen(url + "/_sim/churn", timeout=30).read()).get("running") is False, 900, 0.1)
    cpu0 = cpu_seconds(br.pid)
    t1 = time.monotonic()
    br.send_signal(signal.SIGCONT)
    ok = wait(lambda: count_lines(out) >= base_lines + a.updates, 900, 0.05)
    watch_s = time.monotonic() - t1
    cpu = cpu_seconds(br.pid) - cpu0
    got = count_lines(out) - base_lines
    br.send_signal(signal.SIGTERM)
    br.wait()
    restart_s = disk = None
    if state:
        disk = os.path.getsize(os.path.join(state, "pods", "data.mdb"))
        st = os.stat(os.path.join(state, "pods", "data.mdb"))
        disk_used = st.st_blocks * 512
        # Restart: from exec to the first change made after it being written.
        lines0 = count_lines(out)
        t2 = time.monotonic()
        br, log = start_bridge(a.build, url, out, work, state, mode)
        req = urllib.request.Request(url + "/_sim/churn", data=json.dumps({"resource": "pods", "count": 1}).encode(),
                                     method="POST")
        urllib.request.urlopen(req, timeout=30).read()
        wait(lambda: count_lines(out) > lines0, 600, 0.01)
        restart_s = time.monotonic() - t2
        rss_restarted = status_kb(br.pid, "RssAnon")
        br.send_signal(signal.SIGTERM)
        br.wait()
    sim.send_signal(signal.SIGTERM)
    sim.wait()

    print("generate %d pods in the simulator: %.1f s" % (a.pods, gen_s))
    print("initial sync: %d pods (%.0f B/envelope): listed in %.2f s, all written in %.2f s" %
          (a.pods, size, synced_s, delivered_s))
    print("memory: RSS empty %.1f MiB, after sync %.1f MiB (anonymous %.1f MiB; the rest is file-backed: "
          "libraries and, with state_dir, LMDB's mapped pages), peak %.1f MiB (peak/steady %.2f); %.0f B per cached Pod (anonymous)" %
          (rss_empty / 1024, rss_synced / 1024, anon_synced / 1024, hwm / 1024, hwm / max(rss_synced, 1), per_pod))
    if cache:
        print("cache (/v1/informers): %.0f B per cached Pod, %.0f B uncompressed (ratio %.2f), dictionaries %d B, "
              "%d training(s)" % (cache["bytes"] / a.pods, cache["rawBytes"] / a.pods, cache["ratio"],
                                  cache["dictBytes"], cache["dictTrainings"]))
    print("watch backlog: %d of %d updates in %.2f s = %.0f events/s; kbridge CPU %.1f us/event%s" %
          (got, a.updates, watch_s, got / watch_s, cpu * 1e6 / max(got, 1), "" if ok else " (INCOMPLETE)"))
    if state:
        print("state_dir: data.mdb %.1f MiB apparent, %.1f MiB used = %.0f B per cached Pod (index + journal); "
              "restart to the first new change written: %.2f s; anonymous RSS after restart %.1f MiB" %
              (disk / 2**20, disk_used / 2**20, disk_used / a.pods, restart_s, rss_restarted / 1024))
        subprocess.run(["rm", "-rf", state])
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    sys.exit(main())
