"""Routes an operator expects: a topic or key may name an object's label or
annotation with a default ({labels.app|none}), and a route may filter on the
kube API's field selectors (status.phase=Running).

Through the binary: an MQTT route in state mode with topic
pods/{labels.app|none}/{annotations.owner|nobody}/{name} leaves one retained
message per pod on the topic made of its own label and annotation (the
defaults for a pod without them); a file route with
field_selector = "status.phase=Running" and key = "{labels.app|none}"
(CloudEvents partitionkey) carries only changes whose object is Running —
as a label selector does, the filter holds per change: a pod that becomes
Running enters, a change that leaves Running is not sent. And `--check`
names a field the resource does not have, with FILE:LINE."""
import subprocess
from kbtest import *


def read(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except FileNotFoundError:
        return []


def phase(p):
    return {"status": {"phase": p}}


def test():
    broker = Mosquitto()
    sim = Sim()
    sim.bulk(pod_ops("create", "team-a", ["web-1"], labels={"app": "web"},
                     extra={"metadata": {"annotations": {"owner": "shop"}}, "status": {"phase": "Running"}}) +
             pod_ops("create", "team-a", ["db-1"], labels={"app": "db"}, extra=phase("Pending")) +
             pod_ops("create", "team-a", ["bare-1"], extra=phase("Running")))
    work = tempfile.mkdtemp(prefix="kbroute-")
    running = os.path.join(work, "running.jsonl")
    b = Bridge(sim, workdir=work,
               informers=['{ name = "pods"; version = "v1"; resource = "pods"; }'],
               sinks=['{ name = "mqtt"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0059"; qos = 1; }' % broker.uri,
                      '{ name = "running"; type = "file"; path = "%s"; }' % running,
                      '{ name = "out"; type = "file"; path = "%s/out.jsonl"; }' % work],
               routes=['{ informer = "pods"; sink = "mqtt"; mode = "state"; '
                       'topic = "pods/{labels.app|none}/{annotations.owner|nobody}/{name}"; }',
                       '{ informer = "pods"; sink = "running"; field_selector = "status.phase=Running"; '
                       'key = "{labels.app|none}"; format = "cloudevents-structured"; '
                       'types = [ "ADDED", "MODIFIED", "DELETED" ]; }',
                       '{ informer = "pods"; sink = "out"; }'])
    b.wait_converged(sim)

    want_topics = {"pods/web/shop/web-1", "pods/db/nobody/db-1", "pods/none/nobody/bare-1"}
    wait_for(lambda: set(broker.retained("pods/#")) == want_topics, 60, 0.5,
             "one retained message per pod on pods/{labels.app|none}/{annotations.owner|nobody}/{name}")

    # db-1 becomes Running (enters the route), web-1 leaves Running (not sent).
    sim.bulk(pod_ops("update", "team-a", ["db-1"], extra=phase("Running")) +
             pod_ops("update", "team-a", ["web-1"], extra=phase("Succeeded")))
    b.wait_converged(sim)
    wait_for(lambda: "db-1" in {e["data"]["metadata"]["name"] for e in read(running)}, 30,
             what="db-1 entering the Running route")
    got = read(running)
    check(all(e["data"]["status"]["phase"] == "Running" for e in got),
          "the field-selector route carries only Running objects: %s"
          % [(e["data"]["metadata"]["name"], e["data"]["status"]["phase"]) for e in got])
    names = {e["data"]["metadata"]["name"]: e["partitionkey"] for e in got}
    check(names == {"web-1": "web", "bare-1": "none", "db-1": "db"},
          "Running pods with their app label as the key: %s" % names)
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()

    cfg = os.path.join(work, "bad.cfg")
    with open(cfg, "w") as f:
        f.write('cluster = { name = "t"; server = "http://127.0.0.1:1"; };\n'
                'informers = ( { name = "deploys"; group = "apps"; resource = "deployments"; } );\n'
                'sinks = ( { name = "out"; type = "file"; path = "%s/x.jsonl"; } );\n'
                'routes = ( { informer = "deploys"; sink = "out";\n'
                '             field_selector = "status.phase=Running"; } );\n' % work)
    p = subprocess.run([KBRIDGE, "--config", cfg, "--check"], capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    check(p.returncode != 0 and "bad.cfg:5" in out
          and '"status.phase" is not a known field selector: only "metadata.name", "metadata.namespace"' in out,
          "--check names the unknown field with FILE:LINE, in the API server's words (rc %d): %s" % (p.returncode, out))


run(test)
