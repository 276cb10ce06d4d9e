"""With log.format = "json" every stderr line is one JSON object whose
key=value fields (informer, sink, rv, server, …) are members of their own,
not text inside msg: a log pipeline can filter on informer="pods" without
parsing prose. The text format of the same events keeps key=value in the
line."""
import re
from kbtest import *

FIELD = re.compile(r'(^|[ (])[a-z][a-z0-9_]*=[^\s,;)]')


def config(sim, fmt):
    return """cluster = { name = "t"; server = "%s"; };
http = { listen = ""; };
log = { level = "debug"; format = "%s"; };
informers = ( { name = "pods"; version = "v1"; resource = "pods"; list_mode = "paged"; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "pods"; sink = "out"; } );
""" % (sim.url, fmt)


def run_bridge(sim, fmt):
    sim.fault(kind="status", verb="list", resource="pods", code=500, count=1)  # a WARN with fields
    b = ConfigBridge(config(sim, fmt))
    b.wait_converged(sim)
    check(b.stop() == 0, "SIGTERM exits 0")
    return b.logtext()


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b", "c"]))
    text = run_bridge(sim, "json")
    lines = [l for l in text.splitlines() if l.strip()]
    check(len(lines) > 5, "the bridge logged: %d lines" % len(lines))
    recs = []
    for l in lines:
        try:
            r = json.loads(l)
        except ValueError:
            raise Failure("not a JSON line: %r" % l)
        for k in ("ts", "level", "thread", "module", "msg"):
            check(isinstance(r.get(k), str), "%s in %r" % (k, l))
        recs.append(r)
    for r in recs:
        check(not FIELD.search(r["msg"]), "no key=value left in msg: %r" % r)
        for k, v in r.items():
            check(isinstance(v, str), "field %s is a string: %r" % (k, r))
    check(any(r.get("informer") == "pods" for r in recs), "some line carries informer=pods as a key")
    warn = [r for r in recs if r["level"] == "warn" and r.get("informer") == "pods" and r["module"] == "reflector"]
    check(warn, "the injected 500 gave a reflector WARN with informer as a key: %r" % recs[-5:])
    check(any(r.get("server", "").startswith("http://127.0.0.1:") for r in recs), "apiclient's server= is a key")

    plain = run_bridge(sim, "text")
    check("informer=pods" in plain and not plain.lstrip().startswith("{"), "the text format keeps key=value")
    sim.stop()


run(test)
