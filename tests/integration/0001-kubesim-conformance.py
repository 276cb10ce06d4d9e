#!/usr/bin/env python3
"""0001 — kubesim behaves like kube-apiserver where client-go's
informers can tell: 410 ERROR event on a compacted
watch, bookmarks before a short timeout, expired continue tokens, continue
with an RV, label-selector enter/leave, pagination, list items without kind,
and the real kubectl can list and watch against it.

Starts $KB_BUILD_DIR/kubesim on port 0, reads the port from its one stdout
line, stops it by pid."""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("KB_BUILD_DIR", "build")
DEADLINE = 30  # seconds any single wait may take


def start_sim(*args):
    p = subprocess.Popen([os.path.join(BUILD, "kubesim"), "--port", "0", *args],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("kubesim listening on 127.0.0.1:"), line
    return p, int(line.strip().rsplit(":", 1)[1])


class Sim:
    def __init__(self, port):
        self.port = port

    def req(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=DEADLINE)
        if body is not None and not isinstance(body, (str, bytes)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        c.close()
        if path.startswith("/_sim/requests") or data[:1] not in (b"{", b"["):
            return r.status, data  # JSON lines or plain text
        return r.status, json.loads(data)

    def ok(self, method, path, body=None, headers=None):
        st, out = self.req(method, path, body, headers)
        assert 200 <= st < 300, (method, path, st, out)
        return out

    def watch(self, path, max_events=100000):
        """Read watch events until the stream ends; returns (events, ended_cleanly)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=DEADLINE)
        c.request("GET", path)
        r = c.getresponse()
        assert r.status == 200, r.status
        assert r.getheader("Content-Type") == "application/json"
        events = []
        clean = True
        try:
            while len(events) < max_events:
                line = r.readline()
                if not line:
                    break
                events.append(json.loads(line))
        except http.client.IncompleteRead:
            clean = False
        c.close()
        return events, clean

    def bulk(self, lines):
        return self.ok("POST", "/_sim/bulk", "\n".join(json.dumps(l) for l in lines))


def cm(op, name, labels=None, ns="default"):
    d = {"op": op, "resource": "configmaps", "namespace": ns, "name": name}
    if labels is not None:
        d["labels"] = labels
    if op != "delete":
        d["data"] = {"data": {"k": name}}
    return d


def test_watch_from_compacted_rv(sim):
    rv = int(sim.bulk([cm("create", "old-1"), cm("update", "old-1")])["resourceVersion"])
    sim.ok("POST", "/_sim/compact")
    events, clean = sim.watch(f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv - 1}")
    assert clean and len(events) == 1, events
    ev = events[0]
    assert ev["type"] == "ERROR"
    st = ev["object"]
    assert st["kind"] == "Status" and st["code"] == 410 and st["reason"] == "Expired", st
    assert st["message"].startswith(f"too old resource version: {rv - 1} ("), st["message"]


def test_bookmarks_and_timeout(sim):
    # bookmark_ms is 1000 for this simulator: several periodic bookmarks, one ~2 s before the end
    top = sim.ok("GET", "/api/v1/pods?limit=1")["metadata"]["resourceVersion"]
    events, clean = sim.watch(f"/api/v1/pods?watch=1&resourceVersion={top}&allowWatchBookmarks=true"
                              "&timeoutSeconds=3")
    assert clean, "the stream must end with the chunked terminator at the timeout"
    assert events and all(e["type"] == "BOOKMARK" for e in events), events
    obj = events[-1]["object"]
    assert obj["kind"] == "Pod" and obj["apiVersion"] == "v1"
    assert int(obj["metadata"]["resourceVersion"]) >= int(top)
    # without allowWatchBookmarks: nothing at all, still a clean end
    events, clean = sim.watch(f"/api/v1/pods?watch=1&resourceVersion={top}&timeoutSeconds=2")
    assert clean and events == [], events


def test_pagination_and_list_shape(sim):
    sim.ok("POST", "/_sim/generate", {"resource": "pods", "namespaces": 2, "count": 7})
    first = sim.ok("GET", "/api/v1/pods?limit=3")
    assert first["kind"] == "PodList" and first["apiVersion"] == "v1"
    rv = first["metadata"]["resourceVersion"]
    names, page = [], first
    for _ in range(10):
        assert page["metadata"]["resourceVersion"] == rv, "every page reports the list's RV"
        for it in page["items"]:
            assert "kind" not in it and "apiVersion" not in it, it
            names.append(it["metadata"]["namespace"] + "/" + it["metadata"]["name"])
        tok = page["metadata"].get("continue")
        if not tok:
            break
        page = sim.ok("GET", f"/api/v1/pods?limit=3&continue={tok}")
    state = sim.ok("GET", "/_sim/state?resource=pods")
    assert names == [i["key"] for i in state["items"]], (names, state)
    assert first["metadata"]["remainingItemCount"] == len(names) - 3
    # RV=0 is served from the "watch cache": limit ignored, no continue
    everything = sim.ok("GET", "/api/v1/pods?limit=3&resourceVersion=0")
    assert len(everything["items"]) == len(names) and "continue" not in everything["metadata"]
    # single objects keep kind/apiVersion
    one = sim.ok("GET", "/api/v1/namespaces/" + names[0].replace("/", "/pods/"))
    assert one["kind"] == "Pod" and one["apiVersion"] == "v1"
    # a future RV is too large
    st, body = sim.req("GET", f"/api/v1/pods?resourceVersion={int(rv) + 1000}")
    assert st == 504 and body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge", body


def test_continue_errors(sim):
    page = sim.ok("GET", "/api/v1/pods?limit=2")
    tok = page["metadata"]["continue"]
    st, body = sim.req("GET", f"/api/v1/pods?limit=2&continue={tok}&resourceVersion=5")
    assert st == 400 and body["reason"] == "BadRequest", (st, body)
    sim.ok("POST", "/_sim/fault", {"kind": "expire_continue"})
    st, body = sim.req("GET", f"/api/v1/pods?limit=2&continue={tok}")
    assert st == 410 and body["reason"] == "Expired" and body["metadata"]["continue"], (st, body)
    # a new list after the expiry paginates normally again
    fresh = sim.ok("GET", "/api/v1/pods?limit=2")
    sim.ok("GET", f"/api/v1/pods?limit=2&continue={fresh['metadata']['continue']}")


def test_selector_enter_leave(sim):
    rv = sim.bulk([cm("create", "sel-1", {"team": "a"})])["resourceVersion"]
    out = sim.bulk([cm("update", "sel-1", {"team": "b"}),   # leaves team=a
                    cm("update", "sel-1", {"team": "a"}),   # enters again
                    cm("create", "sel-2", {"team": "b"}),   # never visible
                    cm("delete", "sel-1")])
    final = int(out["resourceVersion"])
    events, clean = sim.watch(f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"
                              "&labelSelector=team%3Da&timeoutSeconds=1")
    types = [(e["type"], e["object"]["metadata"]["name"], e["object"]["metadata"]["labels"]["team"])
             for e in events]
    assert types == [("DELETED", "sel-1", "a"), ("ADDED", "sel-1", "a"), ("DELETED", "sel-1", "a")], types
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[-1] == final, rvs
    assert all(e["object"]["kind"] == "ConfigMap" for e in events)
    log = [json.loads(l) for l in sim.ok("GET", "/_sim/requests").decode().splitlines()]
    w = [r for r in log if r["query"].get("labelSelector") == "team=a"]
    assert w and w[-1]["query"]["watch"] == "1" and w[-1]["status"] == 200, w


def test_faults(sim):
    sim.ok("POST", "/_sim/fault", {"kind": "status", "verb": "list", "resource": "pods", "code": 429,
                                   "retry_after": 2, "count": 1})
    c = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=DEADLINE)
    c.request("GET", "/api/v1/pods")
    r = c.getresponse()
    assert r.status == 429 and r.getheader("Retry-After") == "2"
    assert json.loads(r.read())["reason"] == "TooManyRequests"
    c.close()
    sim.ok("GET", "/api/v1/pods")  # count 1: the next one succeeds
    st, body = sim.req("POST", "/_sim/fault", "{not json")
    assert st == 400 and body["kind"] == "Status", body
    st, body = sim.req("GET", "/api/v1/widgets")
    assert st == 404 and body["reason"] == "NotFound", body


def test_kubectl(sim):
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is required for this test"
    home = tempfile.mkdtemp(prefix="kubesim-kubectl-")
    env = dict(os.environ, HOME=home, KUBECONFIG=os.path.join(home, "none"))
    server = f"--server=http://127.0.0.1:{sim.port}"
    out = subprocess.run([kubectl, server, "get", "pods", "-A"], env=env, capture_output=True, text=True,
                         timeout=DEADLINE)
    assert out.returncode == 0, out.stderr
    first = sim.ok("GET", "/_sim/state?resource=pods")["items"][0]["key"].split("/")[1]
    assert first in out.stdout, out.stdout
    w = subprocess.Popen([kubectl, server, "get", "pods", "-A", "-w"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + DEADLINE
        while time.time() < deadline:  # wait until kubectl's watch is open
            log = [json.loads(l) for l in sim.ok("GET", "/_sim/requests").decode().splitlines()]
            if any(r["path"] == "/api/v1/pods" and r["query"].get("watch") == "true" for r in log):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("kubectl never opened a watch")
        sim.ok("POST", "/api/v1/namespaces/default/pods",
               {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kubectl-sees-me"},
                "spec": {"containers": [{"name": "c", "image": "x"}]}})
        seen = ""
        while "kubectl-sees-me" not in seen and time.time() < deadline:
            line = w.stdout.readline()
            if not line:
                break
            seen += line
        assert "kubectl-sees-me" in seen, seen
    finally:
        w.terminate()
        w.wait(timeout=DEADLINE)
        shutil.rmtree(home, ignore_errors=True)


def main():
    proc, port = start_sim("--bookmark-ms", "1000")
    sim = Sim(port)
    failed = 0
    try:
        for t in [test_watch_from_compacted_rv, test_bookmarks_and_timeout, test_pagination_and_list_shape,
                  test_continue_errors, test_selector_enter_leave, test_faults, test_kubectl]:
            try:
                t(sim)
                print("ok  ", t.__name__)
            except Exception as e:  # report every case, fail at the end
                failed += 1
                print("FAIL", t.__name__, repr(e))
        assert proc.poll() is None, "kubesim died"
    finally:
        proc.terminate()
        rc = proc.wait(timeout=DEADLINE)
    if rc != 0:
        print("kubesim exited with", rc)
        failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
