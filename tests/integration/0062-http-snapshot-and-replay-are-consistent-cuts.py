"""GET /v1/snapshot is a Kubernetes List of the cache that equals the
server's state (kubectl get --raw reads it; namespace and labelSelector
filter it); a consumer that reads a snapshot at RV X and then replays from X
sees every later change exactly once and ends at the server's state;
watch=true delivers the journal and then live changes; POST publishes the
cache as SNAPSHOT envelopes to the route's sink; once the journal has been
trimmed past X, replay from X is 410 Expired."""
import http.client
import os
import threading
import urllib.parse
from kbtest import *


def get_json(url, path):
    code, _, body = http_request(url + path)
    check(code == 200, "GET %s -> %d %r" % (path, code, body[:300]))
    return json.loads(body)


def keyof(obj):
    m = obj["metadata"]
    return m["namespace"] + "/" + m["name"] if m.get("namespace") else m["name"]


def server_state(sim):
    return {i["key"]: (i["uid"], i["resourceVersion"]) for i in sim.state("pods")["items"]}


def list_state(lst):
    return {keyof(o): (o["metadata"]["uid"], o["metadata"]["resourceVersion"]) for o in lst["items"]}


def replay(url, rv):
    code, _, body = http_request(url + "/v1/replay/pods?resourceVersion=%s" % rv)
    check(code == 200, "replay from %s -> %d %r" % (rv, code, body[:300]))
    return [json.loads(l) for l in body.splitlines() if l.strip()]


class Watch:
    """A replay with watch=true, read line by line on a thread."""

    def __init__(self, url, rv):
        host, port = url[len("http://"):].split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.conn.request("GET", "/v1/replay/pods?resourceVersion=%s&watch=true" % rv)
        self.resp = self.conn.getresponse()
        check(self.resp.status == 200, "watch -> %d" % self.resp.status)
        self.lines = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    return
                self.lines.append(json.loads(line))
        except Exception:  # closed by close(): the reader just ends
            return

    def close(self):
        # Shut the socket down first: closing the response waits for the reader's readline otherwise.
        import socket
        self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(30)
        self.conn.close()


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["web%02d" % i for i in range(20)], labels={"app": "web"}) +
             pod_ops("create", "ns1", ["db%02d" % i for i in range(20)], labels={"app": "db"}) +
             pod_ops("create", "ns2", ["x%02d" % i for i in range(10)]))
    work = tempfile.mkdtemp(prefix="kbsnap-")
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0";',
               extra='state_dir = "%s/state";\njournal = { max_bytes = 1048576; };' % work,
               routes=['{ name = "r"; informer = "pods"; sink = "out"; }'])
    url = b.http_url()
    b.wait_converged(sim)

    # The snapshot is the server's state, as a List.
    snap = get_json(url, "/v1/snapshot/pods")
    x = snap["metadata"]["resourceVersion"]
    check(snap["kind"] == "PodList" and snap["apiVersion"] == "v1" and x.isdigit(), "List head: %r" %
          {k: snap[k] for k in ("kind", "apiVersion", "metadata")})
    check(list_state(snap) == server_state(sim), "snapshot equals the server's state")
    check(all(o["kind"] == "Pod" and o["apiVersion"] == "v1" for o in snap["items"]), "items carry kind/apiVersion")
    keys = [keyof(o) for o in snap["items"]]
    check(keys == sorted(keys), "items in key order")
    web = get_json(url, "/v1/snapshot/pods?labelSelector=app%3Dweb")
    check(sorted(keyof(o) for o in web["items"]) == ["ns1/web%02d" % i for i in range(20)], "labelSelector app=web")
    ns2 = get_json(url, "/v1/snapshot/pods?namespace=ns2")
    check(len(ns2["items"]) == 10 and all(o["metadata"]["namespace"] == "ns2" for o in ns2["items"]), "namespace=ns2")
    sel = urllib.parse.quote("app notin (web),app")
    both = get_json(url, "/v1/snapshot/pods?namespace=ns1&labelSelector=" + sel)
    check(sorted(keyof(o) for o in both["items"]) == ["ns1/db%02d" % i for i in range(20)], "namespace + notin")

    r = subprocess.run(["kubectl", "get", "--raw", "/v1/snapshot/pods", "--server", url], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    check(r.returncode == 0, "kubectl get --raw: %s" % r.stderr)
    check(list_state(json.loads(r.stdout)) == list_state(snap), "kubectl reads the same List")

    # Changes after the cut: replay from X has each exactly once and ends at the server's state.
    w = Watch(url, x)
    changes = (pod_ops("update", "ns1", ["web%02d" % i for i in range(5)], labels={"app": "web", "v": "2"}) +
               pod_ops("delete", "ns1", ["db00", "db01", "db02"]) + pod_ops("create", "ns3", ["n0", "n1", "n2", "n3"]))
    sim.bulk(changes)
    b.wait_converged(sim)
    evs = replay(url, x)
    got = sorted((e["type"], keyof(e["object"])) for e in evs)
    want = sorted([("MODIFIED", "ns1/web%02d" % i) for i in range(5)] +
                  [("DELETED", "ns1/db0%d" % i) for i in range(3)] + [("ADDED", "ns3/n%d" % i) for i in range(4)])
    check(got == want, "replay from the snapshot's RV has exactly the 12 later changes: %s" % got)
    view = {keyof(o): o for o in snap["items"]}
    for e in evs:
        if e["type"] == "DELETED":
            view.pop(keyof(e["object"]))
        else:
            view[keyof(e["object"])] = e["object"]
    check(list_state({"items": list(view.values())}) == server_state(sim), "snapshot + replay = the server's state")
    check(replay(url, snap2_rv := get_json(url, "/v1/snapshot/pods")["metadata"]["resourceVersion"]) == [],
          "replay from a fresh snapshot's RV (%s) is empty" % snap2_rv)

    # The watch got the same changes, then a live one.
    wait_for(lambda: len(w.lines) >= 12, 30, 0.05, "the watch to deliver the 12 changes")
    check(w.lines[:12] == evs, "the watch replayed the same events in the same order")
    sim.bulk(pod_ops("update", "ns2", ["x00"], labels={"live": "yes"}))
    wait_for(lambda: len(w.lines) >= 13, 30, 0.05, "the live change on the watch")
    live = w.lines[12]
    check(live["type"] == "MODIFIED" and keyof(live["object"]) == "ns2/x00" and
          live["object"]["metadata"]["labels"] == {"live": "yes"}, "live change: %r" % live)
    check(len(w.lines) == 13, "no repeats on the watch: %d lines" % len(w.lines))
    w.close()

    # POST: the cache as SNAPSHOT envelopes to the route's sink, once the live
    # change is in the file too (the watch can see it before the sink writes it).
    wait_for(lambda: any(e["type"] == "MODIFIED" and key_of(e) == "ns2/x00" and
                         e["object"]["metadata"].get("labels") == {"live": "yes"} for e in b.events()),
             30, 0.05, "the live change in the file")
    n0 = len(b.events())
    code, _, body = http_request(url + "/v1/snapshot/pods?route=r", method="POST", body=b"")
    check(code == 200, "POST snapshot -> %d %r" % (code, body))
    published = json.loads(body)["published"]
    state = server_state(sim)
    check(published == len(state), "published %d = %d cached objects" % (published, len(state)))
    wait_for(lambda: len(b.events()) >= n0 + published, 30, 0.05, "the SNAPSHOT envelopes in the file")
    snaps = b.events()[n0:]
    check(all(e["type"] == "SNAPSHOT" for e in snaps) and len(snaps) == published, "only SNAPSHOT envelopes")
    check({key_of(e): e["resourceVersion"] for e in snaps} == {k: v[1] for k, v in state.items()},
          "one SNAPSHOT per cached object at its RV")

    # Churn past journal.max_bytes: the journal forgets X, and replay from X is 410 Expired.
    def expired():
        # 100 updates of 4 KB each that do not compress (state_dir holds records zstd-compressed): a few
        # rounds pass the journal's 1 MiB
        sim.bulk([op for i in range(100) for op in pod_ops("update", "ns2", ["x%02d" % (i % 10)], extra={
            "metadata": {"annotations": {"pad": os.urandom(2000).hex()}}})])
        code, _, body = http_request(url + "/v1/replay/pods?resourceVersion=%s" % x)
        return code == 410 and json.loads(body)
    st = wait_for(expired, 120, 0.2, "replay from the old RV to be 410 once the journal is trimmed")
    check(st["kind"] == "Status" and st["reason"] == "Expired" and st["code"] == 410, "410 Status: %r" % st)
    b.wait_converged(sim)
    fresh = get_json(url, "/v1/snapshot/pods")
    check(list_state(fresh) == server_state(sim), "a fresh snapshot equals the server after the churn")
    check(replay(url, fresh["metadata"]["resourceVersion"]) == [], "and replays from its RV")

    # SIGTERM ends an open live stream and exits cleanly.
    w = Watch(url, fresh["metadata"]["resourceVersion"])
    check(b.stop() == 0, "SIGTERM exits 0 with a live replay open")
    w.thread.join(30)
    check(not w.thread.is_alive() and w.lines == [], "the stream ended, empty: %r" % w.lines[:3])
    sim.stop()


run(test)
