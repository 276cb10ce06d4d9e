"""list_mode = "paged" never asks to stream, even where the server could;
list_mode = "stream" against a server that refuses streamed lists does not
fall back: /readyz is 503 naming the informer and the refusal, no list
request is made, and the streamed list is retried with backoff."""
from kbtest import *


def pods(sim):
    return [r for r in sim.requests() if r["path"] == "/api/v1/pods"]


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(150)]))
    b = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; '
                               'list_mode = "paged"; }'])
    b.wait_converged(sim)
    reqs = pods(sim)
    check(not [r for r in reqs if "sendInitialEvents" in r["query"]], "paged: no streamed attempt")
    check(len([r for r in reqs if r["query"].get("watch") not in ("true", "1")]) == 2, "paged: 2 pages")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()

    sim = Sim("--watch-list", "off")
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(10)]))
    b = Bridge(sim, http='listen = "127.0.0.1:0";',
               informers=['{ name = "pods"; version = "v1"; resource = "pods"; list_mode = "stream"; }'])
    url = b.http_url()

    def refused():
        code, _, body = http_request(url + "/readyz")
        return code == 503 and b"informer pods" in body and b"422" in body and body
    body = wait_for(refused, 60, 0.1, "/readyz 503 naming informer pods and the 422")
    print("readyz: %s" % body.decode().strip())
    wait_for(lambda: len([r for r in pods(sim) if r["query"].get("sendInitialEvents") == "true"]) >= 2, 60, 0.2,
             "a second streamed attempt after backoff")
    reqs = pods(sim)
    check(all(r["query"].get("sendInitialEvents") == "true" and r["status"] == 422 for r in reqs),
          "stream: only refused streamed attempts, no fallback: %s" % [(r["query"], r["status"]) for r in reqs])
    check(b.events() == [], "nothing delivered")
    check("refuses streamed lists" in b.logtext(), "the error is logged")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
