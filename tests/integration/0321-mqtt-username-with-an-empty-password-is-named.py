"""An MQTT sink with a username and an empty password is refused at --check and at start, naming the key;
a username without any password_file is allowed and --check says so.

What a placeholder Secret leaves is an empty file, or one whose first line is empty: kbridge never
connects with "" as the password. --check and start-up both exit 2 with `kbridge.cfg:N: password_file:
<path> is empty (fill the Secret it comes from)`, before any connection is tried (the uri is a port
nothing listens on). A username with no password_file at all is MQTT's username-only login (brokers that
trust a client certificate or the name alone): it starts, and --check's summary says `(no password)` so
a password_file forgotten in the config shows before the broker refuses the login."""
import subprocess
import kbtest
from kbtest import *


def config(d, sim_url, pw_key):
    return with_mqtt_client(
        'cluster = { name = "t"; server = "%s"; };\nhttp = { listen = ""; };\n'
        'informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );\n'
        'sinks = ( { name = "m"; type = "mqtt"; uri = "tcp://127.0.0.1:%d"; client_id = "kbtest-0321";\n'
        '            username = "kbridge"; %s } );\n'
        'routes = ( { informer = "pods"; sink = "m"; } );\n' % (sim_url, kbtest._free_port(), pw_key))


def run_kbridge(d, text, check_only):
    cfg = os.path.join(d, "kbridge.cfg")
    with open(cfg, "w") as f:
        f.write(text)
    env = dict(os.environ)
    for k in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(k, None)
    args = [KBRIDGE, "--config", cfg] + (["--check"] if check_only else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    return p.returncode, p.stdout + p.stderr


def test():
    sim = Sim()
    d = tempfile.mkdtemp(prefix="kbtest-")
    for what, content in (("empty", ""), ("newline", "\n"), ("crlf", "\r\nsecond-line-is-not-read\n")):
        pw = os.path.join(d, "pw-" + what)
        with open(pw, "w") as f:
            f.write(content)
        os.chmod(pw, 0o600)
        text = config(d, sim.url, 'password_file = "%s";' % pw)
        for check_only in (True, False):
            how = "--check" if check_only else "start"
            rc, out = run_kbridge(d, text, check_only)
            check(rc == 2, "%s, %s password file: exit 2, got %d:\n%s" % (how, what, rc, out[-800:]))
            check("kbridge.cfg:4: password_file: %s is empty" % pw in out,
                  "%s, %s password file: the error names the file, line and key:\n%s" % (how, what, out[-800:]))
            check("connect" not in out, "%s: refused before any connection:\n%s" % (how, out[-800:]))

    rc, out = run_kbridge(d, config(d, sim.url, ""), True)
    check(rc == 0, "a username without password_file is valid (MQTT's username-only login): rc %d\n%s" % (rc, out))
    check("username=kbridge (no password)" in out, "--check says the login has no password:\n%s" % out)
    sim.stop()


run(test)
