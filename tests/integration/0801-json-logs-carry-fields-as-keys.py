"""With log.format = "json" every stderr line is one JSON object; its msg is
the message exactly as the text format prints it (nothing is cut out of the
prose), and the fields a log pipeline filters on — informer, sink, seq, rv,
server — are members of their own, set by the code that logs, with clean
values. Before, the logger lifted key=value tokens out of the text: values
kept the prose's punctuation ("state_dir":"/…/pods:", "rv":"(none:"), msg
stopped reading as a sentence, and the reload line's second kept= (sinks)
stayed in msg while the first (informers) became a key.

One run goes through a start with state_dir, a list (after an injected 500),
the watch, a SIGHUP reload and a stop; the same run in text format must print
the same messages."""
import re
from kbtest import *

TEXT = re.compile(r"^\S+ (DEBUG|INFO |WARN |ERROR) (\S+) (\S+): (.*)$")
CLEAN = re.compile(r"^[^\s,;:()]+$")


def config(sim, fmt):
    return """cluster = { name = "t"; server = "%s"; };
http = { listen = ""; };
log = { level = "debug"; format = "%s"; };
state_dir = "{dir}/state";
informers = ( { name = "pods"; version = "v1"; resource = "pods"; list_mode = "paged"; } );
sinks = ( { name = "out"; type = "file"; path = "{out}"; } );
routes = ( { informer = "pods"; sink = "out"; } );
""" % (sim.url, fmt)


def run_bridge(sim, fmt):
    """Start, list, watch, reload, stop; the log with the run's directory written {dir}."""
    sim.fault(kind="status", verb="list", resource="pods", code=500, count=1)  # a WARN with fields
    work = tempfile.mkdtemp(prefix="kbtest-")
    b = ConfigBridge(config(sim, fmt).replace("{dir}", work), workdir=work)
    b.wait_converged(sim)
    b.wait_log("sendInitialEvents", 30)
    b.proc.send_signal(signal.SIGHUP)
    b.wait_log("reloaded", 30)
    check(b.stop() == 0, "SIGTERM exits 0")
    return b.logtext().replace(work, "{dir}")


def messages(text):
    """(module, message) of every text-format line."""
    out = []
    for l in text.splitlines():
        m = TEXT.match(l)
        check(m, "a text line: %r" % l)
        out.append((m.group(3), m.group(4)))
    return out


def one(recs, what, pred):
    got = [r for r in recs if pred(r)]
    check(got, "a JSON line for %s" % what)
    return got[0]


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
        for k, v in r.items():
            check(isinstance(v, str), "field %s is a string: %r" % (k, r))
        recs.append(r)

    plain = run_bridge(sim, "text")
    check("informer=pods" in plain and not plain.lstrip().startswith("{"), "the text format keeps key=value")
    said = messages(plain)
    # msg is the message as written: these lines say the same in both formats.
    for start in ("informer=pods state_dir=", "informer=pods started: ", "reloaded {dir}/kbridge.cfg: ",
                  "server="):  # (the watch line's timeout is random)
        r = one(recs, start, lambda r: r["msg"].startswith(start))
        check((r["module"], r["msg"]) in said, "msg %r is the text format's message:\n%s"
              % (r["msg"], "\n".join(m for _, m in said if m.startswith(start))))

    st = one(recs, "the state_dir line", lambda r: r["msg"].startswith("informer=pods state_dir="))
    check(st.get("informer") == "pods" and st.get("state_dir") == "{dir}/state/pods" and st.get("seq") == "0"
          and "rv" not in st, "state_dir line fields are clean (no rv before the first list): %r" % st)
    lst = one(recs, "the list", lambda r: " listed items=" in r["msg"])
    check(lst.get("informer") == "pods" and lst.get("items") == "3" and re.match(r"^\d+$", lst.get("rv", "")),
          "the list line carries informer, items and rv: %r" % lst)
    w = one(recs, "the watch", lambda r: r["msg"].startswith("informer=pods watch rv="))
    check(w.get("informer") == "pods" and w.get("rv") == lst["rv"], "the watch line carries its rv: %r" % w)
    warn = [r for r in recs if r["level"] == "warn" and r.get("informer") == "pods" and r["module"] == "reflector"]
    check(warn, "the injected 500 gave a reflector WARN with informer as a key: %r" % recs[-5:])
    check(any(re.match(r"^http://127\.0\.0\.1:\d+$", r.get("server", "")) for r in recs),
          "apiclient's server is a key")
    rl = one(recs, "the reload", lambda r: r["msg"].startswith("reloaded "))
    want = {"informers_kept": "1", "informers_added": "0", "informers_removed": "0",
            "sinks_kept": "1", "sinks_added": "0", "sinks_removed": "0"}
    check(all(rl.get(k) == v for k, v in want.items()) and "kept" not in rl,
          "the reload line keeps informer and sink counts apart: %r" % rl)
    stop = one(recs, "the stop summary", lambda r: r["module"] == "bridge" and " delivered=" in r["msg"])
    check(stop.get("informer") == "pods" and stop.get("rv") == lst["rv"] and stop.get("objects") == "3",
          "the stop summary carries informer, objects and rv: %r" % stop)
    for r in recs:
        for k in ("informer", "sink", "seq", "rv", "state_dir"):
            if k in r:
                check(CLEAN.match(r[k].replace("{dir}", "d").replace("/", "_")), "%s=%r is clean in %r" % (k, r[k], r))
    sim.stop()


run(test)
