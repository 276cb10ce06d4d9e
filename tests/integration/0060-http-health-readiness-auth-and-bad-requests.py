"""The HTTP API's probes, authentication and refusals: /healthz answers while
the process runs; /readyz is 503 naming the informer and its last error (a
403 from the API server) until the first list succeeds, then 200; with
http.token_file every endpoint but the probes needs the bearer token (401
with a Status otherwise); bad parameters get 400, unknown informers and
routes 404, each with a Kubernetes Status body; odd input never takes the
process down; replay without state_dir says that it needs one."""
import json
import urllib.parse
from kbtest import *


def status_of(code, body, want_code, want_reason=None):
    check(code == want_code, "want %d, got %d %r" % (want_code, code, body[:300]))
    st = json.loads(body)
    check(st.get("kind") == "Status" and st.get("code") == want_code and st.get("status") == "Failure",
          "a Kubernetes Status body: %r" % st)
    if want_reason:
        check(st.get("reason") == want_reason, "reason %s: %r" % (want_reason, st))
    return st


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%d" % i for i in range(5)]))
    sim.fault(kind="status", verb="list", resource="pods", code=403, count=1000000,
              message="pods is forbidden: User cannot list resource")
    work = tempfile.mkdtemp(prefix="kbhttp-")
    token = "s3cret-token-0060"
    with open(work + "/token", "w") as f:
        f.write(token + "\n")
    b = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; list_mode = "paged"; }'], workdir=work, http='listen = "127.0.0.1:0"; token_file = "%s/token";' % work)
    url = b.http_url()

    code, _, body = http_request(url + "/healthz")
    check(code == 200 and body.strip() == b"ok", "healthz without a token: %d %r" % (code, body))

    def not_ready_with_403():
        code, _, body = http_request(url + "/readyz")
        return code == 503 and b"informer pods" in body and b"403" in body and body
    body = wait_for(not_ready_with_403, 60, 0.1, "/readyz to be 503 naming informer pods and the 403")
    print("readyz while forbidden: %s" % body.decode().strip())

    sim.fault(kind="clear")
    wait_for(lambda: http_request(url + "/readyz")[0] == 200, 120, 0.2, "/readyz to turn 200 after the 403 stops")
    b.wait_converged(sim)

    # Authentication: everything else needs the token.
    for path in ("/metrics", "/v1/informers", "/v1/snapshot/pods", "/v1/replay/pods?resourceVersion=1", "/nope"):
        status_of(*http_request(url + path)[::2], 401, "Unauthorized")
        status_of(*http_request(url + path, token="wrong")[::2], 401, "Unauthorized")
        status_of(*http_request(url + path, token=token + "x")[::2], 401, "Unauthorized")
        status_of(*http_request(url + path, token=token[:-1])[::2], 401, "Unauthorized")
    code, hdrs, _ = http_request(url + "/metrics")
    check("Bearer" in (hdrs.get("WWW-Authenticate") or ""), "401 carries WWW-Authenticate: Bearer")
    code, _, body = http_request(url + "/v1/informers", token=token)
    check(code == 200, "informers with the token: %d" % code)
    inf = json.loads(body)["informers"]
    check([i["name"] for i in inf] == ["pods"] and inf[0]["synced"] and inf[0]["objects"] == 5 and
          inf[0]["kind"] == "Pod" and inf[0]["relists"] >= 0 and "checkpoint" in inf[0] and
          inf[0]["resourceVersion"], "informer status: %r" % inf)
    check(http_request(url + "/metrics", token=token)[0] == 200, "metrics with the token")

    # Bad parameters: 400 with a Status.
    def get(path, method="GET"):
        code, _, body = http_request(url + path, method=method, token=token, body=b"" if method == "POST" else None)
        return code, body
    for path in ("/v1/replay/pods", "/v1/replay/pods?resourceVersion=", "/v1/replay/pods?resourceVersion=abc",
                 "/v1/replay/pods?resourceVersion=-1", "/v1/replay/pods?resourceVersion=1e5",
                 "/v1/replay/pods?resourceVersion=123456789012345678901234567890",
                 "/v1/replay/pods?resourceVersion=1&watch=maybe",
                 "/v1/snapshot/pods?labelSelector=" + urllib.parse.quote("app in (a"),
                 "/v1/snapshot/pods?labelSelector=" + urllib.parse.quote("=x"),
                 "/v1/snapshot/pods?namespace=" + urllib.parse.quote("Bad_NS/../x")):
        status_of(*get(path), 400, "BadRequest")
    status_of(*get("/v1/snapshot/pods", "POST"), 400, "BadRequest")  # route= missing

    # Unknown things: 404 with a Status.
    for path in ("/v1/snapshot/nope", "/v1/replay/nope?resourceVersion=1", "/v1/snapshot/", "/v1/snapshot/pods/x",
                 "/v2/informers", "/"):
        status_of(*get(path), 404, "NotFound")
    st = status_of(*get("/v1/snapshot/pods?route=nope", "POST"), 404, "NotFound")
    check("nope" in st["message"], "the unknown route is named: %r" % st)
    status_of(*get("/v1/snapshot/nope?route=x", "POST"), 404, "NotFound")
    status_of(*get("/metrics", "POST"), 405, "MethodNotAllowed")

    # Replay needs state_dir.
    st = status_of(*get("/v1/replay/pods?resourceVersion=1"), 501)
    check("state_dir" in st["message"], "the Status says replay needs state_dir: %r" % st)

    # Odd input over a raw socket: the process stays up and answers.
    import socket
    port = int(url.rsplit(":", 1)[1])
    odd = [b"GARBAGE\r\n\r\n", b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
           b"GET /v1/snapshot/%00%ff HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() + b"\r\n\r\n",
           b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
           b"POST /v1/snapshot/pods?route=x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
           b"GET /v1/replay/pods?resourceVersion=1&watch=true HTTP/1.0\r\n\r\n"]
    for raw in odd:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass
        s.close()
    check(b.alive(), "kbridge survived odd requests")
    check(http_request(url + "/healthz")[0] == 200, "and still answers")

    check(b.stop() == 0, "SIGTERM exits 0 with the HTTP API on")
    sim.stop()


run(test)
