#!/usr/bin/env python3
"""Against a real kube-apiserver 1.36: two replicas with sharding.server_side =
"auto" share 300 ConfigMaps under churn (updates, deletes, names deleted and
created again with new uids, new names), one streaming its list and one
paging it.

With --feature-gates=ShardedListAndWatch=true the server answers a list with
shardSelector with metadata.shardInfo and only that range, and the replicas
receive only their own objects (shardForeign 0, "sharding": "server"). With
the gate off (the default) the server ignores the parameter: the replicas
say so, filter by the same uid ranges, and end up with the same shares.
Either way every object is in exactly one replica's output, each
incarnation of a name in one output only, and the outputs converge to the
server's state."""
import os
import signal

from kbtest import (ConfigBridge, ControlPlane, assert_no_repeats, assert_rv_monotonic, check, key_of, run,
                    shard_selector, range_shard, wait_replica_share)

N = 300
REPLICAS = 2
CMS = "/api/v1/namespaces/bulk/configmaps"

CONFIG = """
cluster = { name = "real"; kubeconfig = "%s"; };
http = { listen = "127.0.0.1:0"; };
shutdown_timeout = 20;
log = { level = "info"; };
sharding = { replicas = 2; index = %d; server_side = "auto"; };
informers = ( { name = "cms"; version = "v1"; resource = "configmaps"; namespaces = [ "bulk" ]; page_size = 60;
                list_mode = "%s"; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "cms"; sink = "out"; } );
"""


def objects(cp):
    """{key: (resourceVersion, uid)} of the namespace's ConfigMaps."""
    status, body = cp.request("GET", CMS)
    check(status == 200, "list: %d" % status)
    return {"bulk/" + i["metadata"]["name"]: (i["metadata"]["resourceVersion"], i["metadata"]["uid"])
            for i in body["items"]}


def share(cp, i):
    return {k: rv for k, (rv, uid) in objects(cp).items() if range_shard(uid, REPLICAS) == i}


def wait_share(cp, b, i):
    wait_replica_share(b, i, lambda: share(cp, i), timeout=240, interval=0.5)


def cm(name, v):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": v}}


def churn(cp, lo, hi):
    """Over cm-<lo>..cm-<hi>: update the first third, delete the rest, create half of those again."""
    names = ["cm-%05d" % i for i in range(lo, hi)]
    third = len(names) // 3
    for n in names[:third]:
        st, _ = cp.request("PUT", CMS + "/" + n, cm(n, "updated"))
        check(st == 200, "update %s: %d" % (n, st))
    for n in names[third:]:
        st, _ = cp.request("DELETE", CMS + "/" + n)
        check(st == 200, "delete %s: %d" % (n, st))
    again = names[third:third + (len(names) - third) // 2]
    for n in again:
        st, _ = cp.request("POST", CMS, cm(n, "again"))
        check(st == 201, "create %s again: %d" % (n, st))
    return again


def probe(cp, gate_on):
    """What the server itself answers to a list with shardSelector."""
    from urllib.parse import quote
    sel = shard_selector(0, REPLICAS)
    status, body = cp.request("GET", CMS + "?shardSelector=" + quote(sel))
    check(status == 200, "list with shardSelector: %d %s" % (status, str(body)[:300]))
    info = body["metadata"].get("shardInfo")
    mine = all(range_shard(i["metadata"]["uid"], REPLICAS) == 0 for i in body["items"])
    print("gate %s: list with shardSelector -> %d items, metadata.shardInfo=%s, all in the range: %s"
          % ("on" if gate_on else "off", len(body["items"]), info, mine))
    if gate_on:
        check(info == {"selector": sel} and mine, "the server filtered and said so")
    else:
        check(info is None and not mine, "the server ignored the parameter")


def scenario(gate_on):
    if gate_on:
        os.environ["KB_APISERVER_EXTRA_ARGS"] = "--feature-gates=ShardedListAndWatch=true"
    else:
        os.environ.pop("KB_APISERVER_EXTRA_ARGS", None)
    cp = ControlPlane()
    try:
        cp.kubectl("create", "namespace", "bulk")
        cp.create_configmaps("bulk", N)
        probe(cp, gate_on)
        before = objects(cp)
        bridges = [ConfigBridge(CONFIG % (cp.kubeconfig, i, mode)) for i, mode in enumerate(["stream", "paged"])]
        churn(cp, 0, 60)  # while the replicas list; then once more on their watches
        for i, b in enumerate(bridges):
            wait_share(cp, b, i)
        again = churn(cp, 60, 150)
        for i, b in enumerate(bridges):
            wait_share(cp, b, i)
        after = objects(cp)
        moved = [k for k in ("bulk/" + n for n in again)
                 if range_shard(before[k][1], REPLICAS) != range_shard(after[k][1], REPLICAS)]
        seen, foreign = {}, []
        for i, b in enumerate(bridges):
            doc = b.informer_doc()
            foreign.append(doc["shardForeign"])
            if gate_on:
                check(doc["sharding"] == "server" and doc["shardForeign"] == 0, "replica %d: %s" % (i, doc))
            else:
                check(doc["sharding"] == "client" and doc["shardForeign"] > 0, "replica %d: %s" % (i, doc))
                check(b.logtext().count("the server ignored shardSelector") == 1, "replica %d said it once" % i)
            check(b.stop(signal.SIGTERM) == 0, "replica %d exits 0" % i)
            evs = b.events()
            wrong = [key_of(e) for e in evs if range_shard(e["uid"], REPLICAS) != i]
            check(not wrong, "replica %d delivered objects of the other: %s" % (i, wrong[:5]))
            for inc in {(key_of(e), e["uid"]) for e in evs}:
                check(inc not in seen, "%s in the outputs of replicas %d and %d" % (inc, seen.get(inc, -1), i))
                seen[inc] = i
            assert_rv_monotonic(evs)
            assert_no_repeats(evs)
        for k in moved:
            check(len({seen[inc] for inc in seen if inc[0] == k}) == 2, "%s: two incarnations, two replicas" % k)
        live = {(k, uid) for k, (rv, uid) in after.items()}
        check(live <= set(seen), "every live object was delivered: missing %s" % sorted(live - set(seen))[:5])
        print("gate %s: shares %s, foreign received %s, %d of %d re-created names moved replica"
              % ("on" if gate_on else "off", [len(share(cp, i)) for i in range(REPLICAS)], foreign, len(moved),
                 len(again)))
    finally:
        cp.stop()


def test():
    scenario(gate_on=True)
    scenario(gate_on=False)


run(test)
