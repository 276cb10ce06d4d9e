"""With state_dir, a watch on kbridge's Kubernetes API from a resourceVersion
older than the in-memory window (kube_api.watch_history) is served from the
journal: exactly the changes the server made after it, in order, then live
changes with no gap or repeat at the hand-over. A label-selected watch that
old gets 410 (the journal keeps no earlier labels to apply the enter/leave
rule)."""
import http.client
import socket
import threading
from kbtest import *


def watch_lines(url, query, until, timeout=60):
    host, port = url[len("http://"):].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    conn.request("GET", "/api/v1/pods?watch=true&" + query)
    resp = conn.getresponse()
    check(resp.status == 200, "watch %s -> %d" % (query, resp.status))
    lines = []

    def read():
        try:
            while True:
                line = resp.readline()
                if not line:
                    return
                lines.append(json.loads(line))
        except Exception:
            return
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return conn, t, lines


def changes(lines):
    return [(e["object"]["metadata"]["namespace"] + "/" + e["object"]["metadata"]["name"], e["type"],
             int(e["object"]["metadata"]["resourceVersion"])) for e in lines if e["type"] not in ("BOOKMARK",)]


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%d" % i for i in range(5)], labels={"app": "web"}))
    work = tempfile.mkdtemp(prefix="kb0603-")
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0";',
               extra='state_dir = "%s/state";\nkube_api = { watch_history = 5; };' % work)
    url = b.http_url()
    b.wait_converged(sim)
    rv0 = json.loads(http_request(url + "/api/v1/pods")[2])["metadata"]["resourceVersion"]
    sim.bulk(pod_ops("update", "ns1", ["p%d" % (i % 5) for i in range(30)], labels={"app": "web", "n": "1"}) +
             pod_ops("delete", "ns1", ["p4"]) + pod_ops("create", "ns1", ["q0"], labels={"app": "web"}))
    b.wait_converged(sim)
    want = watch_history(sim, rv0)
    check(len(want) == 32, "the server made %d changes" % len(want))
    conn, t, lines = watch_lines(url, "resourceVersion=%s" % rv0, None)
    wait_for(lambda: len(changes(lines)) >= 32, 60, what="the journal's changes")
    sim.bulk(pod_ops("create", "ns1", ["live0", "live1"]))
    b.wait_converged(sim)
    want = watch_history(sim, rv0)
    # Checked once the last change has arrived: a gap or a repeat at the hand-over shows before it.
    wait_for(lambda: len(changes(lines)) >= 34, 60, what="the live changes after the journal")
    check(changes(lines) == want, "watch from %s:\n%s\nserver:\n%s" % (rv0, changes(lines), want))
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()

    # A label selector that far back: 410.
    conn, t, lines = watch_lines(url, "resourceVersion=%s&labelSelector=app%%3Dweb" % rv0, None)
    t.join(60)
    check(len(lines) == 1 and lines[0]["type"] == "ERROR" and lines[0]["object"]["code"] == 410,
          "selector watch from the journal: %s" % lines)
    check(b.stop() == 0, "kbridge exit code")
    sim.stop()


if __name__ == "__main__":
    run(test)
