#!/usr/bin/env python3
"""Benchmark (not a test): the simulator's watch stream through kbridge into a
real Kafka broker, against `kcat -P` producing the same bytes with the same
producer settings, in the same run.

  1. throughput: N updates made while kbridge is stopped (SIGSTOP), then
     delivered as fast as it can: events/s and kbridge CPU µs/event, counted
     by kbridge's own acknowledgements (/metrics kbridge_sink_messages_total);
  2. kcat -P -l on the same number of envelopes (taken from a file sink of
     the same run), acks=all + idempotence like the sink;
  3. latency at a light load (churn at RATE events/s for SECS seconds): p50 /
     p99 from watch read to delivery report, from kbridge's
     kbridge_sink_delivery_seconds histogram (bucket upper bounds).

Usage: bench/kafka_pipeline.py [--build build] [--pods 20000] [--updates 100000] [--rate 1000] [--secs 15]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
os.environ.setdefault("KB_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
import kbtest  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for l in f:
            if l.startswith("VmRSS:"):
                return int(l.split()[1]) / 1024.0
    return 0.0


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        return r.read().decode()


def acked(text, sink):
    m = re.search(r'kbridge_sink_messages_total\{[^}]*sink="%s"[^}]*result="acked"[^}]*\} (\d+)' % sink, text)
    return int(m.group(1)) if m else 0


def quantile(text, sink, q):
    rows = re.findall(r'kbridge_sink_delivery_seconds_bucket\{[^}]*sink="%s"[^}]*le="([^"]+)"[^}]*\} (\d+)' % sink, text)
    rows = [(float("inf") if le == "+Inf" else float(le), int(c)) for le, c in rows]
    total = rows[-1][1] if rows else 0
    for le, c in rows:
        if total and c >= q * total:
            return le
    return float("nan")


def start(cfg, logpath):
    """kbridge with cfg, and the URL of its HTTP API (read from its log)."""
    log = open(logpath, "w")
    br = subprocess.Popen([kbtest.KBRIDGE, "--config", cfg], stderr=log)
    port = kbtest.wait_for(lambda: re.search(r"http: listening on [^:]+:(\d+)", open(logpath).read()), 60,
                           what="the HTTP API").group(1)
    return br, "http://127.0.0.1:%s" % port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--updates", type=int, default=100000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--secs", type=int, default=15)
    ap.add_argument("--linger", type=int, default=-1, help="linger.ms for both producers (-1: librdkafka's default)")
    a = ap.parse_args()
    kbtest.BUILD = a.build
    kbtest.KBRIDGE = os.path.join(a.build, "kbridge")
    kbtest.KUBESIM = os.path.join(a.build, "kubesim")
    broker = kbtest.KafkaBroker()
    brokers = broker.start()
    sim = kbtest.Sim("--history", "1000000")
    sim.ctl("generate", {"resource": "pods", "namespaces": 10, "count": a.pods, "size": 5200})
    work = tempfile.mkdtemp(prefix="kbkbench-", dir="/dev/shm")
    cfg = os.path.join(work, "k.cfg")
    with open(cfg, "w") as f:
        f.write('cluster = { name = "bench"; server = "%s"; };\nhttp = { listen = "127.0.0.1:0"; };\n'
                'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 500; } );\n'
                'sinks = ( { name = "kafka"; type = "kafka"; brokers = "%s"; %s },\n'
                '          { name = "file"; type = "file"; path = "%s/out.jsonl"; } );\n'
                'routes = ( { informer = "pods"; sink = "kafka"; topic = "bench.pods"; },\n'
                '           { informer = "pods"; sink = "file"; types = [ "ADDED" ]; } );\n' %
                (sim.url, brokers, 'properties = { "linger.ms" = %d; };' % a.linger if a.linger >= 0 else "", work))
    br, url = start(cfg, os.path.join(work, "kbridge.log"))
    kbtest.wait_for(lambda: acked(metrics(url), "kafka") >= a.pods, 300, 0.2, "the initial list in Kafka")

    # 1. backlog throughput
    base = acked(metrics(url), "kafka")
    br.send_signal(signal.SIGSTOP)
    sim.ctl("churn", {"resource": "pods", "count": a.updates, "rate": 0})
    kbtest.wait_for(lambda: not sim.ctl("churn", method="GET").get("running"), 600, 0.2, "the churn")
    cpu0 = cpu_seconds(br.pid)
    t0 = time.monotonic()
    br.send_signal(signal.SIGCONT)
    kbtest.wait_for(lambda: acked(metrics(url), "kafka") >= base + a.updates, 900, 0.1, "the backlog in Kafka")
    secs = time.monotonic() - t0
    cpu = cpu_seconds(br.pid) - cpu0
    rate_kb = a.updates / secs

    # 3. light-load latency (fresh process: the histogram then holds only this phase)
    br.send_signal(signal.SIGTERM)
    br.wait()
    br, url = start(cfg, os.path.join(work, "kbridge2.log"))
    kbtest.wait_for(lambda: acked(metrics(url), "kafka") >= a.pods, 300, 0.2, "the relist in Kafka")
    time.sleep(2)
    m0 = metrics(url)
    sim.ctl("churn", {"resource": "pods", "count": a.rate * a.secs, "rate": a.rate})
    kbtest.wait_for(lambda: not sim.ctl("churn", method="GET").get("running"), a.secs * 4 + 60, 0.2, "the churn")
    time.sleep(2)
    m1 = metrics(url)
    # the histogram also holds the relist; take the difference of the bucket counts
    def diff_q(q):
        rows0 = dict(re.findall(r'kbridge_sink_delivery_seconds_bucket\{[^}]*sink="kafka"[^}]*le="([^"]+)"[^}]*\} (\d+)', m0))
        rows1 = re.findall(r'kbridge_sink_delivery_seconds_bucket\{[^}]*sink="kafka"[^}]*le="([^"]+)"[^}]*\} (\d+)', m1)
        rows = [(le, int(c) - int(rows0.get(le, 0))) for le, c in rows1]
        total = rows[-1][1] if rows else 0
        for le, c in rows:
            if total and c >= q * total:
                return le
        return "?"
    p50, p99 = diff_q(0.50), diff_q(0.99)
    br.send_signal(signal.SIGTERM)
    br.wait()

    # 2. kcat on the same bytes (the file sink's envelopes of this run), same producer settings
    lines = os.path.join(work, "out.jsonl")
    n_lines = sum(1 for _ in open(lines))
    t1 = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "%U %S", "kcat", "-P", "-b", brokers, "-t", "bench.kcat", "-l",
                        "-X", "acks=all", "-X", "enable.idempotence=true"] +
                       (["-X", "linger.ms=%d" % a.linger] if a.linger >= 0 else []) + [lines],
                       capture_output=True, text=True, timeout=900)
    kcat_secs = time.monotonic() - t1
    u, s_ = (float(x) for x in p.stderr.strip().splitlines()[-1].split())
    sim.stop()
    print("machine: %d cores; broker: Kafka (KRaft, loopback) from tests/infra/kafka.sh" % os.cpu_count())
    print("kbridge  simulator backlog -> Kafka: %d events in %.2f s = %.0f events/s; CPU %.1f us/event" %
          (a.updates, secs, rate_kb, cpu * 1e6 / a.updates))
    print("kcat -P  same-size envelopes:        %d events in %.2f s = %.0f events/s; CPU %.1f us/event" %
          (n_lines, kcat_secs, n_lines / kcat_secs, (u + s_) * 1e6 / n_lines))
    print("ratio kbridge/kcat: %.2f" % (rate_kb / (n_lines / kcat_secs)))
    print("linger.ms: %s" % (a.linger if a.linger >= 0 else "librdkafka default (5)"))
    print("latency at %d events/s, watch read -> delivery report: p50 <= %s s, p99 <= %s s (histogram bucket bounds)" %
          (a.rate, p50, p99))


if __name__ == "__main__":
    main()
