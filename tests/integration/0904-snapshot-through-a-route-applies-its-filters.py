"""POST /v1/snapshot/{informer}?route=R sends exactly what route R would
send live: a route limited to namespaces "web-*" and label_selector
"app=web" publishes SNAPSHOT envelopes of those pods only (never
private/payroll-db), {"published":N} counts what it sent, and a route whose
types leave SNAPSHOT out is refused with 400 naming its types rather than
bypassing them."""
import json
from kbtest import *

TOKEN = "t0ken-0904"


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "web-a", ["w1", "w2"], labels={"app": "web"}) +
             pod_ops("create", "web-b", ["w3"], labels={"app": "web"}) +
             pod_ops("create", "web-b", ["cache"], labels={"app": "redis"}) +
             pod_ops("create", "private", ["payroll-db"], labels={"app": "web"}))
    work = tempfile.mkdtemp(prefix="kb0904-")
    with open(work + "/token", "w") as f:
        f.write(TOKEN + "\n")
    web, live = work + "/web.jsonl", work + "/live.jsonl"
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0"; token_file = "%s/token";' % work,
               sinks=['{ name = "web"; type = "file"; path = "%s"; }' % web,
                      '{ name = "live"; type = "file"; path = "%s"; }' % live,
                      '{ name = "out"; type = "file"; path = "%s/out.jsonl"; }' % work],
               routes=['{ name = "web"; informer = "pods"; sink = "web"; namespaces = [ "web-*" ]; '
                       'label_selector = "app=web"; }',
                       '{ name = "live"; informer = "pods"; sink = "live"; namespaces = [ "web-*" ]; '
                       'types = [ "ADDED", "MODIFIED", "DELETED" ]; }',
                       '{ name = "all"; informer = "pods"; sink = "out"; }'])
    url = b.http_url()
    b.wait_converged(sim)
    wait_for(lambda: len(read_jsonl(web)) == 3, 30, 0.1, "the web route's live ADDEDs")
    live_keys = sorted("%s/%s" % (e["namespace"], e["name"]) for e in read_jsonl(web))

    code, _, body = http_request(url + "/v1/snapshot/pods?route=web", method="POST", body=b"", token=TOKEN)
    check(code == 200 and json.loads(body) == {"published": 3}, "published 3: %d %r" % (code, body))
    snaps = wait_for(lambda: [e for e in read_jsonl(web) if e["type"] == "SNAPSHOT"] if len(read_jsonl(web)) >= 6 else None,
                     30, 0.1, "3 SNAPSHOT envelopes")
    got = sorted("%s/%s" % (e["namespace"], e["name"]) for e in snaps)
    check(got == live_keys == ["web-a/w1", "web-a/w2", "web-b/w3"],
          "the snapshot holds what the route sends live: %s (live %s)" % (got, live_keys))
    check(not any(e["name"] == "payroll-db" for e in read_jsonl(web)), "private/payroll-db never reaches the web route")

    code, _, body = http_request(url + "/v1/snapshot/pods?route=live", method="POST", body=b"", token=TOKEN)
    st = json.loads(body)
    check(code == 400 and st["kind"] == "Status" and "SNAPSHOT" in st["message"] and "types" in st["message"],
          "a route without SNAPSHOT in types is refused: %d %r" % (code, st))
    check(not any(e["type"] == "SNAPSHOT" for e in read_jsonl(live)), "nothing was sent through it")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
