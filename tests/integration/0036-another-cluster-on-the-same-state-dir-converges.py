"""A restart whose cluster.server names another API server than the one state_dir was written
for converges the consumer to that server's objects.

state_dir records the server with the informer's definition. Pointing the same state_dir at
another cluster used to resume the watch at the first cluster's resourceVersion on the second:
the second cluster's objects created below that RV never arrived, and the first cluster's objects
stayed in the consumer's view for ever. Now the restart says the server changed, lists and
diffs: the first cluster's objects leave as DELETED (finalStateUnknown), the second's arrive, and
the change is counted as a new history, as a restore is (kbridge_rv_regressions_total)."""
from kbtest import *


def test():
    first, second = Sim(), Sim()
    first.bulk(pod_ops("create", "ns1", ["a1", "a2"]))
    # The second cluster: its objects made first (low RVs), then its RV moved well past the
    # first cluster's, so a watch resumed at the first one's RV sees none of them.
    second.bulk(pod_ops("create", "ns1", ["a1", "b1"]) + pod_ops("create", "ns2", ["bump"]))
    for i in range(20):
        second.bulk(pod_ops("update", "ns2", ["bump"], labels={"i": str(i)}))
    work = tempfile.mkdtemp(prefix="kbsrv-")
    b = Bridge(first, workdir=work, extra='state_dir = "%s/state";' % work)
    b.wait_converged(first)
    check(int(second.state()["resourceVersion"]) > int(first.state()["resourceVersion"]),
          "the second cluster's RV is past the first's")
    check(b.stop() == 0, "SIGTERM exits 0")

    n0 = len(b.events())
    b.rewrite_config(first.url, second.url)
    b.start()
    b.wait_converged(second, timeout=30)
    new = sorted((e["type"], e["namespace"], e["name"], bool(e.get("finalStateUnknown"))) for e in b.events()[n0:])
    check(("DELETED", "ns1", "a2", True) in new and ("ADDED", "ns1", "b1", False) in new,
          "the first cluster's a2 left as DELETED finalStateUnknown, the second's b1 arrived: %s" % new)
    check(('server "%s" -> "%s"' % (first.url, second.url)) in b.logtext(),
          "the log says the server changed:\n%s" % b.logtext()[-2000:])
    check("another API server than state_dir's: a new history" in b.logtext(),
          "it is counted as a new history (RVs of two clusters do not compare):\n%s" % b.logtext()[-2000:])
    check(b.stop() == 0, "SIGTERM exits 0")
    first.stop()
    second.stop()


run(test)
