"""With informers[].index_labels = ["app"], a label query reads only the
matching objects: over 20,000 pods, GET /v1/snapshot?labelSelector=app=x and
the kube API list (kubectl get -l app=x, also through its raw list) answer
exactly what the server answers, and /v1/informers' "index" counters show
that only the matches were read. Selectors on a key that is not indexed,
set-based and negative ones, and a namespace, give the server's answer too
(read through the namespace or the whole cache). The index follows label
changes and deletes. With state_dir, where the cache keeps identities only
and each object is read back after the cut, and without it (the cache holds
the objects)."""
import subprocess
import urllib.parse
from kbtest import *

N = 20000
APPS = 100


def labels_of(i):
    if i % 250 == 0:
        return {"tier": "front"}          # no app label at all
    labels = {"app": "app-%d" % (i % APPS)}
    if i % 10 == 0:
        labels["tier"] = "back"
    return labels


def path_of(ns, base):
    return ("/api/v1/namespaces/%s/pods" % ns if ns else "/api/v1/pods") if base == "kube" else base


def keys_of(items):
    return {"%s/%s" % (o["metadata"]["namespace"], o["metadata"]["name"]): o["metadata"]["resourceVersion"]
            for o in items}


def server(sim, sel, ns):
    code, raw = sim.request("GET", path_of(ns, "kube") + "?labelSelector=" + urllib.parse.quote(sel))
    check(code == 200, "server list %r -> %d" % (sel, code))
    return keys_of(json.loads(raw)["items"])


def fetch(url, path):
    code, _, body = http_request(url + path, timeout=120)
    check(code == 200, "GET %s -> %d %r" % (path, code, body[:300]))
    return json.loads(body)


def snapshot(url, sel, ns):
    q = "?labelSelector=" + urllib.parse.quote(sel) + ("&namespace=" + ns if ns else "")
    return keys_of(fetch(url, "/v1/snapshot/pods" + q)["items"])


def kube_list(url, sel, ns):
    return keys_of(fetch(url, path_of(ns, "kube") + "?labelSelector=" + urllib.parse.quote(sel))["items"])


def paged(url, sel):
    """A list in pages of 50, following continue."""
    items, cont = [], None
    for _ in range(1000):
        q = "?limit=50&labelSelector=" + urllib.parse.quote(sel) + ("&continue=" + urllib.parse.quote(cont)
                                                                  if cont else "")
        page = fetch(url, "/api/v1/pods" + q)
        items += page["items"]
        cont = page["metadata"].get("continue")
        if not cont:
            return keys_of(items)
    raise Failure("more than 1000 pages")


def index(b):
    return b.informer_doc()["index"]


def read_by(b, fn):
    """What fn returns, and how many objects its one query read."""
    before = index(b)
    got = fn()
    after = index(b)
    check(after["queries"] == before["queries"] + 1, "one query: %s -> %s" % (before, after))
    return got, after["read"] - before["read"]


def kubectl(url, workdir, *args):
    kc = os.path.join(workdir, "kubeconfig")
    if not os.path.exists(kc):
        with open(kc, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters: [{name: kb, cluster: {server: \"%s\"}}]\n"
                    "contexts: [{name: kb, context: {cluster: kb}}]\ncurrent-context: kb\nusers: []\n" % url)
    r = subprocess.run(["kubectl", "--kubeconfig", kc, "--cache-dir", workdir + "/kcache"] + list(args),
                       capture_output=True, text=True, timeout=180)
    check(r.returncode == 0, "kubectl %s -> %d: %s" % (" ".join(args), r.returncode, r.stderr[-1500:]))
    return sorted(r.stdout.split())


def check_queries(sim, b, url, scope):
    """Every selector, with and without a namespace, through both endpoints."""
    total = len(sim.state("pods")["items"])
    in_ns = {ns: len(server(sim, "", ns)) for ns in ("ns1", "ns3")}
    cases = [
        # (selector, namespace, objects the query may read: "match" = exactly the answer)
        ("app=app-7", None, "match"),
        ("app==app-8", "ns1", "match"),
        ("app in (app-1, app-2, app-1)", None, "match"),
        ("app in (app-3,app-4)", "ns3", "match"),
        ("app=nope", None, "match"),
        ("app=app-7,tier=back", None, "app=app-7"),
        ("tier=back", None, "all"),                # tier is not indexed
        ("tier=front", "ns1", "ns"),
        ("app!=app-3", None, "all"),
        ("!app", None, "all"),
        ("app notin (app-1,app-2)", "ns3", "ns"),
        ("app", None, "all"),
    ]
    for sel, ns, reads in cases:
        want = server(sim, sel, ns)
        for name, fn in (("snapshot", snapshot), ("kube list", kube_list)):
            got, read = read_by(b, lambda: fn(url, sel, ns))
            check(got == want, "%s %s -l %r ns=%s: %d objects, the server has %d; missing %s extra %s"
                  % (scope, name, sel, ns, len(got), len(want), sorted(set(want) - set(got))[:3],
                     sorted(set(got) - set(want))[:3]))
            if reads == "match":
                limit = len(want)
            elif reads == "all":
                limit = total
            elif reads == "ns":
                limit = in_ns[ns]
            else:
                limit = len(server(sim, reads, ns))
            check(read == limit, "%s %s -l %r ns=%s read %d objects, expected %d (%s)"
                  % (scope, name, sel, ns, read, limit, reads))
    # Paged: every page from the first page's cut, only the matches read once.
    for sel in ("app=app-7", "app!=app-3"):
        want = server(sim, sel, None)
        got, read = read_by(b, lambda: paged(url, sel))
        check(got == want, "%s paged -l %r: %d objects, the server has %d" % (scope, sel, len(got), len(want)))
        check(read == (len(want) if sel == "app=app-7" else total), "%s paged -l %r read %d" % (scope, sel, read))
    first = fetch(url, "/api/v1/pods?limit=10&labelSelector=app%3Dapp-7")
    code, _, body = http_request(url + "/api/v1/pods?limit=10&labelSelector=app%3Dapp-8&continue=" +
                                 urllib.parse.quote(first["metadata"]["continue"]))
    check(code == 400 and b"labelSelector differs" in body, "continue with another selector -> %d %r" % (code, body))
    # kubectl through the kube API, as a user would.
    for args, sel, ns in ((["-A", "-l", "app=app-7"], "app=app-7", None),
                          (["-n", "ns1", "-l", "app in (app-1,app-2)"], "app in (app-1,app-2)", "ns1"),
                          (["-A", "-l", "!app"], "!app", None)):
        names, read = read_by(b, lambda: kubectl(url, b.dir, "get", "pods", "-o", "name", *args))
        want = server(sim, sel, ns)
        check(names == sorted("pod/" + k.split("/", 1)[1] for k in want),
              "%s kubectl get pods %s: %d names, the server has %d" % (scope, " ".join(args), len(names), len(want)))
        if sel.startswith("app") and "!" not in sel:
            check(read == len(want), "kubectl -l %s read %d objects, not only its %d matches" % (sel, read, len(want)))


def test():
    sim = Sim()
    ops = [{"op": "create", "resource": "pods", "version": "v1", "namespace": "ns%d" % (i % 4),
            "name": "p%05d" % i, "labels": labels_of(i)} for i in range(N)]
    for at in range(0, N, 5000):
        sim.bulk(ops[at:at + 5000])
    work = tempfile.mkdtemp(prefix="kblindex-")
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0";', extra='state_dir = "%s/state";' % work,
               informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 500; '
                          'index_labels = [ "app" ]; }'])
    url = b.http_url()
    b.wait_converged(sim, timeout=300)
    ix = index(b)
    check(ix["labels"] == ["app"] and ix["labelSets"] == APPS, "index: %s" % ix)
    # The kube API's first list also makes its watch window (from a full cut,
    # once): after this one, each query below is the only reader.
    kube_list(url, "app=app-0", None)
    check_queries(sim, b, url, "synced")

    # Labels change and objects go: the sets follow.
    moved = [i for i in range(N) if i % APPS == 7][:60]
    sim.bulk([{"op": "update", "resource": "pods", "version": "v1", "namespace": "ns%d" % (i % 4),
               "name": "p%05d" % i, "labels": {"app": "app-8", "moved": "yes"}} for i in moved])
    sim.bulk([{"op": "delete", "resource": "pods", "version": "v1", "namespace": "ns%d" % (i % 4),
               "name": "p%05d" % i} for i in moved[:20]] +
             [{"op": "update", "resource": "pods", "version": "v1", "namespace": "ns%d" % (i % 4),
               "name": "p%05d" % i, "labels": {}} for i in range(1, N, 997)])
    b.wait_converged(sim, timeout=120)
    check_queries(sim, b, url, "after changes")
    got = snapshot(url, "moved=yes", None)
    check(len(got) == 40, "40 moved pods remain: %d" % len(got))
    log = b.logtext()
    check("stored object unreadable" not in log, "a cut read an object it could not find:\n" + log[-2000:])
    check(b.stop() == 0, "kbridge exit code")

    # The same answers from a cache without state_dir.
    b = Bridge(sim, http='listen = "127.0.0.1:0";',
               informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 500; '
                          'index_labels = [ "app" ]; }'])
    url = b.http_url()
    b.wait_converged(sim, timeout=300)
    kube_list(url, "app=app-0", None)
    check_queries(sim, b, url, "no state_dir")
    check(b.stop() == 0, "kbridge exit code")


if __name__ == "__main__":
    run(test)
