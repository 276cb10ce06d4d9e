"""Without state_dir the cache holds its objects compressed: 4,000 Pods of
about 3.5 KB (managedFields kept) cost at most 1,024 bytes each in memory in
total (entries, table, and the dictionary of about 170 KB, 40-odd bytes a Pod
at this count), as /v1/informers and kbridge_cache_bytes
report; and compression is lossless end to end: the snapshot, every resync
SYNC (label-selected routes included) and the Kubernetes list API return
each object exactly as the server serves it. With cache_compression = "off"
the same cache costs the objects' full size. With state_dir the records are
compressed with a dictionary persisted there: after a restart (which
continues with that dictionary, training none) the snapshot is still the
server's objects, and the index takes less disk than with plain zstd."""
from kbtest import *

PODS = 4000  # four times the 1,024 objects a dictionary is trained from
PAGE = 1000  # the kube list API is read in 4 pages


def compact(o):
    return json.dumps(o, separators=(",", ":"), ensure_ascii=False)


def by_key(items):
    return {o["metadata"]["namespace"] + "/" + o["metadata"]["name"]: compact(o) for o in items}


def served(items):
    """The server's list items as kbridge holds them: kind and apiVersion first (a list leaves them out)."""
    return by_key([dict([("kind", "Pod"), ("apiVersion", "v1")] + list(o.items())) for o in items])


def same(got, want, what):
    if got == want:
        return
    bad = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    k = bad[0]
    raise Failure("%s differs from the server's objects at %d key(s), e.g. %s:\n got  %s\n want %s"
                  % (what, len(bad), k, got.get(k, "(none)")[:1500], want.get(k, "(none)")[:1500]))


class Objects:
    """{namespace/name: compact object} of the first envelope per key in a growing JSON Lines file (a resync
    writes every object again each period), read incrementally."""

    def __init__(self, path):
        self.reader, self.got = JsonlReader(path), {}

    def poll(self):
        for e in self.reader.new():
            self.got.setdefault(e["namespace"] + "/" + e["name"], compact(e["object"]))
        return self.got


def get_json(url, path):
    code, _, body = http_request(url + path, timeout=120)
    check(code == 200, "GET %s -> %d %r" % (path, code, body[:300]))
    return json.loads(body)


def bridge(sim, work, compression, resync, state=False):
    inf = ('{ name = "pods"; version = "v1"; resource = "pods"; page_size = 500; drop_fields = [ ]; '
           'cache_compression = "%s"; resync_seconds = %d; }' % (compression, resync))
    sinks = ['{ name = "out"; type = "file"; path = "%s/out.jsonl"; }' % work]
    routes = ['{ informer = "pods"; sink = "out"; types = [ "ADDED", "MODIFIED", "DELETED" ]; }']
    if resync:
        sinks += ['{ name = "sync"; type = "file"; path = "%s/sync.jsonl"; }' % work,
                  '{ name = "web"; type = "file"; path = "%s/web.jsonl"; }' % work]
        routes += ['{ informer = "pods"; sink = "sync"; types = [ "SYNC" ]; }',
                   '{ informer = "pods"; sink = "web"; types = [ "SYNC" ]; label_selector = "app=web"; }']
    extra = 'state_dir = "%s/state";' % work if state else ""
    return Bridge(sim, workdir=work, http='listen = "127.0.0.1:0";', informers=[inf], sinks=sinks, routes=routes,
                  extra=extra)


def converged(b, sim):
    """Until the informer holds every pod and the file sink "out" acknowledged every change (cheap to poll:
    /v1/informers), then the output equals the server's state (read once)."""
    def done():
        d = b.informer_doc()
        return d["synced"] and d["objects"] == PODS and {"name": "out", "watermark": d["seq"]} in d["sinks"]
    wait_for(done, 300, 0.2, "the informer to hold every pod and the file sink to acknowledge every change")
    b.wait_converged(sim, timeout=300)


def disk_used(work):
    st = os.stat(os.path.join(work, "state", "pods", "data.mdb"))
    return st.st_blocks * 512


def trainings(b):
    return b.logtext().count("cache: dictionary ")


def test():
    sim = Sim()
    sim.ctl("generate", {"resource": "pods", "namespaces": 10, "count": PODS})
    _, raw = sim.request("GET", "/api/v1/pods", timeout=120)
    want = served(json.loads(raw)["items"])
    check(len(want) == PODS, "the server has %d pods" % len(want))
    size = sum(len(v.encode()) for v in want.values()) / PODS
    check(3000 <= size <= 4000, "a generated Pod is about 3.5 KB: %.0f B" % size)
    web = {k for k, v in want.items() if json.loads(v)["metadata"]["labels"]["app"] == "web"}

    work = tempfile.mkdtemp(prefix="kbzc-")
    b = bridge(sim, work, "auto", 5)
    url = b.http_url()
    converged(b, sim)

    doc = b.informer_doc()
    c = doc["cache"]
    per = c["bytes"] / PODS
    print("# %d pods of %.0f B: %.0f B per cached pod (raw %.0f B, ratio %.2f, dictionary %d B, %d training(s))"
          % (PODS, size, per, c["rawBytes"] / PODS, c["ratio"], c["dictBytes"], c["dictTrainings"]))
    check(c["compression"] is True and c["objects"] == PODS, "cache: %s" % c)
    check(c["compressed"] == PODS, "every entry compressed, the first samples too: %s" % c)
    check(c["dictTrainings"] >= 1 and c["dicts"] >= 1 and c["dictBytes"] > 0, "a dictionary: %s" % c)
    check(per <= 1024, "%.0f bytes per cached pod, over 1,024: %s" % (per, c))
    check(c["rawBytes"] > 3 * c["bytes"] and c["ratio"] > 3, "ratio: %s" % c)
    check(doc["cacheBytes"] == c["bytes"], "cacheBytes is the cache's memory: %s vs %s" % (doc["cacheBytes"], c))
    check(b.metric("kbridge_cache_bytes", informer="pods") == c["bytes"], "kbridge_cache_bytes")
    check(b.metric("kbridge_cache_raw_bytes", informer="pods") == c["rawBytes"], "kbridge_cache_raw_bytes")
    check(b.metric("kbridge_cache_dictionary_trainings_total", informer="pods") == c["dictTrainings"],
          "kbridge_cache_dictionary_trainings_total")

    # The snapshot: every object exactly as the server serves it.
    snap = get_json(url, "/v1/snapshot/pods")
    same(by_key(snap["items"]), want, "the snapshot")
    snap = get_json(url, "/v1/snapshot/pods?labelSelector=app%3Dweb")
    check(set(by_key(snap["items"])) == web, "snapshot -l app=web: %d of %d" % (len(snap["items"]), len(web)))

    # The Kubernetes list API (what kubectl get -o json reads), paged, and one get.
    items, cont = [], ""
    for _ in range(100):
        lst = get_json(url, "/api/v1/pods?limit=%d" % PAGE + ("&continue=" + cont if cont else ""))
        items += lst["items"]
        cont = lst["metadata"].get("continue", "")
        if not cont:
            break
    same(by_key(items), want, "the kube API list")
    k = sorted(want)[123]
    ns, name = k.split("/")
    one = get_json(url, "/api/v1/namespaces/%s/pods/%s" % (ns, name))
    check(compact(one) == want[k], "kube API get %s differs" % k)

    # Resync: a SYNC per cached pod, with the server's object; the label-selected route sees app=web only.
    syncs, webs = Objects(work + "/sync.jsonl"), Objects(work + "/web.jsonl")
    wait_for(lambda: len(syncs.poll()) >= PODS, 180, 0.5, "a SYNC for every cached pod")
    same(syncs.got, want, "the resync objects")
    wait_for(lambda: set(webs.poll()) >= web, 60, 0.5, "the app=web resync route")
    check(set(webs.got) <= web, "the label-selected SYNC route got other pods")
    check(b.stop() == 0, "SIGTERM exits 0")

    # The same cache uncompressed: the objects' full size (the figure to compare with).
    work2 = tempfile.mkdtemp(prefix="kbzc-off-")
    b2 = bridge(sim, work2, "off", 0)
    converged(b2, sim)
    c2 = b2.informer_doc()["cache"]
    print("# cache_compression = off: %.0f B per cached pod" % (c2["bytes"] / PODS))
    check(c2["compression"] is False and c2["compressed"] == 0 and c2["dictBytes"] == 0, "off: %s" % c2)
    check(c2["bytes"] / PODS >= size and c2["bytes"] == c2["rawBytes"], "off holds the objects as they are: %s" % c2)
    snap = get_json(b2.http_url(), "/v1/snapshot/pods")
    same(by_key(snap["items"]), want, "the uncompressed snapshot")
    check(b2.stop() == 0, "SIGTERM exits 0")

    # state_dir: records made with a persisted dictionary, readable after a restart.
    used = {}
    for mode in ("auto", "off"):
        w = tempfile.mkdtemp(prefix="kbzc-state-%s-" % mode)
        b3 = bridge(sim, w, mode, 0, state=True)
        converged(b3, sim)
        check(b3.stop() == 0, "SIGTERM exits 0")
        check(trainings(b3) == (1 if mode == "auto" else 0), "%s: dictionaries trained: %d" % (mode, trainings(b3)))
        b3.start()
        converged(b3, sim)
        same(by_key(get_json(b3.http_url(), "/v1/snapshot/pods")["items"]), want, "the snapshot after a restart (%s)" % mode)
        check(trainings(b3) == (1 if mode == "auto" else 0), "a restart trains no new dictionary")
        check(b3.stop() == 0, "SIGTERM exits 0")
        used[mode] = disk_used(w)
    print("# state_dir data.mdb per pod (index + journal): %.0f B with dictionaries, %.0f B with plain zstd"
          % (used["auto"] / PODS, used["off"] / PODS))
    check(used["auto"] < used["off"], "dictionaries make state_dir smaller: %s" % used)
    sim.stop()


run(test)
