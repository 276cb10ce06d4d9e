"""Watches on kbridge's Kubernetes API behave as the API server's: from an
unset resourceVersion, ADDED for the current state then live changes; from a
list's resourceVersion, exactly the changes the server made after it (same
types, keys and resourceVersions, in order); from one older than the
history window, a single ERROR 410 Expired event; allowWatchBookmarks gives
periodic bookmarks and one at the timeout, and timeoutSeconds ends the
stream; a label selector turns a label change out of it into DELETED and
back into ADDED; sendInitialEvents streams the state, then a BOOKMARK
annotated k8s.io/initial-events-end, then live changes; a watcher that does
not read is closed instead of growing memory; `kubectl get -w` shows a new
change; the watch metrics count it all."""
import http.client
import socket
import subprocess
import threading
from kbtest import *


class Watch:
    """A watch read line by line on a thread."""

    def __init__(self, url, query, read=True, path="/api/v1/pods"):
        host, port = url[len("http://"):].split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)
        self.conn.request("GET", path + "?watch=true&" + query)
        self.resp = self.conn.getresponse()
        check(self.resp.status == 200, "watch %s -> %d" % (query, self.resp.status))
        self.lines, self.ended = [], False
        if read:
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()

    def _read(self):
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    break
                self.lines.append(json.loads(line))
        except Exception:
            pass
        self.ended = True

    def changes(self):
        return [(e["type"], e["object"]["metadata"]["namespace"] + "/" + e["object"]["metadata"]["name"],
                 int(e["object"]["metadata"]["resourceVersion"])) for e in self.lines if e["type"] != "BOOKMARK"]

    def close(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


def metric(url, name):
    for l in http_request(url + "/metrics")[2].decode().splitlines():
        if l.startswith(name + " ") or l.startswith(name + "{"):
            return float(l.rsplit(" ", 1)[1])
    return None


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a%d" % i for i in range(5)], labels={"app": "web"}))
    b = Bridge(sim, http='listen = "127.0.0.1:0";', extra="kube_api = { watch_history = 40; bookmark_seconds = 1; };")
    url = b.http_url()
    b.wait_converged(sim)

    # From an unset RV: ADDED for the state, then live.
    w0 = Watch(url, "allowWatchBookmarks=true")
    wait_for(lambda: len(w0.changes()) == 5, 60, what="5 ADDED")
    check(sorted(w0.changes()) == sorted(("ADDED", "ns1/a%d" % i, rv) for i, rv in
                                         enumerate(int(x["resourceVersion"]) for x in
                                                   sorted(sim.state("pods")["items"], key=lambda i: i["key"]))),
          "initial ADDED: %s" % w0.changes())
    # A label selector watch, and a list to resume from.
    wsel = Watch(url, "labelSelector=app%3Dweb")
    lst = json.loads(http_request(url + "/api/v1/pods")[2])
    rv0 = lst["metadata"]["resourceVersion"]
    wrv = Watch(url, "resourceVersion=%s" % rv0)
    wns = Watch(url, "resourceVersion=%s" % rv0, path="/api/v1/namespaces/ns2/pods")
    sim.bulk(pod_ops("create", "ns2", ["other"]) +pod_ops("create", "ns1", ["b0", "b1"], labels={"app": "web"}) +
             pod_ops("update", "ns1", ["a1"], labels={"app": "db"}) +     # leaves the selector
             pod_ops("update", "ns1", ["a2"], labels={"app": "web", "v": "2"}) +
             pod_ops("delete", "ns1", ["a3"]) +
             pod_ops("update", "ns1", ["a1"], labels={"app": "web"}) +    # comes back
             pod_ops("create", "ns1", ["c0"], labels={"app": "db"}) +
             pod_ops("create", "ns2", ["zz"]))                           # the last change: an end marker
    b.wait_converged(sim)
    want = [(t, k, rv) for k, t, rv in watch_history(sim, rv0)]
    # Each watch's changes are checked once the last change has reached it: anything extra, missing or out of
    # order before it shows.
    wait_for(lambda: any(k == "ns2/zz" for _, k, _ in wns.changes()), 60, what="the ns2 watch to see its changes")
    check([(t, k) for t, k, _ in wns.changes()] == [("ADDED", "ns2/other"), ("ADDED", "ns2/zz")],
          "namespaced watch: %s" % wns.changes())
    wns.close()
    wait_for(lambda: len(wrv.changes()) >= len(want), 60, what="the changes after the list")
    check(wrv.changes() == want, "watch from the list's RV:\n%s\nserver:\n%s" % (wrv.changes(), want))
    wait_for(lambda: len(w0.changes()) == 5 + len(want), 60, what="live changes on the unset-RV watch")
    check(w0.changes()[5:] == want, "live after ADDED: %s" % w0.changes()[5:])
    # Enter/leave: a1 leaves (DELETED with its new state), comes back (ADDED); c0 never matches.
    sel = [(t, k) for t, k, _ in wsel.changes()[5:]]
    check(sel == [("ADDED", "ns1/b0"), ("ADDED", "ns1/b1"), ("DELETED", "ns1/a1"), ("MODIFIED", "ns1/a2"),
                  ("DELETED", "ns1/a3"), ("ADDED", "ns1/a1")], "selector watch: %s" % sel)
    left = [e for e in wsel.lines if e["type"] == "DELETED" and e["object"]["metadata"]["name"] == "a1"][0]
    check(left["object"]["metadata"]["labels"] == {"app": "db"}, "the DELETED of a leaving object: %s" % left)
    # Periodic bookmarks (bookmark_seconds = 1) with the newest RV.
    wait_for(lambda: any(e["type"] == "BOOKMARK" and int(e["object"]["metadata"]["resourceVersion"]) >= want[-1][2]
                         for e in w0.lines), 60, what="a bookmark on the idle watch")
    bm = [e for e in w0.lines if e["type"] == "BOOKMARK"][-1]["object"]
    check(bm["kind"] == "Pod" and bm["apiVersion"] == "v1", "bookmark object: %s" % bm)
    wait_for(lambda: metric(url, 'kbridge_api_watchers{resource="pods"}') == 3, 60,
             what="the watchers gauge to count 3 (the closed ns2 watch gone)")
    for w in (w0, wsel, wrv):
        w.close()

    # timeoutSeconds ends the stream, with a last bookmark.
    t0 = time.monotonic()
    wt = Watch(url, "resourceVersion=%s&timeoutSeconds=2&allowWatchBookmarks=true" % want[-1][2])
    wait_for(lambda: wt.ended, 60, what="the watch to end at its timeout")
    check(1.5 <= time.monotonic() - t0 and wt.lines and wt.lines[-1]["type"] == "BOOKMARK",
          "timeout: %.1fs %s" % (time.monotonic() - t0, wt.lines))

    # timeoutSeconds=0 means "the server's default", not "end now": the watch is still there for a change.
    w00 = Watch(url, "resourceVersion=%s&timeoutSeconds=0" % want[-1][2])
    sim.bulk(pod_ops("create", "ns1", ["e0"]))
    wait_for(lambda: any(k == "ns1/e0" for _, k, _ in w00.changes()) or w00.ended, 60,
             what="the timeoutSeconds=0 watch to see a change")
    check(not w00.ended, "a watch with timeoutSeconds=0 ended at once: %s" % w00.lines)
    w00.close()

    # sendInitialEvents: the state, the end bookmark, then live.
    wl = Watch(url, "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
    n_state = len(sim.state("pods")["items"])
    wait_for(lambda: any(e["type"] == "BOOKMARK" for e in wl.lines), 60, what="the initial-events-end bookmark")
    first_bm = [i for i, e in enumerate(wl.lines) if e["type"] == "BOOKMARK"][0]
    check(first_bm == n_state and all(e["type"] == "ADDED" for e in wl.lines[:first_bm]),
          "initial events: %s" % [e["type"] for e in wl.lines])
    end = wl.lines[first_bm]["object"]["metadata"]
    check(end.get("annotations") == {"k8s.io/initial-events-end": "true"} and
          int(end["resourceVersion"]) >= want[-1][2], "end bookmark: %s" % end)
    sim.bulk(pod_ops("create", "ns1", ["d0"]))
    wait_for(lambda: any(e["type"] == "ADDED" and e["object"]["metadata"]["name"] == "d0" for e in wl.lines), 30,
             what="a live change after the end bookmark")
    wl.close()

    # kubectl get -w sees a new change.
    kc = os.path.join(b.dir, "kubeconfig")
    with open(kc, "w") as f:
        f.write("apiVersion: v1\nkind: Config\nclusters: [{name: kb, cluster: {server: \"%s\"}}]\n"
                "contexts: [{name: kb, context: {cluster: kb, namespace: ns1}}]\ncurrent-context: kb\nusers: []\n"
                % url)
    kw = subprocess.Popen(["kubectl", "--kubeconfig", kc, "get", "pods", "-w", "--request-timeout=0"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        got = []
        t = threading.Thread(target=lambda: got.extend(iter(kw.stdout.readline, "")), daemon=True)
        t.start()
        wait_for(lambda: any(l.startswith("d0 ") for l in got), 60, what="kubectl to list")
        sim.bulk(pod_ops("create", "ns1", ["kubectl-sees-me"]))
        wait_for(lambda: any(l.startswith("kubectl-sees-me") for l in got), 60, what="kubectl get -w to see it")
    finally:
        kw.kill()
        kw.wait()

    # Older than the window (watch_history = 40): one ERROR 410, then the end.
    sim.bulk(pod_ops("update", "ns1", ["b0"] * 50, labels={"app": "web", "n": "x"}))
    b.wait_converged(sim)
    wg = Watch(url, "resourceVersion=%s" % rv0)
    wait_for(lambda: wg.ended, 60, what="the expired watch to end")
    check(len(wg.lines) == 1 and wg.lines[0]["type"] == "ERROR" and wg.lines[0]["object"]["code"] == 410 and
          wg.lines[0]["object"]["reason"] == "Expired", "expired watch: %s" % wg.lines)

    # A watcher that does not read is closed rather than buffering: big changes, no reading.
    slow = Watch(url, "", read=False)
    blob = "x" * 200000
    for i in range(6):
        sim.bulk(pod_ops("update", "ns1", ["b1"] * 20, labels={"app": "web"}, extra={"blob": blob + str(i)}))
    b.wait_converged(sim)
    wait_for(lambda: metric(url, "kbridge_api_watches_closed_slow_total") >= 1, 60, what="the slow watcher closed")
    slow.close()
    check(metric(url, "kbridge_api_watch_events_sent_total") > 20, "events sent counter")
    check(b.stop() == 0, "kbridge exit code")
    sim.stop()


if __name__ == "__main__":
    run(test)
