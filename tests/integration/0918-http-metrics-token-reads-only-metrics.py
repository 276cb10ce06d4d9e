"""http.metrics_token_file: the scraper's token reads /metrics (200) and the probes, and is refused (401)
on /v1/informers, /v1/snapshot, /v1/replay and the Kubernetes API, while http.token_file's token still
reads all of them. It rotates like the main token (a renamed-over file: the new one works, the old is
refused). kbridge --check refuses a metrics token without token_file, the same token in both files and an
empty metrics token file (exit 2)."""
from kbtest import *

MAIN, METRICS = "main-t0ken-0918", "metrics-t0ken-0918"
PATHS = ["/v1/informers", "/v1/snapshot/pods", "/v1/replay/pods", "/api/v1/pods", "/version"]


def write(path, text):
    with open(path + ".new", "w") as f:
        f.write(text)
    os.rename(path + ".new", path)


def check_refused(work, http, want):
    cfg = os.path.join(work, "check.cfg")
    with open(cfg, "w") as f:
        f.write('cluster = { name = "t"; server = "http://127.0.0.1:1"; };\nhttp = { %s };\n'
                'informers = ({ name = "pods"; version = "v1"; resource = "pods"; });\n'
                'sinks = ({ name = "out"; type = "file"; path = "%s/o"; });\n'
                'routes = ({ informer = "pods"; sink = "out"; });\n' % (http, work))
    r = subprocess.run([KBRIDGE, "--check", "--config", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    check(r.returncode == 2 and want in r.stderr, "--check with %s -> %d, want 2 and %r:\n%s" %
          (http, r.returncode, want, r.stderr))
    check("t0ken-0918" not in r.stdout + r.stderr, "no token is printed")


def test():
    work = tempfile.mkdtemp(prefix="kb0918-")
    main, metrics = work + "/token", work + "/metrics-token"
    write(main, MAIN + "\n")
    write(metrics, METRICS + "\n")
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1"]))
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0"; token_file = "%s"; metrics_token_file = "%s";'
               % (main, metrics))
    url = b.http_url()
    wait_for(lambda: http_request(url + "/readyz")[0] == 200, 60, 0.2, "ready")

    code = lambda path, token: http_request(url + path, token=token)[0]
    check(code("/metrics", METRICS) == 200, "the metrics token reads /metrics")
    check(code("/healthz", METRICS) == 200 and code("/readyz", METRICS) == 200, "and the probes")
    for p in PATHS:
        got = code(p, METRICS)
        check(got in (401, 403), "the metrics token must not read %s, got %d" % (p, got))
        if "/replay/" not in p:  # a replay follows live changes: its body never ends
            check(code(p, MAIN) == 200, "the main token reads %s" % p)
    check(code("/metrics", MAIN) == 200, "the main token reads /metrics")
    check(code("/metrics", None) == 401 and code("/metrics", "nope") == 401, "/metrics still needs a token")

    # Rotation: the new metrics token works, the old one is refused, the main token is untouched.
    write(metrics, "metrics2-t0ken-0918\n")
    wait_for(lambda: code("/metrics", "metrics2-t0ken-0918") == 200, 60, 0.2, "the rotated metrics token")
    check(code("/metrics", METRICS) == 401, "the old metrics token is refused")
    check(code("/v1/informers", "metrics2-t0ken-0918") == 401, "the rotated one reads no object either")
    check(code("/v1/informers", MAIN) == 200, "the main token still reads")
    check("t0ken-0918" not in b.logtext(), "no token is logged")
    check(b.stop() == 0, "clean stop")
    sim.stop()

    check_refused(work, 'listen = "127.0.0.1:0"; metrics_token_file = "%s";' % metrics,
                  "http.metrics_token_file needs http.token_file")
    write(metrics, MAIN + "\n")
    check_refused(work, 'listen = "127.0.0.1:0"; token_file = "%s"; metrics_token_file = "%s";' % (main, metrics),
                  "http.metrics_token_file")
    write(metrics, "")
    check_refused(work, 'listen = "127.0.0.1:0"; token_file = "%s"; metrics_token_file = "%s";' % (main, metrics),
                  "empty")


run(test)
