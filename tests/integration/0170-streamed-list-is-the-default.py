"""With list_mode left at its default (auto) the initial sync is a streamed
list: one watch with sendInitialEvents=true, resourceVersionMatch=NotOlderThan
and allowWatchBookmarks=true and no resourceVersion, no list request at all;
the objects before the initial-events-end bookmark become the cache, and the
changes after it arrive on the same stream. Progress is logged while syncing,
and kbridge_informer_sync_objects is 0 once synced."""
import os

from kbtest import *


def is_watch(r):
    return r["query"].get("watch") in ("true", "1")


def test():
    os.environ["KB_TEST_SYNC_PROGRESS_MS"] = "0"  # a progress line per chunk, so a small sync shows one
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(300)]) +
             pod_ops("create", "ns2", ["q%03d" % i for i in range(50)]))
    b = Bridge(sim, http='listen = "127.0.0.1:0";')
    b.wait_converged(sim)
    evs = b.events()
    check(len(evs) == 350 and all(e["type"] == "ADDED" for e in evs), "350 ADDED after the sync, got %d" % len(evs))
    reqs = [r for r in sim.requests() if r["path"] == "/api/v1/pods"]
    check(not [r for r in reqs if not is_watch(r)], "no list request: %s" % [r["query"] for r in reqs])
    check(len(reqs) == 1, "one watch request, saw %d" % len(reqs))
    q = reqs[0]["query"]
    check(q.get("sendInitialEvents") == "true" and q.get("resourceVersionMatch") == "NotOlderThan" and
          q.get("allowWatchBookmarks") == "true" and not q.get("resourceVersion"), "streamed list query: %s" % q)

    # Changes after the bookmark: the same stream, no new request.
    sim.bulk(pod_ops("delete", "ns1", ["p000", "p001"]) + pod_ops("create", "ns1", ["new"]) +
             pod_ops("update", "ns2", ["q000"], labels={"v": "2"}))
    b.wait_converged(sim)
    new = sorted((e["type"], e["name"]) for e in b.events()[350:])
    check(new == [("ADDED", "new"), ("DELETED", "p000"), ("DELETED", "p001"), ("MODIFIED", "q000")],
          "changes after the sync: %s" % new)
    check(len([r for r in sim.requests() if r["path"] == "/api/v1/pods"]) == 1, "still the one stream")

    log = b.logtext()
    check("listed items=350 streamed" in log, "the streamed list is logged:\n" + log[-3000:])
    check("syncing: " in log and "initial event(s) (streamed list)" in log, "progress is logged:\n" + log[-3000:])
    _, _, body = http_request(b.http_url() + "/metrics")
    line = [l for l in body.decode().splitlines() if l.startswith("kbridge_informer_sync_objects{")]
    check(line and line[0].endswith(" 0"), "sync_objects is 0 once synced: %s" % line)
    assert_rv_monotonic(b.events())
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
