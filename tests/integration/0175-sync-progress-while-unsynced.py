"""While a first list cannot finish (here: every continue request is
refused, so only the first page arrives), kbridge_informer_sync_objects says
how many objects it has received so far, progress lines name the objects,
pages and bytes, and once the list completes the gauge is 0."""
import os

from kbtest import *


def gauge(url, name):
    _, _, body = http_request(url + "/metrics")
    for l in body.decode().splitlines():
        if l.startswith(name + "{"):
            return float(l.rsplit(" ", 1)[1])
    return None


def test():
    os.environ["KB_TEST_SYNC_PROGRESS_MS"] = "0"
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(250)]))
    sim.fault(kind="status", verb="continue", resource="pods", code=503, count=1000000)
    b = Bridge(sim, http='listen = "127.0.0.1:0";',
               informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; '
                          'list_mode = "paged"; }'])
    url = b.http_url()
    wait_for(lambda: gauge(url, "kbridge_informer_sync_objects") == 100, 60, 0.1, "sync_objects = 100 (one page)")
    check(gauge(url, "kbridge_informer_synced") == 0, "not synced")
    check("syncing: 100 object(s) so far" in b.logtext() and "1 page(s)" in b.logtext(),
          "progress line:\n" + b.logtext()[-3000:])
    sim.fault(kind="clear")
    wait_for(lambda: gauge(url, "kbridge_informer_synced") == 1, 120, 0.2, "synced after the fault clears")
    check(gauge(url, "kbridge_informer_sync_objects") == 0, "sync_objects is 0 once synced")
    b.wait_converged(sim)
    check("listed items=250 pages=3" in b.logtext(), "the restarted list is complete")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
