#!/usr/bin/env python3
"""Benchmark (not a test): the simulator's watch stream through kbridge into a
real Mosquitto, once per MQTT client library, against `mosquitto_pub -l`
publishing the same bytes at the same QoS, in the same run.

For each client (paho, mosquitto):
  1. kbridge lists PODS pods into Mosquitto (mode events, one topic per object);
  2. kbridge is stopped (SIGSTOP) while the simulator makes UPDATES updates,
     then continued: events/s and kbridge CPU µs/event until its own
     acknowledgements (/metrics kbridge_sink_messages_total, result="acked")
     cover the backlog.
Then mosquitto_pub -l -V 5 -q QOS on UPDATES envelopes of the run (the initial
list's, from a file sink of the same kbridge that takes ADDED only, so it does
no work during the backlog), and the ratio of each client to it. kbridge's CPU
is the whole process (watch decoding, routing, the sink), mosquitto_pub's only
publishing.

Usage: bench/mqtt_pipeline.py [--build build] [--pods 5000] [--updates 50000] [--size 500] [--qos 1]
"""
import argparse
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
from kafka_pipeline import cpu_seconds, start  # noqa: E402  (same helpers, same measure)

def acked(url, sink):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(r'kbridge_sink_messages_total\{[^}]*sink="%s"[^}]*result="acked"[^}]*\} (\d+)' % sink, text)
    return int(m.group(1)) if m else 0


def run_client(a, sim, broker, client, work):
    """Backlog throughput of one client: (events/s, CPU µs/event)."""
    cfg = os.path.join(work, "%s.cfg" % client)
    with open(cfg, "w") as f:
        f.write('cluster = { name = "bench"; server = "%s"; };\nhttp = { listen = "127.0.0.1:0"; };\n'
                'informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 500; } );\n'
                'sinks = ( { name = "mqtt"; type = "mqtt"; client = "%s"; uri = "%s"; client_id = "kb-pipe-%s";'
                ' qos = %d; },\n'
                '          { name = "file"; type = "file"; path = "%s/%s.jsonl"; } );\n'
                'routes = ( { informer = "pods"; sink = "mqtt"; topic = "bench/{namespace}/{name}"; },\n'
                '           { informer = "pods"; sink = "file"; types = [ "ADDED" ]; } );\n' %
                (sim.url, client, broker.uri, client, a.qos, work, client))
    br, url = start(cfg, os.path.join(work, "%s.log" % client))
    kbtest.wait_for(lambda: acked(url, "mqtt") >= a.pods, 300, 0.2, "the initial list in Mosquitto")
    base = acked(url, "mqtt")
    br.send_signal(signal.SIGSTOP)
    sim.ctl("churn", {"resource": "pods", "count": a.updates, "rate": 0})
    kbtest.wait_for(lambda: not sim.ctl("churn", method="GET").get("running"), 600, 0.2, "the churn")
    cpu0 = cpu_seconds(br.pid)
    t0 = time.monotonic()
    br.send_signal(signal.SIGCONT)
    kbtest.wait_for(lambda: acked(url, "mqtt") >= base + a.updates, 900, 0.05, "the backlog in Mosquitto")
    secs = time.monotonic() - t0
    cpu = cpu_seconds(br.pid) - cpu0
    br.send_signal(signal.SIGTERM)
    br.wait()
    return a.updates / secs, cpu * 1e6 / a.updates


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--updates", type=int, default=50000)
    ap.add_argument("--size", type=int, default=500, help="object size in the simulator (bytes)")
    ap.add_argument("--qos", type=int, default=1)
    ap.add_argument("--clients", default="paho,mosquitto")
    a = ap.parse_args()
    kbtest.BUILD = a.build
    kbtest.KBRIDGE = os.path.join(a.build, "kbridge")
    kbtest.KUBESIM = os.path.join(a.build, "kubesim")
    broker = kbtest.Mosquitto()
    sim = kbtest.Sim("--history", "1000000")
    sim.ctl("generate", {"resource": "pods", "namespaces": 10, "count": a.pods, "size": a.size})
    work = tempfile.mkdtemp(prefix="kbmbench-", dir="/dev/shm")
    results = [(c, run_client(a, sim, broker, c, work)) for c in a.clients.split(",")]

    # mosquitto_pub on the same bytes: the ADDED envelopes of the initial list (written by the file sink,
    # which sees nothing during the backlog phase), repeated up to the backlog's count
    with open(os.path.join(work, "%s.jsonl" % a.clients.split(",")[-1])) as f:
        added = f.read().splitlines()
    lines = os.path.join(work, "pub.lines")
    with open(lines, "w") as f:
        for i in range(a.updates):
            f.write(added[i % len(added)] + "\n")
    n_lines = a.updates
    size = sum(len(x) for x in added) // max(len(added), 1)
    t1 = time.monotonic()
    with open(lines) as f:
        p = subprocess.run(["/usr/bin/time", "-f", "%U %S", "mosquitto_pub"] + broker.client_args +
                           ["-V", "5", "-q", str(a.qos), "-t", "bench/pub", "-l"], stdin=f,
                           capture_output=True, text=True, timeout=900)
    pub_secs = time.monotonic() - t1
    u, s_ = (float(x) for x in p.stderr.strip().splitlines()[-1].split())
    pub_rate = n_lines / pub_secs
    sim.stop()
    print("machine: %d cores, load %s; broker: Mosquitto (loopback) from tests/infra/mosquitto.sh"
          % (os.cpu_count(), " ".join(open("/proc/loadavg").read().split()[:3])))
    print("simulator -> kbridge -> Mosquitto, QoS %d, envelopes ~%d B, backlog of %d updates"
          % (a.qos, size, a.updates))
    for client, (rate, cpu) in results:
        print("kbridge/%-10s %9.0f events/s  CPU %6.1f us/event  ratio %3.0f %%"
              % (client, rate, cpu, 100 * rate / pub_rate))
    print("mosquitto_pub -l   %9.0f events/s  CPU %6.1f us/event  (%d envelopes)"
          % (pub_rate, (u + s_) * 1e6 / n_lines, n_lines))


if __name__ == "__main__":
    main()
