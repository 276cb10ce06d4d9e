#!/usr/bin/env python3
"""Benchmark (not a test): what informers[].coalesce_ms saves on bursts.

10,000 pods are each updated 20 times within 200 ms (in chunks of 100 pods:
one bulk request makes 20 rounds over its 100 pods, so each pod's 20 updates
fall within that one request; the longest request is printed), with compaction = "latest" and the window off
(coalesce_ms = 0) and on (coalesce_ms = 1000), each run against a fresh
simulator and kbridge writing JSON Lines to /dev/shm. Printed side by side:
messages the sink wrote for the burst, and CPU seconds of the delivery
threads (the shard workers kb:work/* and the sink kb:sink/*) and of the whole
process, from the burst's start until its last change is written.

Usage: bench/coalesce.py [--build build] [--pods 10000] [--updates 20] [--window 1000]
"""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline import HZ, count_lines, cpu_seconds, post, start_sim, wait  # noqa: E402

CHUNK = 100


def thread_cpu(pid, prefixes):
    """CPU seconds of pid's threads whose name starts with one of prefixes."""
    total = 0.0
    for task in glob.glob("/proc/%d/task/*" % pid):
        try:
            with open(task + "/comm") as f:
                name = f.read().strip()
            if not name.startswith(prefixes):
                continue
            with open(task + "/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / HZ
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def pods(chunk):
    return ["p%05d" % i for i in range(chunk * CHUNK, (chunk + 1) * CHUNK)]


def ops(op, names, labels):
    return "".join(json.dumps({"op": op, "resource": "pods", "version": "v1", "namespace": "bench", "name": n,
                               "labels": labels}) + "\n" for n in names)


def bulk(url, body):
    req = urllib.request.Request(url + "/_sim/bulk", data=body.encode(), method="POST")
    with urllib.request.urlopen(req, timeout=600) as r:
        r.read()


def run(a, window):
    work = tempfile.mkdtemp(prefix="kbbench-coalesce-", dir="/dev/shm")
    out = os.path.join(work, "out.jsonl")
    sim, url = start_sim(a.build)
    for c in range((a.pods + CHUNK - 1) // CHUNK):
        bulk(url, ops("create", pods(c)[: a.pods - c * CHUNK], {"round": "0"}))
    cfg = os.path.join(work, "bench.cfg")
    with open(cfg, "w") as f:
        f.write('cluster = { name = "bench"; server = "%s"; };\nhttp = { listen = ""; };\n'
                'informers = ( { name = "pods"; version = "v1"; resource = "pods"; compaction = "latest"; '
                'coalesce_ms = %d; } );\nsinks = ( { name = "out"; type = "file"; path = "%s"; } );\n'
                'routes = ( { informer = "pods"; sink = "out"; } );\n' % (url, window, out))
    log = open(os.path.join(work, "kbridge.log"), "w")
    br = subprocess.Popen([os.path.join(a.build, "kbridge"), "--config", cfg], stderr=log)
    try:
        wait(lambda: count_lines(out) >= a.pods, 300)
        time.sleep(max(1.0, 2 * window / 1000.0))
        base = count_lines(out)
        deliver = ("kb:work", "kb:sink")
        cpu0, tcpu0, t0 = cpu_seconds(br.pid), thread_cpu(br.pid, deliver), time.monotonic()
        spans = []
        for c in range((a.pods + CHUNK - 1) // CHUNK):
            names = pods(c)[: a.pods - c * CHUNK]
            body = "".join(ops("update", names, {"round": str(r)}) for r in range(1, a.updates + 1))
            ts = time.monotonic()
            bulk(url, body)
            spans.append(time.monotonic() - ts)
        burst_s = time.monotonic() - t0
        # The last change of every pod (round = updates) is written: the burst is delivered.
        want = ("\"round\":\"%d\"" % a.updates).encode()
        seen = {"pos": 0, "n": 0, "rest": b""}

        def done():  # reads only what was appended since the last look
            with open(out, "rb") as f:
                f.seek(seen["pos"])
                data = f.read()
            seen["pos"] += len(data)
            *lines, seen["rest"] = (seen["rest"] + data).split(b"\n")
            seen["n"] += sum(1 for l in lines if want in l)
            return seen["n"] >= a.pods
        ok = wait(done, 600, 0.05)
        took = time.monotonic() - t0
        cpu, tcpu = cpu_seconds(br.pid) - cpu0, thread_cpu(br.pid, deliver) - tcpu0
        msgs = count_lines(out) - base
    finally:
        br.send_signal(signal.SIGTERM)
        br.wait()
        sim.send_signal(signal.SIGTERM)
        sim.wait()
        subprocess.run(["rm", "-rf", work])
    return {"msgs": msgs, "cpu": cpu, "tcpu": tcpu, "took": took, "burst": burst_s, "span": max(spans), "ok": ok}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--window", type=int, default=1000)
    a = ap.parse_args()
    off, on = run(a, 0), run(a, a.window)
    print("burst: %d pods x %d updates = %d changes; each pod's updates within %.0f ms (one bulk of %d pods), "
          "whole burst sent in %.2f s" % (a.pods, a.updates, a.pods * a.updates, 1000 * max(off["span"], on["span"]),
                                          CHUNK, max(off["burst"], on["burst"])))
    print("%-34s %14s %14s" % ("", "coalesce_ms=0", "coalesce_ms=%d" % a.window))
    print("%-34s %14d %14d" % ("messages written", off["msgs"], on["msgs"]))
    print("%-34s %14.2f %14.2f" % ("messages per pod", off["msgs"] / a.pods, on["msgs"] / a.pods))
    print("%-34s %14.2f %14.2f" % ("delivery CPU s (workers + sink)", off["tcpu"], on["tcpu"]))
    print("%-34s %14.2f %14.2f" % ("kbridge CPU s (whole process)", off["cpu"], on["cpu"]))
    print("%-34s %14.2f %14.2f" % ("burst start to last change out, s", off["took"], on["took"]))
    if not (off["ok"] and on["ok"]):
        print("INCOMPLETE: a run did not deliver every pod's last change")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
