"""`kbridge --check` refuses every config that start-up would refuse, naming the key.

Each of these used to print "configuration is valid" and exit 0: an informer label_selector that
does not parse (the server answers 400 to every list, for ever), a kubeconfig that does not exist,
a file sink in a directory that does not exist, a state_dir that names a file, an http.token_file
that does not exist. A cluster.token_file that cannot be read was only a warning and kbridge ran
unauthenticated: now it stops start-up with exit 2 too. An empty http.token_file (what a placeholder
Secret leaves) passed --check, and start-up then failed with exit 1: both refuse it with exit 2, naming
the file and line of the http group. The summary has a line for ha and one for kube_api."""
import subprocess
from kbtest import *


def run_kbridge(text, check_only=True):
    d = tempfile.mkdtemp(prefix="kbtest-")
    cfg = os.path.join(d, "kbridge.cfg")
    with open(cfg, "w") as f:
        f.write(text.replace("{dir}", d))
    env = dict(os.environ)
    for k in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(k, None)
    args = [KBRIDGE, "--config", cfg] + (["--check"] if check_only else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    return p.returncode, p.stdout + p.stderr, d


def config(cluster='server = "http://127.0.0.1:1";', top="", informer="", sink_path="{dir}/out.jsonl"):
    return ('cluster = { name = "t"; %s };\n%s\n'
            'informers = ( { name = "pods"; resource = "pods"; %s } );\n'
            'sinks = ( { name = "out"; type = "file"; path = "%s"; } );\n'
            'routes = ( { informer = "pods"; sink = "out"; } );\n' % (cluster, top, informer, sink_path))


def test():
    rc, out, _ = run_kbridge(config())
    check(rc == 0 and "configuration is valid" in out, "the base config is valid (rc %d): %s" % (rc, out))
    for want in ("\nha: off", "\nkube_api: "):
        check(want in out, "the --check summary has a line %r:\n%s" % (want.strip(), out))
    rc, out, _ = run_kbridge(config(top='ha = { enabled = true; identity = "r1"; lease_seconds = 20; };\n'
                                        'kube_api = { enabled = false; };'))
    check(rc == 0 and re.search(r"\nha: lease \S+ namespace .+ identity r1, lease 20s renew 5s", out) and
          "\nkube_api: off" in out, "--check summarises ha and kube_api (rc %d):\n%s" % (rc, out))

    cases = [
        ("a label_selector that does not parse", config(informer='label_selector = "app in (web";'),
         ["informers[0].label_selector", "app in (web"]),
        ("a kubeconfig that does not exist", config(cluster='kubeconfig = "{dir}/no-such-kubeconfig";'),
         ["no-such-kubeconfig"]),
        ("a sink path in a directory that does not exist", config(sink_path="{dir}/no-such-dir/out.jsonl"),
         ["sinks.out.path", "no-such-dir", "does not exist"]),
        ("a state_dir that names a file", config(top='state_dir = "{dir}/kbridge.cfg";'),
         ["state_dir", "not a directory"]),
        ("an http.token_file that does not exist",
         config(top='http = { listen = "127.0.0.1:0"; token_file = "{dir}/no-such-token"; };'),
         ["http.token_file", "no-such-token"]),
        ("a cluster.token_file that does not exist",
         config(cluster='server = "http://127.0.0.1:1"; token_file = "{dir}/no-such-token";'),
         ["cluster.token_file", "no-such-token"]),
    ]
    for what, text, words in cases:
        rc, out, _ = run_kbridge(text)
        check(rc == 2, "--check refuses %s with exit 2 (rc %d):\n%s" % (what, rc, out))
        check("configuration is valid" not in out, "--check does not call %s valid" % what)
        for w in words:
            check(w in out, "the refusal of %s names %r:\n%s" % (what, w, out))

    # An empty http.token_file: --check and start-up refuse it alike, with exit 2 and FILE:LINE.
    empty = config(top='\nhttp = {\n listen = "127.0.0.1:0";\n token_file = "{dir}/token"; };')
    for check_only in (True, False):
        d = tempfile.mkdtemp(prefix="kbtest-")
        open(os.path.join(d, "token"), "w").close()
        text = empty.replace("{dir}", d)
        cfg = os.path.join(d, "kbridge.cfg")
        with open(cfg, "w") as f:
            f.write(text)
        p = subprocess.run([KBRIDGE, "--config", cfg] + (["--check"] if check_only else []), capture_output=True,
                           text=True, timeout=60)
        out = p.stdout + p.stderr
        what = "--check" if check_only else "start-up"
        check(p.returncode == 2, "%s refuses an empty http.token_file with exit 2 (rc %d):\n%s" %
              (what, p.returncode, out[-2000:]))
        check("%s:3: http.token_file" % cfg in out and "empty" in out and "configuration is valid" not in out,
              "%s names FILE:LINE, the key and why:\n%s" % (what, out[-2000:]))

    # Start-up itself: a missing cluster.token_file stops it (it used to run unauthenticated).
    rc, out, _ = run_kbridge(cases[-1][1], check_only=False)
    check(rc == 2 and "no-such-token" in out, "start-up refuses a missing cluster.token_file (rc %d):\n%s" %
          (rc, out[-2000:]))


run(test)
