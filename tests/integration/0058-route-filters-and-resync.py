"""Route filters through the binary — types, namespace globs, label
selectors — each route writing to its own file; and resync: with
resync_seconds set, a route that lists SYNC receives a SYNC for every cached
object, one that does not list it receives none."""
import json
from kbtest import *


def read(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip()]
    except FileNotFoundError:
        return []


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "team-a", ["a1"], labels={"app": "web", "tier": "front"}) +
             pod_ops("create", "team-b", ["b1"], labels={"app": "db"}) +
             pod_ops("create", "kube-system", ["k1"], labels={"app": "web"}))
    work = tempfile.mkdtemp(prefix="kbroute-")
    f = {n: "%s/%s.jsonl" % (work, n) for n in ("deletes", "teams", "web", "sync")}
    b = Bridge(sim, workdir=work,
               informers=['{ name = "pods"; version = "v1"; resource = "pods"; resync_seconds = 1; }'],
               sinks=['{ name = "%s"; type = "file"; path = "%s"; }' % (n, p) for n, p in f.items()] +
                     ['{ name = "out"; type = "file"; path = "%s/out.jsonl"; }' % work],
               routes=['{ informer = "pods"; sink = "deletes"; types = [ "DELETED" ]; }',
                       '{ informer = "pods"; sink = "teams"; namespaces = [ "team-*" ]; types = [ "ADDED", "MODIFIED", "DELETED" ]; }',
                       '{ informer = "pods"; sink = "web"; label_selector = "app in (web), tier notin (back)"; types = [ "ADDED", "MODIFIED", "DELETED" ]; }',
                       '{ informer = "pods"; sink = "sync"; types = [ "SYNC" ]; }',
                       '{ informer = "pods"; sink = "out"; types = [ "ADDED", "MODIFIED", "DELETED" ]; }'])
    b.wait_converged(sim)
    sim.bulk(pod_ops("delete", "team-b", ["b1"]) + pod_ops("update", "kube-system", ["k1"], labels={"app": "web", "v": "2"}))
    b.wait_converged(sim)
    wait_for(lambda: {e["name"] for e in read(f["sync"])} >= {"a1", "k1"}, 30, what="SYNCs for every cached pod")

    deletes = read(f["deletes"])
    check([(e["type"], e["name"]) for e in deletes] == [("DELETED", "b1")], "deletes only: %s" % deletes)
    teams = {(e["type"], e["namespace"]) for e in read(f["teams"])}
    check(all(ns.startswith("team-") for _, ns in teams) and ("DELETED", "team-b") in teams,
          "namespace glob team-*: %s" % teams)
    web = {e["name"] for e in read(f["web"])}
    check(web == {"a1", "k1"}, "label selector app in (web): %s" % web)
    syncs = read(f["sync"])
    check(all(e["type"] == "SYNC" for e in syncs), "the SYNC route gets only SYNC")
    check(not any(e["type"] == "SYNC" for e in b.events()), "a route without SYNC in types gets none")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
