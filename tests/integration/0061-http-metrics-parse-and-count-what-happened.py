"""/metrics is Prometheus text that the real Python parser
(prometheus_client.parser) reads, with HELP and TYPE for every family, and
its numbers are what the test did: objects in the cache, changes by type,
messages the file sink acknowledged (= lines in its file), histogram counts,
nothing pending and no checkpoint lag once everything is delivered."""
import subprocess
from kbtest import *

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # CI has PyPI; tests/deps.sh installs it too
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "prometheus-client"], check=True, timeout=300)
    from prometheus_client.parser import text_string_to_metric_families

REQUIRED = ["kbridge_informer_objects", "kbridge_informer_synced", "kbridge_informer_pending_deltas",
            "kbridge_informer_relists", "kbridge_watch_events", "kbridge_watch_errors",
            "kbridge_handle_duration_seconds", "kbridge_sink_messages", "kbridge_sink_delivery_seconds",
            "kbridge_sink_queue_bytes", "kbridge_checkpoint_lag_seconds", "kbridge_cache_bytes",
            "kbridge_rv_regressions"]


def scrape(url):
    code, hdrs, body = http_request(url + "/metrics")
    check(code == 200, "/metrics -> %d" % code)
    check(hdrs.get("Content-Type", "").startswith("text/plain; version=0.0.4"), "content type %r" %
          hdrs.get("Content-Type"))
    text = body.decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
            check("# HELP %s " % name in text, "HELP for %s" % name)
    return fams


def value(fams, family, sample=None, **labels):
    f = fams[family]
    got = [s.value for s in f.samples
           if (sample is None or s.name == sample) and all(s.labels.get(k) == v for k, v in labels.items())]
    check(len(got) == 1, "one sample of %s%s %r, got %r" % (family, "/" + sample if sample else "", labels, got))
    return got[0]


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%02d" % i for i in range(10)]))
    work = tempfile.mkdtemp(prefix="kbmetrics-")
    b = Bridge(sim, workdir=work, extra='state_dir = "%s/state";' % work, http='listen = "127.0.0.1:0";')
    url = b.http_url()
    b.wait_converged(sim)
    sim.bulk(pod_ops("update", "ns1", ["p00", "p01", "p02"], labels={"v": "2"}) +
             pod_ops("delete", "ns1", ["p08", "p09"]) + pod_ops("create", "ns2", ["q0", "q1", "q2", "q3"]))
    b.wait_converged(sim)
    lines = len(b.events())
    check(lines == 19, "19 changes written: %d" % lines)

    def settled():
        fams = scrape(url)
        done = (value(fams, "kbridge_sink_messages", result="acked", sink="out") == lines and
                value(fams, "kbridge_informer_pending_deltas", informer="pods") == 0 and
                value(fams, "kbridge_checkpoint_lag_seconds", informer="pods") == 0)
        return done and fams
    fams = wait_for(settled, 30, 0.1, "every change acknowledged in the metrics")

    for name in REQUIRED:
        check(name in fams, "metric family %s is exposed" % name)
    check(fams["kbridge_handle_duration_seconds"].type == "histogram", "handle duration is a histogram")
    check(fams["kbridge_sink_delivery_seconds"].type == "histogram", "delivery is a histogram")

    p = {"informer": "pods"}
    check(value(fams, "kbridge_informer_objects", **p) == 12, "12 objects cached")
    check(value(fams, "kbridge_informer_synced", **p) == 1, "synced")
    check(value(fams, "kbridge_informer_relists", **p) == 0, "no relist")
    check(value(fams, "kbridge_rv_regressions", **p) == 0, "no RV regression")
    check(value(fams, "kbridge_cache_bytes", **p) > 0, "cache bytes counted")
    want = {"ADDED": 14, "MODIFIED": 3, "DELETED": 2, "SYNC": 0, "SNAPSHOT": 0}
    for t, n in want.items():
        check(value(fams, "kbridge_watch_events", type=t, **p) == n, "%d %s events" % (n, t))
    for s in fams["kbridge_watch_errors"].samples:
        check(s.value == 0, "no watch errors: %s" % (s,))
    check(value(fams, "kbridge_sink_messages", result="failed", sink="out") == 0, "nothing failed")
    check(value(fams, "kbridge_sink_queue_bytes", sink="out") == 0, "nothing queued in the sink")
    check(value(fams, "kbridge_sink_connected", sink="out") == 1, "the file sink is connected")

    # Histograms: counts match what happened, buckets are cumulative and end in +Inf == count.
    for t, n in want.items():
        h = [s for s in fams["kbridge_handle_duration_seconds"].samples if s.labels.get("type") == t]
        count = [s.value for s in h if s.name.endswith("_count")][0]
        check(count == n, "handle_duration count for %s: %s, want %d" % (t, count, n))
        buckets = [s for s in h if s.name.endswith("_bucket")]
        vals = [s.value for s in buckets]
        check(vals == sorted(vals) and buckets[-1].labels["le"] == "+Inf" and vals[-1] == count,
              "cumulative buckets for %s: %r" % (t, vals))
    d = [s for s in fams["kbridge_sink_delivery_seconds"].samples if s.labels.get("sink") == "out"]
    dcount = [s.value for s in d if s.name.endswith("_count")][0]
    check(dcount == lines, "delivery histogram counts every acknowledged change: %s vs %d" % (dcount, lines))
    dsum = [s.value for s in d if s.name.endswith("_sum")][0]
    check(dsum > 0, "delivery took some time: %s" % dsum)

    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
