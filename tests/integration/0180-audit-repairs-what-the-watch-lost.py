"""The drift audit (informers[].audit_seconds): kubesim silently swallows 5 deletes and 5 updates
(the lose_events fault: no watcher ever gets them, bookmarks move past them). The watch alone never
converges; the next audit finds 5 missing and 5 stale keys, delivers the deletes as DELETED with
finalStateUnknown and the last known object, the updates as MODIFIED at the server's RV, counts them
in /metrics and /v1/informers, and logs each repair. An audit that finds no drift delivers nothing.
Past audit_relist_ratio the audit relists instead of repairing key by key. All of it with and
without state_dir."""
import re
import tempfile

from kbtest import *

AUDIT_S = 1
N = 300


def test():
    scenario(False)
    scenario(True)  # with state_dir the cache keeps identity only: the last object comes from the journal


def scenario(with_state):
    sim = Sim("--bookmark-ms", "300")
    names = ["p%03d" % i for i in range(N)]
    sim.bulk(pod_ops("create", "ns1", names))
    work = tempfile.mkdtemp(prefix="kbtest-audit-")
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0";',
               extra='state_dir = "%s/state";' % work if with_state else "", informers=[
        '{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; audit_seconds = %d; }' % AUDIT_S])
    b.wait_converged(sim)

    # An audit with no drift delivers nothing.
    before = len(b.events())
    b.wait_audits(2)
    check(len(b.events()) == before, "an audit without drift delivered %d event(s)" % (len(b.events()) - before))
    doc = b.informer_doc()
    check(doc["audit"]["drift"] == {"missing": 0, "stale": 0, "unknown": 0}, "no drift: %s" % doc["audit"])

    # Lose 5 deletes and 5 updates (and one create) on the way to every watcher.
    last_known = {e["name"]: e for e in b.events() if e["name"] in names[:5]}
    sim.fault(kind="lose_events", count=11)
    sim.bulk(pod_ops("delete", "ns1", names[:5]) +
             pod_ops("update", "ns1", names[5:10], labels={"lost": "yes"}) +
             pod_ops("create", "ns1", ["newcomer"]))
    b.wait_audits(2)  # one whole audit began after the changes
    b.wait_converged(sim)  # only the audit can repair: the watch never gets the lost changes

    new = b.events()[before:]
    dels = [e for e in new if e["type"] == "DELETED"]
    check(sorted(e["name"] for e in dels) == sorted(names[:5]), "deleted: %s" % [e["name"] for e in dels])
    check(all(e.get("finalStateUnknown") for e in dels), "every repaired delete is finalStateUnknown")
    for e in dels:
        check(e["uid"] == last_known[e["name"]]["uid"] and e["object"] == last_known[e["name"]]["object"],
              "the repaired delete of %s carries the last known object" % e["name"])
    mods = sorted(e["name"] for e in new if e["type"] == "MODIFIED")
    check(mods == names[5:10], "modified: %s" % mods)
    check(all(e["object"]["metadata"]["labels"].get("lost") == "yes" for e in new if e["type"] == "MODIFIED"),
          "the repaired updates carry the server's object")
    adds = [e["name"] for e in new if e["type"] == "ADDED"]
    check(adds == ["newcomer"], "added: %s" % adds)
    check(len(new) == 11, "exactly the 11 repairs were delivered, got %d" % len(new))

    check(b.metric("kbridge_audit_drift_total", informer="pods", kind="missing") == 5, "missing drift = 5")
    check(b.metric("kbridge_audit_drift_total", informer="pods", kind="stale") == 5, "stale drift = 5")
    check(b.metric("kbridge_audit_drift_total", informer="pods", kind="unknown") == 1, "unknown drift = 1")
    check(b.metric("kbridge_audit_runs_total", informer="pods") >= 4, "audit runs counted")
    log = b.logtext()
    for n in names[:10]:
        check(re.search(r"WARN.*drift (missing|stale) key=ns1/%s cachedRV=\d+ serverRV=\S+ auditRV=\d+" % n, log),
              "the repair of ns1/%s is logged at WARN with its RVs" % n)

    # The audit after the repair finds nothing more.
    before = len(b.events())
    b.wait_audits(2)
    check(len(b.events()) == before, "a clean audit after the repair delivered nothing")
    check(b.informer_doc()["audit"]["drift"] == {"missing": 0, "stale": 0, "unknown": 0}, "clean again")

    # Past audit_relist_ratio (5 %): 30 lost deletes of 296 objects → a full relist instead.
    relists = b.metric("kbridge_informer_relists_total", informer="pods")
    sim.fault(kind="lose_events", count=30)
    sim.bulk(pod_ops("delete", "ns1", names[100:130]))
    b.wait_audits(2)
    b.wait_converged(sim, timeout=30)
    check(b.metric("kbridge_informer_relists_total", informer="pods") > relists, "a relist happened")
    check("relisting in full" in b.logtext(), "the relist is logged")
    dels = [e for e in b.events()[before:] if e["type"] == "DELETED"]
    check(len(dels) == 30 and all(e.get("finalStateUnknown") for e in dels), "30 deletes by the relist diff")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
