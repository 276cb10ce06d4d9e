"""A watch on kbridge with fieldSelector=spec.nodeName=node-1 (how every node
agent watches its own node's pods) sees what the API server would send it:
ADDED when a pod is scheduled or moved onto node-1, MODIFIED while it stays,
DELETED when it moves away or is deleted there, nothing for pods elsewhere;
a selector on two fields (status.phase=Running,spec.nodeName!=node-2) enters
and leaves on either; the same holds from resourceVersion 0 (initial ADDED
for the matching pods only) and from a list's resourceVersion, with and without state_dir (where,
after a restart, the cache keeps identities only and the objects are read
back to select)."""
import http.client
import socket
import threading
import urllib.parse
from kbtest import *


class Watch:
    def __init__(self, url, query):
        host, port = url[len("http://"):].split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)
        self.conn.request("GET", "/api/v1/pods?watch=true&" + query)
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            self.conn.sock.settimeout(5)
            raise Failure("watch %s -> %d %s" % (query, self.resp.status, self.resp.read(600)))
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for line in iter(self.resp.readline, b""):
                self.lines.append(json.loads(line))
        except Exception:
            pass

    def changes(self):
        return [(e["type"], e["object"]["metadata"]["name"]) for e in self.lines if e["type"] != "BOOKMARK"]

    def close(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


def move(sim, name, **data):
    sim.bulk([{"op": "update", "resource": "pods", "version": "v1", "namespace": "ns1", "name": name,
               "data": data}])


def scenario(extra):
    sim = Sim()
    sim.bulk([{"op": "create", "resource": "pods", "version": "v1", "namespace": "ns1", "name": n,
               "data": {"spec": {"nodeName": node}, "status": {"phase": "Running"}}}
              for n, node in (("a", "node-0"), ("b", "node-1"), ("c", "node-2"))])
    b = Bridge(sim, http='listen = "127.0.0.1:0";', extra=extra)
    b.wait_converged(sim)
    if extra:  # restarted, the cache is loaded from state_dir with identities only
        check(b.stop() == 0, "kbridge exit code")
        b.start()
        b.wait_converged(sim)
    url = b.http_url()
    code, _, body = http_request(url + "/api/v1/pods")
    rv = json.loads(body)["metadata"]["resourceVersion"]
    on1 = Watch(url, "resourceVersion=%s&fieldSelector=%s" % (rv, urllib.parse.quote("spec.nodeName=node-1")))
    two = Watch(url, "resourceVersion=%s&fieldSelector=%s" % (
        rv, urllib.parse.quote("status.phase=Running,spec.nodeName!=node-2")))
    init = Watch(url, "resourceVersion=0&fieldSelector=%s" % urllib.parse.quote("spec.nodeName==node-1"))

    move(sim, "a", spec={"nodeName": "node-1"})              # a enters node-1
    move(sim, "a", metadata={"annotations": {"x": "1"}})     # a stays on node-1
    move(sim, "b", spec={"nodeName": "node-2"})              # b leaves node-1 (and two's selector)
    move(sim, "c", status={"phase": "Failed"})               # c: elsewhere, matches neither
    move(sim, "c", spec={"nodeName": "node-0"})              # c: still not Running
    move(sim, "c", status={"phase": "Running"})              # c enters two's selector
    sim.bulk([{"op": "delete", "resource": "pods", "version": "v1", "namespace": "ns1", "name": "a"},
              {"op": "create", "resource": "pods", "version": "v1", "namespace": "ns1", "name": "d",
               "data": {"spec": {"nodeName": "node-1"}, "status": {"phase": "Pending"}}}])

    want_on1 = [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "b"), ("DELETED", "a"), ("ADDED", "d")]
    want_two = [("MODIFIED", "a"), ("MODIFIED", "a"), ("DELETED", "b"), ("ADDED", "c"), ("DELETED", "a")]
    want_init = [("ADDED", "b")] + want_on1
    try:
        wait_for(lambda: len(on1.changes()) >= len(want_on1) and len(two.changes()) >= len(want_two)
                 and len(init.changes()) >= len(want_init), timeout=60, what="the watches' changes")
    except Failure:
        pass
    how = extra or "no state_dir"
    check(on1.changes() == want_on1, "%s: spec.nodeName=node-1 watch: %s, want %s" % (how, on1.changes(), want_on1))
    check(two.changes() == want_two, "%s: two-field watch: %s, want %s" % (how, two.changes(), want_two))
    check(init.changes() == want_init, "%s: watch from 0: %s, want %s" % (how, init.changes(), want_init))
    for w in (on1, two, init):
        w.close()
    b.stop()
    sim.stop()


def test():
    scenario("")
    # After a restart the cache keeps identities only: the window reads each
    # object once to remember its fields, the lists read them to select.
    scenario('state_dir = "%s";' % tempfile.mkdtemp(prefix="kbtest-0621-"))


run(test)
