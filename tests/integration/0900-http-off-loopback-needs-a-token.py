"""Secure by default: an HTTP API listening beyond loopback without
http.token_file is refused at load (exit 2, --check too) with a message
naming http.token_file and http.allow_unauthenticated, before anything
starts; with the token, or with http.allow_unauthenticated = true said
explicitly, the same config is valid. Loopback needs neither. (The test
never binds a non-loopback address: the refusal comes before any socket.)"""
import subprocess
import tempfile
from kbtest import *

CFG = """cluster = { name = "dev"; server = "http://127.0.0.1:1"; };
http = { %(http)s };
informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );
sinks = ( { name = "out"; type = "file"; path = "%(dir)s/out.jsonl"; } );
routes = ( { informer = "pods"; sink = "out"; } );
"""


def kbridge(http, *args):
    d = tempfile.mkdtemp(prefix="kb0900-")
    with open(d + "/token", "w") as f:
        f.write("t0ken-0900\n")
    path = d + "/k.cfg"
    with open(path, "w") as f:
        f.write(CFG % {"http": http % {"dir": d}, "dir": d})
    p = subprocess.run([KBRIDGE, "--config", path] + list(args), capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def test():
    for listen in ("0.0.0.0:9464", "[::]:9464", "10.1.2.3:0", "kbridge.example:9464"):
        for args in ((), ("--check",)):
            rc, out, err = kbridge('listen = "%s";' % listen, *args)
            check(rc == 2, "%s %s: exit 2 without a token, got %d (%s)" % (listen, args, rc, err))
            check("http.allow_unauthenticated" in err and "http.token_file" in err and listen in err,
                  "%s: the message names the address and both keys: %r" % (listen, err))
            check("starting" not in err and "listening" not in err, "%s: nothing started: %r" % (listen, err))
        rc, out, err = kbridge('listen = "%s"; token_file = "%%(dir)s/token";' % listen, "--check")
        check(rc == 0, "%s with http.token_file is valid: %s" % (listen, err))
        rc, out, err = kbridge('listen = "%s"; allow_unauthenticated = true;' % listen, "--check")
        check(rc == 0, "%s with allow_unauthenticated = true is valid: %s" % (listen, err))
        check("unauthenticated" in out, "--check says the API is open: %r" % out)
    for listen in ("127.0.0.1:0", "127.0.0.2:9464", "[::1]:9464", "localhost:9464", ""):
        rc, out, err = kbridge('listen = "%s";' % listen, "--check")
        check(rc == 0, "loopback %r needs no token: %s" % (listen, err))


run(test)
