"""How fresh a read from kbridge is, and how a client reads its own writes:
a list with resourceVersion unset is the cache's newest cut, and
kbridge_informer_last_heard_timestamp_seconds says when the informer last
heard from the API server (a list page, a watch event or bookmark) — so
time() minus it bounds how far behind the cache can be while the watch is
healthy; a client that wrote resourceVersion N lists with
resourceVersion=N&resourceVersionMatch=NotOlderThan and every 200 answer holds
its write (a 504 ResourceVersionTooLarge, when the cache has not got there
within the wait, is retried)."""
from kbtest import *


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a%d" % i for i in range(3)]))
    b = Bridge(sim, http='listen = "127.0.0.1:0";')
    url = b.http_url()
    b.wait_converged(sim)
    t0 = time.time()
    heard = b.metric("kbridge_informer_last_heard_timestamp_seconds", informer="pods")
    check(0 < heard <= time.time() + 1, "last heard: %s" % heard)

    # A bookmark on a quiet watch is news from the API server too.
    time.sleep(0.01)
    sim.ctl("bookmark")
    wait_for(lambda: b.metric("kbridge_informer_last_heard_timestamp_seconds", informer="pods") > heard, 30, 0.1,
             "the informer to hear from the API server again (an event or bookmark)")

    for round_ in range(5):
        name = "mine%d" % round_
        sim.bulk(pod_ops("create", "ns1", [name]))
        n = int(next(i for i in sim.state("pods")["items"] if i["key"] == "ns1/" + name)["resourceVersion"])

        def read():
            code, _, body = http_request(url + "/api/v1/namespaces/ns1/pods?resourceVersion=%d"
                                         "&resourceVersionMatch=NotOlderThan" % n)
            if code == 504:
                st = json.loads(body)
                check(st["reason"] == "Timeout" and st["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge",
                      "504: %s" % st)
                return None
            check(code == 200, "NotOlderThan %d -> %d %r" % (n, code, body[:300]))
            return json.loads(body)
        lst = wait_for(read, 60, 0.2, "a 200 answer for NotOlderThan %d" % n)
        check(int(lst["metadata"]["resourceVersion"]) >= n, "list at %s < %d" % (lst["metadata"]["resourceVersion"], n))
        check(name in [i["metadata"]["name"] for i in lst["items"]], "own write %s missing at RV %s" %
              (name, lst["metadata"]["resourceVersion"]))
    check(b.metric("kbridge_informer_last_heard_timestamp_seconds", informer="pods") >= t0 - 1,
          "last heard after the writes")
    check(b.stop() == 0, "kbridge exit code")
    sim.stop()


if __name__ == "__main__":
    run(test)
