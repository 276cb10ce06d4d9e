"""SIGHUP reloads the config: an informer and a sink are added, a route is
added and an informer removed, while the unchanged informer keeps running
without a relist; a config that does not validate is refused with a logged
reason and the running one stays in force."""
import json
import signal
from kbtest import *


def write(b, informers, sinks, routes):
    text = open(b.config).read()
    head = text.split("informers = (")[0]
    with open(b.config, "w") as f:
        f.write(head)
        f.write("informers = (\n  %s\n);\n" % ",\n  ".join(informers))
        f.write("sinks = (\n  %s\n);\n" % ",\n  ".join(sinks))
        f.write("routes = (\n  %s\n);\n" % ",\n  ".join(routes))


def lists(sim, path):
    return [r for r in sim.requests() if r["path"] == path and r["query"].get("watch") not in ("true", "1")]


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b"]) +
             [{"op": "create", "resource": "configmaps", "version": "v1", "namespace": "ns1", "name": "cm%d" % i}
              for i in range(3)])
    b = Bridge(sim)
    b.wait_converged(sim)
    out2 = b.dir + "/out2.jsonl"
    pods = '{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; }'
    cms = '{ name = "cms"; version = "v1"; resource = "configmaps"; }'
    sink1 = '{ name = "out"; type = "file"; path = "%s"; }' % b.out
    sink2 = '{ name = "out2"; type = "file"; path = "%s"; }' % out2
    sim.clear_requests()

    # 1. Add an informer and a sink.
    write(b, [pods, cms], [sink1, sink2], ['{ informer = "pods"; sink = "out"; }', '{ informer = "cms"; sink = "out2"; }'])
    b.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reloaded" in b.logtext(), 30, what="the reload")

    def cm_names(path):
        try:
            return {json.loads(l)["name"] for l in open(path) if l.strip()}
        except FileNotFoundError:
            return set()
    wait_for(lambda: cm_names(out2) == {"cm0", "cm1", "cm2"}, 30, what="configmaps in out2")
    check(not lists(sim, "/api/v1/pods"), "the unchanged pods informer did not relist")
    sim.bulk(pod_ops("update", "ns1", ["a"], labels={"after": "reload"}))
    b.wait_converged(sim)

    # 2. A broken config is refused; everything keeps running.
    good = open(b.config).read()
    with open(b.config, "w") as f:
        f.write(good.replace('sink = "out2"', 'sink = "nowhere"'))
    b.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload refused" in b.logtext(), 30, what="the refusal")
    check("nowhere" in b.logtext(), "the refusal names the problem")
    sim.bulk(pod_ops("update", "ns1", ["b"], labels={"still": "running"}))
    b.wait_converged(sim)

    # 3. Remove the pods informer; route configmaps to both sinks.
    write(b, [cms], [sink1, sink2], ['{ informer = "cms"; sink = "out2"; }', '{ informer = "cms"; sink = "out"; }'])
    b.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: b.logtext().count("reloaded") >= 2, 30, what="the second reload")
    n_pods = len([e for e in b.events() if e["resource"] == "pods"])
    sim.bulk(pod_ops("update", "ns1", ["a"], labels={"gone": "yes"}) +
             [{"op": "update", "resource": "configmaps", "version": "v1", "namespace": "ns1", "name": "cm0",
               "data": {"data": {"k": "v"}}}])
    wait_for(lambda: any(e["resource"] == "configmaps" and e["name"] == "cm0" for e in b.events()), 30,
             what="cm0's change in the first sink too")
    check(b.alive(), "still running")
    check(b.stop() == 0, "SIGTERM exits 0")  # drains whatever any informer still had
    check(len([e for e in b.events() if e["resource"] == "pods"]) == n_pods, "the removed informer delivers nothing")
    after = b.logtext().split("removed=1;", 1)[1]
    check("informer=pods " not in after, "nothing of the pods informer after its removal (no stop summary):\n%s"
          % after[-2000:])
    sim.stop()


run(test)
