"""Three kbridge replicas against one API server (sharding.replicas = 3,
index 0, 1 and -1 with HOSTNAME=kbridge-2) each write their own file. Their
outputs partition the keys: every event in replica i's file is for a key whose
64-bit FNV-1a hash of "namespace/name" mod 3 is i, no key appears in two
files, and each file converges to exactly its share of the server's state —
through the initial list and through creates, updates and deletes on the
watch — so together they hold every object once."""
from kbtest import *

REPLICAS = 3


def share(key):
    return fnv1a64(key) % REPLICAS


CONFIG = """cluster = { name = "test"; server = "%s"; };
http = { listen = ""; };
log = { level = "debug"; };
shutdown_timeout = 20;
sharding = { replicas = 3; index = %d; };
informers = ( { name = "pods"; resource = "pods"; page_size = 50; shards = 2; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "pods"; sink = "out"; } );
"""


def server_share(sim, i):
    return {it["key"]: it["resourceVersion"] for it in sim.state()["items"] if share(it["key"]) == i}


def wait_share(sim, b, i):
    wait_replica_share(b, i, lambda: server_share(sim, i))


def test():
    sim = Sim()
    names = {"a": ["p%03d" % n for n in range(120)], "b": ["q%03d" % n for n in range(90)],
             "c": ["web-%d" % n for n in range(60)]}
    sim.bulk([op for ns, ns_names in names.items() for op in pod_ops("create", ns, ns_names, labels={"app": ns})])
    all_keys = {it["key"] for it in sim.state()["items"]}
    counts = [sum(1 for k in all_keys if share(k) == i) for i in range(REPLICAS)]
    check(all(c > 0 for c in counts), "every replica has some of the 270 keys: %s" % counts)

    bridges = [ConfigBridge(CONFIG % (sim.url, 0)), ConfigBridge(CONFIG % (sim.url, 1)),
               ConfigBridge(CONFIG % (sim.url, -1), env={"HOSTNAME": "kbridge-2"})]
    for i, b in enumerate(bridges):
        wait_share(sim, b, i)

    # changes on the watch: updates, deletes and creates spread over all shares
    sim.bulk(pod_ops("update", "a", names["a"][:40], labels={"app": "a", "v": "2"}) +
             pod_ops("delete", "b", names["b"][:30]) +
             pod_ops("create", "d", ["new-%d" % n for n in range(45)]) +
             pod_ops("update", "c", names["c"][::3], labels={"app": "c", "v": "3"}))
    for i, b in enumerate(bridges):
        wait_share(sim, b, i)

    seen = {}
    for i, b in enumerate(bridges):
        check(b.stop() == 0, "replica %d exits 0 on SIGTERM" % i)
        evs = b.events()
        check(evs, "replica %d wrote something" % i)
        wrong = [key_of(e) for e in evs if share(key_of(e)) != i]
        check(not wrong, "replica %d delivered keys of another replica: %s" % (i, wrong[:5]))
        for k in {key_of(e) for e in evs}:
            check(k not in seen, "key %s is in the outputs of replicas %d and %d" % (k, seen.get(k, -1), i))
            seen[k] = i
        assert_rv_monotonic(evs)
        assert_no_repeats(evs)
    check_replicas_cover(bridges, [it["key"] for it in sim.state()["items"]])
    sim.stop()


run(test)
