"""Bad input: a config with a syntax error, an unknown key, a route to an
unknown sink or informer, a bad type or value exits 2 with FILE:LINE naming
it, before anything starts. --check validates and summarises. An unreachable
server gives clear log lines and retries, never a crash; SIGTERM still exits 0."""
import subprocess
import tempfile
from kbtest import *

GOOD = """cluster = { name = "dev"; server = "http://127.0.0.1:1"; };
informers = ( { name = "pods"; version = "v1"; resource = "pods"; page_size = 100; } );
sinks = ( { name = "out"; type = "file"; path = "%(out)s"; } );
routes = ( { informer = "pods"; sink = "out"; } );
"""


def kbridge(text, *args):
    d = tempfile.mkdtemp(prefix="kbcfg-")
    path = d + "/k.cfg"
    with open(path, "w") as f:
        f.write(text % {"out": d + "/out.jsonl"})
    p = subprocess.run([KBRIDGE, "--config", path] + list(args), capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr, path


CASES = [
    # (what, change to GOOD, line, words that must appear)
    ("syntax error", lambda t: t.replace('name = "dev";', 'name = = "dev";'), 1, ["syntax"]),
    ("unknown key", lambda t: t.replace('name = "dev";', 'nmae = "dev";'), 1, ["nmae"]),
    ("unknown sink", lambda t: t.replace('sink = "out"', 'sink = "kafka"'), 4, ["kafka"]),
    ("unknown informer", lambda t: t.replace('informer = "pods"', 'informer = "nodes"'), 4, ["nodes"]),
    ("bad type", lambda t: t.replace("page_size = 100", 'page_size = "x"'), 2, ["page_size"]),
    ("bad value", lambda t: t.replace('type = "file"', 'type = "ftp"'), 3, ["ftp"]),
    ("out of range", lambda t: t.replace("page_size = 100", "page_size = 0"), 2, ["page_size"]),
    ("bad event type", lambda t: t.replace('sink = "out";', 'sink = "out"; types = [ "ADDED", "CHANGED" ];'), 4,
     ["CHANGED"]),
    ("bad template", lambda t: t.replace('sink = "out";', 'sink = "out"; key = "{namespace}/{nme}";'), 4, ["nme"]),
    ("duplicate name", lambda t: t.replace('path = "%(out)s"; } );', 'path = "%(out)s"; }, { name = "out"; type = "file"; } );'),
     3, ["out"]),
]


def test():
    for what, change, line, words in CASES:
        rc, out, err, path = kbridge(change(GOOD))
        check(rc == 2, "%s: exit 2, got %d (%s)" % (what, rc, err))
        check(("%s:%d:" % (path, line)) in err, "%s: message names %s:%d: %r" % (what, path, line, err))
        for w in words:
            check(w in err, "%s: message names %r: %r" % (what, w, err))
        check("starting" not in err, "%s: nothing started" % what)

    rc, out, err, path = kbridge(GOOD, "--check")
    check(rc == 0, "--check on a good config exits 0: %s" % err)
    check("pods" in out and "out" in out and "valid" in out, "--check summarises: %r" % out)

    rc, _, err, _ = kbridge(GOOD, "--bogus")
    check(rc == 2, "an unknown flag exits 2")

    # An unreachable server: retries with clear lines, no crash, clean stop.
    b = Bridge(None)
    # One clear line (repeats of it are rate-limited), and the attempts go on: three in the debug log.
    wait_for(lambda: "failed" in b.logtext() and "will retry" in b.logtext() and
             b.logtext().count("informer=pods watch rv=") >= 3, 30, what="a failure logged and two retries")
    check(b.alive(), "still running while the server is unreachable")
    check("127.0.0.1:1" in b.logtext(), "the log names the server")
    check(b.stop() == 0, "SIGTERM exits 0")


run(test)
