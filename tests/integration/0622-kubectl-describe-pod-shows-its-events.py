"""`kubectl describe pod` pointed at kbridge lists the pod's events, as it
does against the API server: it asks for them with an involvedObject.*
field selector (name, namespace, uid, kind), and kbridge answers with
exactly the events about that pod — not those about a pod of the same name
in another namespace, nor those about another pod."""
from kbtest import *


def event(ns, name, pod, uid, reason, message, etype="Normal"):
    return {"op": "create", "resource": "events", "version": "v1", "namespace": ns, "name": name,
            "data": {"involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": ns, "name": pod, "uid": uid},
                     "reason": reason, "message": message, "type": etype, "count": 1,
                     "source": {"component": "default-scheduler" if reason == "Scheduled" else "kubelet"},
                     "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"}}


def test():
    sim = Sim()
    sim.bulk([{"op": "create", "resource": "pods", "version": "v1", "namespace": ns, "name": n,
               "data": {"spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox"}]},
                        "status": {"phase": "Running"}}}
              for ns, n in (("ns1", "web"), ("ns1", "db"), ("ns2", "web"))])
    uid = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["uid"]
           for p in json.loads(sim.request("GET", "/api/v1/pods")[1])["items"]}
    sim.bulk([event("ns1", "web.1", "web", uid[("ns1", "web")], "Scheduled", "assigned ns1/web to node-1"),
              event("ns1", "web.2", "web", uid[("ns1", "web")], "BackOff", "restarting the web container",
                    "Warning"),
              event("ns1", "db.1", "db", uid[("ns1", "db")], "Killing", "stopping the db container"),
              event("ns2", "web.1", "web", uid[("ns2", "web")], "Pulled", "image pulled in ns2")])
    b = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; }',
                               '{ name = "events"; version = "v1"; resource = "events"; }'],
               http='listen = "127.0.0.1:0";')
    url = b.http_url()
    b.wait_converged(sim)
    b.wait_converged(sim, resource="events")
    k = Kubectl(url, b.dir)
    out = k.run("describe", "pod", "web", "-n", "ns1").stdout
    events = out[out.find("\nEvents:"):]
    check("assigned ns1/web to node-1" in events and "restarting the web container" in events,
          "describe pod web shows none of its events:\n%s" % out[-1500:])
    check("Warning  BackOff" in events and "Normal   Scheduled" in events, "event rows:\n%s" % events)
    check("stopping the db container" not in out and "image pulled in ns2" not in out,
          "describe pod web shows another pod's events:\n%s" % events)
    b.stop()
    sim.stop()


run(test)
