"""A watch on kbridge's Kubernetes API that sees no change and asked for no
bookmarks stays open past the HTTP server's idle-connection timeout, until
its timeoutSeconds, and then ends cleanly (a complete chunked body), as on
the API server. Then a change still arrives on a new watch.

The idle timeout is 60 s; the test shortens it to IDLE s
(KB_TEST_HTTP_IDLE_TIMEOUT_S) and shows it is in force: an idle keep-alive
connection opened beside the watch is closed while the watch goes on."""
import http.client
import threading
from kbtest import *

IDLE = 3
WATCH = 4 * IDLE  # the watch's timeoutSeconds


def test():
    os.environ["KB_TEST_HTTP_IDLE_TIMEOUT_S"] = str(IDLE)
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a"]))
    b = Bridge(sim, http='listen = "127.0.0.1:0";')
    url = b.http_url()
    b.wait_converged(sim)
    rv = json.loads(http_request(url + "/api/v1/pods")[2])["metadata"]["resourceVersion"]

    result = {}

    def quiet_watch():
        t0 = time.monotonic()
        result["answer"] = http_request(url + "/api/v1/pods?watch=1&resourceVersion=%s&timeoutSeconds=%d"
                                        % (rv, WATCH), timeout=120)
        result["took"] = time.monotonic() - t0
    t = threading.Thread(target=quiet_watch, daemon=True)
    t.start()

    # An idle keep-alive connection: one request, then nothing; the server closes it at the idle timeout.
    host, port = url[len("http://"):].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("GET", "/healthz")
    check(conn.getresponse().read() is not None, "healthz")
    check(conn.sock.recv(1) == b"", "the idle keep-alive connection was closed")
    conn.close()
    check(t.is_alive(), "the quiet watch ended with the idle connection: %s" % result)

    t.join(120)
    check(not t.is_alive(), "the quiet watch did not end at its timeoutSeconds=%d" % WATCH)
    code, _, body = result["answer"]
    check(code == 200 and body == b"" and result["took"] >= WATCH - 1,
          "quiet watch: %d %r after %.1fs" % (code, body, result["took"]))
    print("quiet watch ended after %.1f s (timeoutSeconds=%d, idle timeout %d s)" % (result["took"], WATCH, IDLE))

    # A change still arrives on a new watch from the same resourceVersion.
    sim.bulk(pod_ops("create", "ns1", ["b"]))
    b.wait_converged(sim)
    result["after"] = http_request(url + "/api/v1/pods?watch=1&resourceVersion=%s&timeoutSeconds=2" % rv, timeout=120)
    code, _, body = result["after"]
    names = [json.loads(l)["object"]["metadata"]["name"] for l in body.splitlines() if l.strip()]
    check(code == 200 and names == ["b"], "the change on a new watch: %d %s" % (code, names))
    check(b.stop() == 0, "kbridge exit code")
    sim.stop()


if __name__ == "__main__":
    run(test)
