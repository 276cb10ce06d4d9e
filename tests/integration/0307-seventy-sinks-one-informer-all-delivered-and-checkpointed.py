"""Routes and sinks per informer have no fixed cap: 70 routes of one informer into 70 file sinks.

Every change reaches every sink's file, each sink has its own watermark in /v1/informers, and the
checkpoint (state_dir) reaches the newest change. Before, the bridge took at most 64 routes per
event (the rest were skipped in silence) and the ledger kept at most 64 sinks (the others got no
watermark: the checkpoint never waited for them); /metrics named only 64 routes' suppressed no-ops.
--check accepts the config."""
import subprocess
from kbtest import *

N = 70


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%02d" % i for i in range(20)]))
    work = tempfile.mkdtemp(prefix="kb70-")
    paths = [os.path.join(work, "s%02d.jsonl" % i) for i in range(N)]
    b = Bridge(sim, workdir=work, start=False, http='listen = "127.0.0.1:0";',
               extra='state_dir = "%s/state";' % work,
               sinks=['{ name = "s%02d"; type = "file"; path = "%s"; }' % (i, p) for i, p in enumerate(paths)],
               routes=['{ name = "r%02d"; informer = "pods"; sink = "s%02d"; suppress_noop = true; }' % (i, i)
                       for i in range(N)])
    chk = subprocess.run([KBRIDGE, "--check", "--config", b.config], capture_output=True, text=True, timeout=60)
    check(chk.returncode == 0, "--check accepts 70 routes into 70 sinks: %s" % chk.stderr)
    b.start()
    sim.bulk(pod_ops("update", "ns1", ["p00", "p01"], labels={"x": "1"}) + pod_ops("delete", "ns1", ["p02"]))

    def want():
        return {i["key"]: i["resourceVersion"] for i in sim.state("pods")["items"]}

    def sink_views():
        return [{k: e["resourceVersion"] for k, e in view(read_jsonl(p)).items()} for p in paths]

    def all_sinks_converged():
        w = want()
        return all(v == w for v in sink_views())
    try:
        wait_for(all_sinks_converged, 60, 0.2, "every one of the 70 sinks to hold the server's state")
    except Failure:
        w = want()
        behind = [i for i, v in enumerate(sink_views()) if v != w]
        raise Failure("sinks not converged: %s\n%s" % (["s%02d" % i for i in behind], b.logtext()[-2000:]))

    def checkpointed():
        doc = b.informer_doc()
        return doc["checkpoint"]["seq"] == doc["seq"] and len(doc["sinks"]) == N and \
            all(s["watermark"] == doc["seq"] for s in doc["sinks"]) and doc
    try:
        doc = wait_for(checkpointed, 30, 0.2, "the checkpoint and all 70 sink watermarks to reach the newest change")
    except Failure:
        doc = b.informer_doc()
        raise Failure("checkpoint %s, seq %s, %d sink watermarks: %s" % (
            doc["checkpoint"], doc["seq"], len(doc["sinks"]), doc["sinks"][-8:]))
    check(sorted(s["name"] for s in doc["sinks"]) == ["s%02d" % i for i in range(N)], "every sink is listed")
    check("no watermark of its own" not in b.logtext(), "no sink went without a watermark")
    check(b.metric("kbridge_noop_suppressed_total", informer="pods", route="r%02d" % (N - 1)) == 0,
          "/metrics counts suppressed no-ops for the 70th route too")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
