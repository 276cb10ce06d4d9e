"""Slowloris: 70 sockets that trickle a request's headers a byte at a time
(first from one address, then spread over five) never make /healthz fail
for a client at another address: one address holds at most
http.max_per_address connections, the last slots are kept for addresses
with none open, and a request whose headers are not complete within
http.header_timeout is closed however steadily it trickles. Refusals and
cuts are counted in kbridge_http_refused_total. (127.0.0.2-7 are loopback
addresses: nothing leaves the machine.)"""
import re
import socket
import threading
from kbtest import *

TOKEN = "t0ken-0902"


class Trickler:
    """n sockets from the given source addresses, each sending one header byte per tick, reconnecting when cut."""

    def __init__(self, port, sources, n):
        self.port, self.sources, self.n = port, sources, n
        self.stop = threading.Event()
        self.cut = 0
        self.opened = 0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def connect(self, i):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.bind((self.sources[i % len(self.sources)], 0))
            s.connect(("127.0.0.1", self.port))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            self.opened += 1
        except OSError:
            pass
        return s

    def run(self):
        socks = [self.connect(i) for i in range(self.n)]
        deadline = time.monotonic() + 120
        while not self.stop.is_set() and time.monotonic() < deadline:
            for i, s in enumerate(socks):
                try:
                    s.sendall(b"X")
                except OSError:
                    self.cut += 1
                    s.close()
                    socks[i] = self.connect(i)
            self.stop.wait(0.5)
        for s in socks:
            s.close()

    def end(self):
        self.stop.set()
        self.t.join(30)


def probes(url, count):
    """count /healthz requests from 127.0.0.1, 0.3 s apart; the failures."""
    bad = []
    for _ in range(count):
        try:
            # Generous: a probe that waits is not a failure here; one refused or cut is.
            code, _, body = http_request(url + "/healthz", timeout=60)
            if code != 200:
                bad.append(code)
        except Exception as e:
            bad.append(repr(e))
        time.sleep(0.3)
    return bad


def metric(url, reason):
    body = http_request(url + "/metrics", token=TOKEN)[2].decode()
    m = re.search(r'^kbridge_http_refused_total\{reason="%s"\} (\d+)$' % reason, body, re.M)
    return int(m.group(1)) if m else -1


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1"]))
    work = tempfile.mkdtemp(prefix="kb0902-")
    with open(work + "/token", "w") as f:
        f.write(TOKEN + "\n")
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0"; token_file = "%s/token"; header_timeout = 3;' % work)
    url = b.http_url()
    port = int(url.rsplit(":", 1)[1])
    check(probes(url, 2) == [], "healthz answers before the attack")

    for sources in (["127.0.0.2"], ["127.0.0.%d" % i for i in range(3, 8)]):
        t = Trickler(port, sources, 70)
        wait_for(lambda: t.opened >= 70, 60, 0.1, "70 trickling sockets to connect")
        bad = probes(url, 12)
        cut_seen = wait_for(lambda: t.cut, 60, 0.2, "a trickling socket to be closed")
        t.end()
        print("attack from %d address(es): %d probe failures, %d trickling sockets closed or refused"
              % (len(sources), len(bad), t.cut))
        check(bad == [], "every /healthz answered 200 during the attack from %s: %r" % (sources, bad))
        check(cut_seen > 0, "trickling sockets are closed")

    refused, cuts = metric(url, "connections"), metric(url, "header_timeout")
    print("kbridge_http_refused_total: connections=%d header_timeout=%d" % (refused, cuts))
    check(refused > 0, "refused connections are counted: %d" % refused)
    check(cuts > 0, "connections cut at http.header_timeout are counted: %d" % cuts)
    check(b.alive(), "the bridge survived")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
