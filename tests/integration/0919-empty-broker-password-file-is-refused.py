"""An empty broker password file (a placeholder Secret nobody filled, as the kustomize overlays ship) is
refused by kbridge --check with exit 2 naming the key and the file, never connected with: a Kafka
`sasl.password_file` property."""
from kbtest import *


def test():
    work = tempfile.mkdtemp(prefix="kb0919-")
    pw = os.path.join(work, "kafka-password")
    open(pw, "w").close()
    cfg = os.path.join(work, "k.cfg")
    with open(cfg, "w") as f:
        f.write('cluster = { name = "t"; server = "http://127.0.0.1:1"; };\nhttp = { listen = ""; };\n'
                'informers = ({ name = "pods"; version = "v1"; resource = "pods"; });\n'
                'sinks = ({ name = "k"; type = "kafka"; brokers = "127.0.0.1:9092"; properties = {\n'
                '  "security.protocol" = "SASL_PLAINTEXT"; "sasl.mechanism" = "PLAIN";\n'
                '  "sasl.username" = "u"; "sasl.password_file" = "%s"; }; });\n'
                'routes = ({ informer = "pods"; sink = "k"; });\n' % pw)
    r = subprocess.run([KBRIDGE, "--check", "--config", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    check(r.returncode == 2 and "sasl.password_file" in r.stderr and "empty" in r.stderr,
          "--check with an empty password file -> %d:\n%s" % (r.returncode, r.stderr))
    with open(pw, "w") as f:
        f.write("s3cret-0919\n")
    r = subprocess.run([KBRIDGE, "--check", "--config", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    check(r.returncode == 0 and "s3cret-0919" not in r.stdout + r.stderr, "a filled one passes: %s" % r.stderr)


run(test)
