"""A request's body counts against http.header_timeout like its headers:
a client that sends complete headers and then its body a byte at a time is
closed once the whole request has not arrived within the deadline, however
steadily it trickles, and the cut is counted. The reported attack — with
kube_api off, 72 such connections from 12 addresses (16 from each of 4,
then one from each of 8 more, which takes the slots kept for addresses with
none open) — no longer keeps /healthz from answering: every one of them is
closed, then the probe is answered. (127.0.0.2-13 are loopback addresses:
nothing leaves the machine.)"""
import select
import socket
from kbtest import *

TOKEN = "t0ken-0912"
HEAD = b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n"


def open_slow(port, source):
    s = socket.socket()
    s.settimeout(5)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(HEAD)
    return s


def closed_by_server(s):
    """Send one more body byte; whether the server has closed the connection."""
    try:
        r, _, _ = select.select([s], [], [], 0)
        if r and not s.recv(4096):
            return True
        s.sendall(b"x")
        return False
    except OSError:
        return True


def probe(url):
    try:
        return http_request(url + "/healthz", timeout=5)[0] == 200
    except Exception:
        return False


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1"]))
    work = tempfile.mkdtemp(prefix="kb0912-")
    with open(work + "/token", "w") as f:
        f.write(TOKEN + "\n")
    b = Bridge(sim, workdir=work, extra="kube_api = { enabled = false; };",
               http='listen = "127.0.0.1:0"; token_file = "%s/token"; header_timeout = 2;' % work)
    url = b.http_url()
    port = int(url.rsplit(":", 1)[1])
    check(probe(url), "healthz answers before the attack")

    sources = ["127.0.0.%d" % (2 + i // 16) for i in range(64)] + ["127.0.0.%d" % i for i in range(6, 14)]
    socks = [open_slow(port, src) for src in sources]
    print("%d connections sending a body a byte at a time" % len(socks))
    t0 = time.monotonic()
    open_socks = list(socks)

    def all_closed():
        open_socks[:] = [s for s in open_socks if not closed_by_server(s)]
        return not open_socks
    try:
        wait_for(all_closed, 30, 0.5, "the server to close every slow-body connection")
    except Failure:
        raise Failure("%d of %d slow-body connections still open after %.0f s (header_timeout = 2)"
                      % (len(open_socks), len(socks), time.monotonic() - t0))
    print("all closed after %.1f s" % (time.monotonic() - t0))
    for s in socks:
        s.close()
    wait_for(lambda: probe(url), 30, 0.2, "/healthz to answer after the slow bodies were cut")
    _, _, body = http_request(url + "/metrics", token=TOKEN)
    line = [l for l in body.decode().splitlines() if l.startswith('kbridge_http_refused_total{reason="header_timeout"}')]
    cuts = int(float(line[0].split()[1])) if line else -1
    check(cuts >= len(socks), "every cut counted: %d of %d" % (cuts, len(socks)))

    # A body that arrives in time is still read and answered.
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
    reply = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
    s.close()
    check(reply.startswith(b"HTTP/1.1 405"), "a prompt body gets its answer (405 for POST /healthz): %r" % reply[:100])
    check(b.alive(), "the bridge survived")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
