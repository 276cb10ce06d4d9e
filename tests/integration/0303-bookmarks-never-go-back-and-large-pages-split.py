"""A BOOKMARK never moves the resume point back; a list page over the body bound is split, not fatal.

1. A BOOKMARK with a lower resourceVersion than the resume point used to become the resume point:
   the next watch asked for history already delivered. A small fake API server on 127.0.0.1 sends
   BOOKMARK 120 then BOOKMARK 50; every later watch must ask for 120.
2. With the default page_size, ~1 MiB objects (Helm release Secrets) make a list page exceed the
   page bound (512 MiB) and the informer never synced. Here the bound is lowered for the test
   (KB_TEST_LIST_MAX_BODY, bytes) and the objects padded: the informer halves its page size, says
   so in the log, and syncs everything."""
import http.server
import threading
import urllib.parse
from kbtest import *

POD = {"kind": "Pod", "apiVersion": "v1",
       "metadata": {"name": "a", "namespace": "ns1", "uid": "u-a", "resourceVersion": "100"}}


class FakeAPI(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    watches = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        if u.path != "/api/v1/pods":
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if q.get("watch") != "true":
            self.wfile.write(json.dumps({"kind": "PodList", "apiVersion": "v1",
                                         "metadata": {"resourceVersion": "100"},
                                         "items": [POD]}).encode())
            return
        FakeAPI.watches.append(q.get("resourceVersion"))
        if len(FakeAPI.watches) == 1:
            for rv in ("120", "50"):
                frame = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                                         "metadata": {"resourceVersion": rv}}}
                self.wfile.write((json.dumps(frame) + "\n").encode())
        else:
            time.sleep(0.2)  # an empty watch: the bridge backs off a little and asks again


def bookmarks():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeAPI)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        text = ('cluster = { name = "t"; server = "http://127.0.0.1:%d"; };\nhttp = { listen = ""; };\n'
                'informers = ( { name = "pods"; version = "v1"; resource = "pods"; list_mode = "paged"; } );\n'
                'sinks = ( { name = "out"; type = "file"; path = "{out}"; } );\n'
                'routes = ( { informer = "pods"; sink = "out"; } );\n' % srv.server_address[1])
        b = ConfigBridge(text)
        wait_for(lambda: len(FakeAPI.watches) >= 3, 60, what="three watch requests")
        b.stop()
        check(FakeAPI.watches[0] == "100", "the first watch starts at the list's RV: %s" % FakeAPI.watches)
        check(all(rv == "120" for rv in FakeAPI.watches[1:]),
              "after BOOKMARK 120 then BOOKMARK 50 every watch resumes at 120: %s" % FakeAPI.watches)
        check("BOOKMARK rv=50 is below the resume point rv=120" in b.logtext(), "the ignored bookmark is logged")
    finally:
        srv.shutdown()


def large_pages():
    sim = Sim()
    pad = {"spec": {"pad": "x" * 200000}}
    sim.bulk(pod_ops("create", "ns1", ["big%02d" % i for i in range(12)], extra=pad))
    text = ('cluster = { name = "t"; server = "%s"; };\nhttp = { listen = ""; };\n'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; list_mode = "paged"; } );\n'
            'sinks = ( { name = "out"; type = "file"; path = "{out}"; } );\n'
            'routes = ( { informer = "pods"; sink = "out"; } );\n' % sim.url)
    b = ConfigBridge(text, env={"KB_TEST_LIST_MAX_BODY": "700000"})
    b.wait_converged(sim)
    log = b.logtext()
    check("asking for 250 per page" in log and "asking for 2 per page" in log,
          "the log says the page size was lowered:\n%s" % log[-3000:])
    limits = sorted({int(r["query"]["limit"]) for r in sim.requests() if r["query"].get("limit")})
    check(limits[0] == 2, "the pages that went through asked for 2 objects: %s" % limits)
    check(b.stop() == 0, "clean stop")
    sim.stop()


def test():
    bookmarks()
    large_pages()


run(test)
