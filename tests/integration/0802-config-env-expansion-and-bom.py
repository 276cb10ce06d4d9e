"""A config written for a pod: ${ENV} and ${ENV:-default} in string values
take the process environment (the server address and the output path come
from variables here, and the bridge really streams there), a file saved with a UTF-8 byte order mark loads, and an unset
variable without a default stops the start with exit 2 and
FILE:LINE: key: environment variable NAME is not set."""
from kbtest import *

TEXT = """\ufeffcluster = { name = "${KB_T_CLUSTER:-fallback}"; server = "${KB_T_SERVER}"; };
http = { listen = ""; };
informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );
sinks = ( { name = "out"; type = "file"; path = "${KB_T_DIR}/out.jsonl"; } );
routes = ( { informer = "pods"; sink = "out"; } );
"""


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a", "b"]))
    work = tempfile.mkdtemp(prefix="kbenv-")
    env = {"KB_T_SERVER": sim.url, "KB_T_DIR": work}
    b = ConfigBridge(TEXT, env=env, workdir=work)
    b.out = os.path.join(work, "out.jsonl")
    b.wait_converged(sim)
    evs = b.events()
    check(all(e["cluster"] == "fallback" for e in evs), "cluster name from the default: %r" % evs[:1])
    check(b.stop() == 0, "SIGTERM exits 0")

    cfg = os.path.join(work, "kbridge.cfg")
    with open(cfg, "rb") as f:
        check(f.read(3) == b"\xef\xbb\xbf", "the file starts with a byte order mark")
    run_env = dict(os.environ)
    run_env.update(env)
    run_env.pop("KB_T_CLUSTER", None)
    r = subprocess.run([KBRIDGE, "--check", "--config", cfg], capture_output=True, text=True, timeout=60,
                       env=run_env)
    check(r.returncode == 0 and "cluster fallback" in r.stdout, "--check with the variables set: %r" % (r,))
    del run_env["KB_T_SERVER"]
    for args in (["--check", "--config", cfg], ["--config", cfg]):
        r = subprocess.run([KBRIDGE] + args, capture_output=True, text=True, timeout=60, env=run_env)
        check(r.returncode == 2, "%s with KB_T_SERVER unset exits 2: %r" % (args, r))
        check("%s:1: cluster.server: environment variable KB_T_SERVER is not set" % cfg in r.stderr,
              "the error names the file, line, key and variable: %r" % r.stderr)
    sim.stop()


run(test)
