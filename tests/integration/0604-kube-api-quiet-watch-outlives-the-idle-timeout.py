"""A watch on kbridge's Kubernetes API that sees no change and asked for no
bookmarks stays open past the HTTP server's 60 s idle-connection timeout,
until its timeoutSeconds, and then ends cleanly (a complete chunked body),
as on the API server. Then a change still arrives on a new watch.

Long by nature (75 s), so it runs only with KB_LONG_TESTS=1 (otherwise it says SKIP and passes)."""
import sys
from kbtest import *


def test():
    if os.environ.get("KB_LONG_TESTS") != "1":
        print("SKIP %s: takes ~80 s; run with KB_LONG_TESTS=1" % os.path.basename(sys.argv[0]))
        return
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a"]))
    b = Bridge(sim, http='listen = "127.0.0.1:0";')
    url = b.http_url()
    b.wait_converged(sim)
    rv = json.loads(http_request(url + "/api/v1/pods")[2])["metadata"]["resourceVersion"]
    t0 = time.monotonic()
    code, _, body = http_request(url + "/api/v1/pods?watch=1&resourceVersion=%s&timeoutSeconds=75" % rv,
                                 timeout=120)
    took = time.monotonic() - t0
    check(code == 200 and body == b"" and 74 <= took < 90, "quiet watch: %d %r after %.1fs" % (code, body, took))
    check(b.stop() == 0, "kbridge exit code")
    sim.stop()


if __name__ == "__main__":
    run(test)
