"""Server-side sharding (sharding.server_side) against kubesim, three replicas.

With the gate on (kubesim --sharded-list on), every list and watch a replica
sends carries shardSelector=shardRange(object.metadata.uid, …) for its third
of [0, 2^64); each replica receives only its share (shardForeign stays 0 in
/v1/informers, "sharding": "server"), one replica pages and two stream, and
through creates, updates, deletes and re-created names (new uids) each output
converges to exactly the objects whose FNV-1a 64 of the uid is in its range:
together every object once, every incarnation in one output only.

With the gate off (kubesim ignores the parameter, as kube-apiserver does),
"auto" sees objects of other replicas arrive, says once that the server
ignored shardSelector, stops asking, and filters by the same ranges, so the
outputs are the same shares; "on" keeps asking and reports the error.

With server_field = "namespace" (gate on) the ranges are over the namespace's
hash: each replica gets whole namespaces, and a re-created name never moves."""
from kbtest import *

REPLICAS = 3


FIELD = {"name": "uid"}  # the phase's sharding.server_field


def owner(ns, uid):
    return range_shard(ns if FIELD["name"] == "namespace" else uid, REPLICAS)


def selector(i):
    return shard_selector(i, REPLICAS, FIELD["name"])


def item_owner(it):  # an item of kubesim's /_sim/state
    return owner(it["key"].split("/", 1)[0], it["uid"])


CONFIG = """cluster = { name = "test"; server = "%s"; };
http = { listen = "127.0.0.1:0"; };
log = { level = "debug"; };
shutdown_timeout = 20;
sharding = { replicas = 3; index = %d; server_side = "%s"; server_field = "%s"; };
informers = ( { name = "pods"; resource = "pods"; page_size = 40; list_mode = "%s"; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "pods"; sink = "out"; } );
"""


def server_share(sim, i):
    return {it["key"]: it["resourceVersion"] for it in sim.state()["items"] if item_owner(it) == i}


def wait_share(sim, b, i):
    wait_replica_share(b, i, lambda: server_share(sim, i))


def churn(sim, names, a, b, d):
    """Updates, deletes, names deleted and created again (a new uid each), new names."""
    recreated = names[a][40:70]
    sim.bulk(pod_ops("update", a, names[a][:40], labels={"app": "a", "v": "2"}) +
             pod_ops("delete", a, recreated) + pod_ops("delete", b, names[b][:30]) +
             pod_ops("create", d, ["new-%d" % n for n in range(45)]))
    sim.bulk(pod_ops("create", a, recreated, labels={"app": "a", "v": "again"}))
    return recreated


def run_replicas(sim, modes, list_modes, namespaces=("a", "b", "d")):
    a, b, d = namespaces
    names = {a: ["p%03d" % n for n in range(120)], b: ["q%03d" % n for n in range(90)]}
    sim.bulk([op for ns, ns_names in names.items() for op in pod_ops("create", ns, ns_names)] +
             pod_ops("create", d, ["old-%d" % n for n in range(20)]))
    counts = [sum(1 for it in sim.state()["items"] if item_owner(it) == i) for i in range(REPLICAS)]
    check(all(c > 0 for c in counts), "every replica owns some of the 230 objects: %s" % counts)
    bridges = [ConfigBridge(CONFIG % (sim.url, i, modes[i], FIELD["name"], list_modes[i])) for i in range(REPLICAS)]
    for i, br in enumerate(bridges):
        wait_share(sim, br, i)
    before = {it["key"]: it["uid"] for it in sim.state()["items"]}
    recreated = churn(sim, names, a, b, d)
    after = {it["key"]: it["uid"] for it in sim.state()["items"]}
    moved = [k for k in (a + "/" + n for n in recreated) if owner(a, before[k]) != owner(a, after[k])]
    check(bool(moved) == (FIELD["name"] == "uid"), "re-created names changed replica by uid only: %s" % moved)
    print("shares %s; %d of %d re-created names moved to another replica" % (counts, len(moved), len(recreated)))
    for i, br in enumerate(bridges):
        wait_share(sim, br, i)
    return bridges, moved


def check_outputs(sim, bridges, moved):
    seen = {}
    for i, b in enumerate(bridges):
        check(b.stop() == 0, "replica %d exits 0 on SIGTERM" % i)
        evs = b.events()
        wrong = [key_of(e) for e in evs if owner(e["namespace"], e["uid"]) != i]
        check(not wrong, "replica %d delivered objects of another replica: %s" % (i, wrong[:5]))
        for inc in {(key_of(e), e["uid"]) for e in evs}:
            check(inc not in seen, "%s is in the outputs of replicas %d and %d" % (inc, seen.get(inc, -1), i))
            seen[inc] = i
        assert_rv_monotonic(evs)
        assert_no_repeats(evs)
    # A moved name: its old incarnation's DELETED on one replica, the new ADDED on another.
    for k in moved:
        owners = {seen[inc] for inc in seen if inc[0] == k}
        check(len(owners) == 2, "%s: its two incarnations went to two replicas: %s" % (k, owners))
    check_replicas_cover(bridges, [it["key"] for it in sim.state()["items"]])


def pod_requests(sim):
    return [r for r in sim.requests() if r["path"] == "/api/v1/pods"]


def gate_on(namespaces=("a", "b", "d")):
    sim = Sim("--sharded-list", "on")
    bridges, moved = run_replicas(sim, ["auto", "auto", "on"], ["stream", "paged", "auto"], namespaces)
    for i, b in enumerate(bridges):
        doc = b.informer_doc()
        check(doc["sharding"] == "server" and doc["shardBy"] == FIELD["name"], "replica %d: %s" % (i, doc))
        check(doc["shardForeign"] == 0, "replica %d received %d objects of others" % (i, doc["shardForeign"]))
        check("ignored shardSelector" not in b.logtext(), "replica %d logged a fallback" % i)
    reqs = pod_requests(sim)
    check(reqs and all(r["query"].get("shardSelector") in [selector(i) for i in range(REPLICAS)] for r in reqs),
          "every list and watch asked for a shard: %s" % [r["query"] for r in reqs if "shardSelector" not in
                                                         r["query"]][:3])
    kinds = {(r["query"].get("shardSelector"), "watch" if r["query"].get("watch") else "list") for r in reqs}
    for i in range(REPLICAS):
        check((selector(i), "watch") in kinds, "replica %d watched its shard" % i)
    check((selector(1), "list") in kinds, "replica 1 (list_mode paged) listed its shard in pages")
    check_outputs(sim, bridges, moved)
    print("gate on, by %s: %d pod list/watch requests, each with its replica's shardSelector"
          % (FIELD["name"], len(reqs)))
    sim.stop()


def gate_off():
    sim = Sim()  # kubesim, like kube-apiserver, ignores shardSelector by default
    bridges, moved = run_replicas(sim, ["auto", "auto", "on"], ["stream", "paged", "auto"])
    foreign = []
    for i, b in enumerate(bridges):
        doc = b.informer_doc()
        check(doc["sharding"] == "client" and doc["shardForeign"] > 0, "replica %d: %s" % (i, doc))
        foreign.append(doc["shardForeign"])
        log = b.logtext()
        if i < 2:
            check(log.count("the server ignored shardSelector") == 1, "replica %d: said once:\n%s" % (i, log[-3000:]))
        else:
            check("ignores shardSelector" in doc["lastError"], "replica 2 (on) reports it: %s" % doc["lastError"])
    reqs = pod_requests(sim)
    asked = [r["query"].get("shardSelector") for r in reqs]
    # The paged replica finds out on its first page and asks no more: later pages and its watch go without.
    check(asked.count(selector(1)) == 1, "replica 1 asked once: %d" % asked.count(selector(1)))
    check(any(r["query"].get("watch") and "sendInitialEvents" not in r["query"] and "shardSelector" not in r["query"]
              for r in reqs), "replica 1 watches without shardSelector after its fallback")
    check_outputs(sim, bridges, moved)
    print("gate off: objects of other replicas received and dropped: %s" % foreign)
    sim.stop()


def test():
    gate_on()
    gate_off()
    # FNV-1a's top bits mix short names poorly ("a", "b", … all land in the last third): namespaces
    # chosen so each replica has one.
    FIELD["name"] = "namespace"
    gate_on(("kube-node-lease", "kube-public", "default"))


run(test)
