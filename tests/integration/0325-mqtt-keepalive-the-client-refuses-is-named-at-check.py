"""A keepalive the MQTT client library refuses is a config error at --check and start, naming the key.

libmosquitto refuses a keep-alive of 1 to 4 seconds (0 is off) at every connect with "Invalid function
arguments provided.": kbridge accepted keepalive = 2 (the key allows 0..65535), started, and retried the
connect for ever with that WARN, delivering nothing. Now --check and start-up exit 2 with
`kbridge.cfg:N: keepalive: 2: the mosquitto client needs 0 (off) or at least 5 seconds`; with client =
"paho", which takes any keep-alive, 2 stays valid, and so do 0 and 5 with libmosquitto."""
import subprocess
import kbtest
from kbtest import *


def config(client, keepalive):
    return ('cluster = { name = "t"; server = "http://127.0.0.1:1"; };\nhttp = { listen = ""; };\n'
            'informers = ( { name = "pods"; version = "v1"; resource = "pods"; } );\n'
            'sinks = ( { name = "m"; type = "mqtt"; uri = "tcp://127.0.0.1:%d"; client_id = "kbtest-0325";\n'
            '            client = "%s"; keepalive = %d; } );\n'
            'routes = ( { informer = "pods"; sink = "m"; } );\n' % (kbtest._free_port(), client, keepalive))


def run_kbridge(d, text, check_only):
    cfg = os.path.join(d, "kbridge.cfg")
    with open(cfg, "w") as f:
        f.write(text)
    env = dict(os.environ)
    for k in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        env.pop(k, None)
    args = [KBRIDGE, "--config", cfg] + (["--check"] if check_only else [])
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=10, env=env)
    except subprocess.TimeoutExpired as e:
        raise Failure("%s: kbridge started instead of refusing the config:\n%s" % (
            "--check" if check_only else "start", (e.stderr or b"").decode(errors="replace")[-1500:]))
    return p.returncode, p.stdout + p.stderr


def test():
    d = tempfile.mkdtemp(prefix="kbtest-")
    for check_only in (True, False):
        how = "--check" if check_only else "start"
        rc, out = run_kbridge(d, config("mosquitto", 2), check_only)
        check(rc == 2, "%s, keepalive 2 with libmosquitto: exit 2, got %d:\n%s" % (how, rc, out[-1500:]))
        check("kbridge.cfg:4: keepalive: 2: the mosquitto client needs 0 (off) or at least 5 seconds" in out,
              "%s: the error names the file, line and key:\n%s" % (how, out[-1500:]))
    for client, keepalive in (("paho", 2), ("mosquitto", 0), ("mosquitto", 5)):
        rc, out = run_kbridge(d, config(client, keepalive), True)
        check(rc == 0, "client %s keepalive %d is valid: rc %d\n%s" % (client, keepalive, rc, out[-1500:]))


run(test)
