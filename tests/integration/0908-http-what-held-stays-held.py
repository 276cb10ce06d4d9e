"""What held in the security review stays held: every endpoint but
/healthz and /readyz answers 401 without the right bearer token (any
method, unknown paths too, a token with a byte more or less, another
scheme); the probes never need it; an over-long request line gets 414 and
over-large headers 431, answered without a crash."""
import socket
from kbtest import *

TOKEN = "held-t0ken-0908"


def raw(port, data):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    got = b""
    try:
        s.sendall(data)
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got
    except (BrokenPipeError, ConnectionResetError):
        return got
    finally:
        s.close()


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1"]))
    work = tempfile.mkdtemp(prefix="kb0908-")
    with open(work + "/token", "w") as f:
        f.write(TOKEN + "\n")
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0"; token_file = "%s/token";' % work)
    url = b.http_url()
    port = int(url.rsplit(":", 1)[1])
    b.wait_converged(sim)
    for path in ("/healthz", "/readyz"):
        check(http_request(url + path)[0] == 200, "%s is open" % path)
    bad = [None, "", TOKEN[:-1], TOKEN + "x", TOKEN.upper(), "x" * 20000]
    for method, path in (("GET", "/metrics"), ("GET", "/v1/informers"), ("GET", "/v1/snapshot/pods"),
                         ("POST", "/v1/snapshot/pods?route=x"), ("GET", "/v1/replay/pods?resourceVersion=1"),
                         ("GET", "/nope"), ("DELETE", "/v1/informers"), ("GET", "/healthz/x")):
        for tok in bad:
            code = http_request(url + path, method=method, token=tok, body=b"" if method == "POST" else None)[0]
            check(code in (401, 405) if path == "/v1/informers" and method == "DELETE" else code == 401,
                  "%s %s with token %r: %d" % (method, path, (tok or "")[:20], code))
        for hdr in ("Basic " + TOKEN, "Token " + TOKEN, TOKEN):
            r = raw(port, ("%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: %s\r\nContent-Length: 0\r\n\r\n"
                           % (method, path, hdr)).encode())
            check(r.startswith(b"HTTP/1.1 401") or (method == "DELETE" and r.startswith(b"HTTP/1.1 405")),
                  "%s %s with Authorization %r: %r" % (method, path, hdr[:12], r[:60]))
    check(http_request(url + "/v1/informers", token=TOKEN)[0] == 200, "the right token works")

    r = raw(port, ("GET /v1/snapshot/%s HTTP/1.1\r\nHost: x\r\n\r\n" % ("a" * 200000)).encode())
    check(r.startswith(b"HTTP/1.1 414"), "an over-long request line gets 414: %r" % r[:80])
    r = raw(port, ("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n" % ("b" * 200000)).encode())
    check(r.startswith(b"HTTP/1.1 431"), "over-large headers get 431: %r" % r[:80])
    check(http_request(url + "/healthz")[0] == 200 and b.alive(), "still serving")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
