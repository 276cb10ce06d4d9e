"""Open watches and requests waiting for a resourceVersion hold no thread of
kbridge each (a node agent's watch is mostly idle; 5,000 of them must not
cost 5,000 threads and their stacks): with WATCHES spec.nodeName watches
open and WAITS lists waiting for a resourceVersion kbridge has not reached,
kbridge runs fewer threads than it holds watches. Meanwhile everything still
works: a change reaches exactly the watches of its node, the waiting lists
end with the API server's 504 (Too large resource version) once their wait
is over, /healthz answers, and kbridge stops cleanly with every watch and a
waiting request still open."""
import socket
import urllib.parse
from kbtest import *

NODES = 50
AGENTS = 4
WATCHES = NODES * AGENTS
WAITS = 8


def threads(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise Failure("no Threads line")


class Raw:
    """One request on its own connection, read as it comes (a watch's chunks)."""

    def __init__(self, port, path):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: kbridge\r\nAccept: application/json\r\n\r\n" % path).encode())
        self.data = b""
        self.done = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            while True:
                d = self.sock.recv(65536)
                if not d:
                    break
                self.data += d
        except OSError:
            pass
        self.done = True

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def names_in(data, typ):
    return [json.loads(l)["object"]["metadata"]["name"] for l in data.split(b"\n")
            if l.startswith(b"{\"type\":\"" + typ.encode())]


def test():
    sim = Sim()
    sim.bulk([{"op": "create", "resource": "pods", "version": "v1", "namespace": "ns1", "name": "p%d" % i,
               "data": {"spec": {"nodeName": "node-%d" % i}, "status": {"phase": "Running"}}}
              for i in range(NODES)])
    b = Bridge(sim, http='listen = "127.0.0.1:0"; max_per_address = 1000;',
               extra='kube_api = { max_watches = 1000; };')
    b.wait_converged(sim)
    url = b.http_url()
    port = int(url.rsplit(":", 1)[1])
    before = threads(b.proc.pid)

    watches = [Raw(port, "/api/v1/namespaces/ns1/pods?watch=1&fieldSelector=%s"
                   % urllib.parse.quote("spec.nodeName=node-%d" % (i // AGENTS)))
               for i in range(WATCHES)]
    wait_for(lambda: all(b"p%d" % (i // AGENTS) in w.data for i, w in enumerate(watches)), timeout=120,
             what="every watch's initial ADDED")
    waits = [Raw(port, "/api/v1/pods?resourceVersion=999999999&resourceVersionMatch=NotOlderThan")
             for _ in range(WAITS)]
    during = threads(b.proc.pid)
    print("threads: %d before, %d with %d watches and %d waiting lists" % (before, during, WATCHES, WAITS))
    check(during < WATCHES, "kbridge runs %d threads for %d watches (a thread per watch)" % (during, WATCHES))
    check(http_request(url + "/healthz")[0] == 200, "/healthz while the watches are open")

    # A change on node-3 reaches node-3's watches only.
    sim.bulk([{"op": "update", "resource": "pods", "version": "v1", "namespace": "ns1", "name": "p3",
               "data": {"metadata": {"annotations": {"x": "1"}}}}])
    mine = watches[3 * AGENTS:4 * AGENTS]
    wait_for(lambda: all(names_in(w.data, "MODIFIED") == ["p3"] for w in mine), timeout=60,
             what="node-3's watches to get the change")
    others = [w for w in watches if w not in mine and names_in(w.data, "MODIFIED")]
    check(not others, "%d watches of other nodes got node-3's change" % len(others))

    wait_for(lambda: all(w.done for w in waits), timeout=60, what="the waiting lists to be answered")
    for w in waits:
        head = w.data.split(b"\r\n", 1)[0]
        check(b" 504 " in head and b"Too large resource version" in w.data,
              "a list waiting for a resourceVersion not reached: %r" % w.data[:300])

    # Stop with every watch open and a request waiting.
    late = Raw(port, "/api/v1/pods?resourceVersion=999999999&resourceVersionMatch=NotOlderThan")
    check(b.stop() == 0, "kbridge exit code with %d watches open" % WATCHES)
    check(not late.data or b" 504 " in late.data.split(b"\r\n", 1)[0], "the late request: %r" % late.data[:200])
    for w in watches + waits + [late]:
        w.close()
    sim.stop()


run(test)
