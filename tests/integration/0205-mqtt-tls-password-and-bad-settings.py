"""TLS and password brokers through the real binary; wrong and bad settings.

- TLS (tests/infra/mosquitto.sh tls: generated CA, server and client
  certificates, the broker requires a client certificate): with ca_file,
  cert_file and key_file kbridge's retained state reaches a TLS subscriber.
- Password (mosquitto.sh auth): the right password_file works; the password
  never appears in the log.
- A password over tcp:// (no TLS): a WARN at start on loopback; to any other
  host, refused at start (exit 2) unless allow_plaintext_password = true.
- A wrong password: a clear error in the log naming the sink and the
  broker's refusal, retried (the broker sees repeated attempts), no crash.
- Bad settings exit 2 naming the key: a missing ca_file, a cert_file without
  key_file, a missing password_file, TLS files on a tcp:// uri."""
from kbtest import *


def pods_retained(broker, prefix="k8s/test/pods/"):
    return {t[len(prefix):]: m["props"].get("k8s-resource-version") for t, m in broker.retained(prefix + "#").items()}


def server(sim):
    return {i["key"]: i["resourceVersion"] for i in sim.state()["items"]}


def mqtt_bridge(sim, sink_keys, client_id, shutdown_timeout=None):
    b = Bridge(sim, sinks=['{ name = "mqtt"; type = "mqtt"; client_id = "%s"; qos = 1; %s }'
                           % (client_id, sink_keys)],
               routes=['{ informer = "pods"; sink = "mqtt"; mode = "state"; }'], start=False)
    if shutdown_timeout is not None:
        set_shutdown_timeout(b, shutdown_timeout)
    b.start()
    return b


def bad_config(sim, sink_keys, key):
    b = mqtt_bridge(sim, sink_keys, "kbtest-0205-bad")
    try:
        rc = b.proc.wait(60)
    except subprocess.TimeoutExpired:
        raise Failure("kbridge did not refuse %s" % sink_keys)
    log = b.logtext()
    check(rc == 2, "%s: exit 2, got %d: %s" % (sink_keys, rc, log[-500:]))
    check(key + ":" in log and "kbridge.cfg:" in log, "%s: the error names the file and %s: %s"
          % (sink_keys, key, log[-500:]))


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "default", ["web-%d" % i for i in range(5)]))

    tls = Mosquitto("tls")
    e = tls.env
    b = mqtt_bridge(sim, 'uri = "%s"; ca_file = "%s"; cert_file = "%s"; key_file = "%s";'
                    % (tls.uri, e["KB_MQTT_CA"], e["KB_MQTT_CERT"], e["KB_MQTT_KEY"]), "kbtest-0205-tls")
    check(tls.uri.startswith("ssl://"), "the TLS broker's uri is ssl://")
    wait_for(lambda: pods_retained(tls) == server(sim), 60, 0.3, "the state over TLS")
    check(b.stop() == 0, "kbridge (TLS) exits 0 on SIGTERM")

    auth = Mosquitto("auth")
    e = auth.env
    with open(e["KB_MQTT_PASSWORD_FILE"]) as f:
        password = f.read().strip()
    b = mqtt_bridge(sim, 'uri = "%s"; username = "%s"; password_file = "%s";'
                    % (auth.uri, e["KB_MQTT_USER"], e["KB_MQTT_PASSWORD_FILE"]), "kbtest-0205-auth")
    wait_for(lambda: pods_retained(auth) == server(sim), 60, 0.3, "the state with a password")
    check(b.stop() == 0, "kbridge (password) exits 0 on SIGTERM")
    check(password not in b.logtext(), "the password is never logged")
    check("WARN  main mqtt: sink=mqtt sends its password in clear text: uri %s is not ssl://" % auth.uri
          in b.logtext(), "a password over tcp:// is warned about at start: %s" % b.logtext()[-1500:])

    wrong = os.path.join(tempfile.mkdtemp(prefix="kbtest-"), "wrong-password")
    with open(wrong, "w") as f:
        f.write("not-the-password\n")
    # shutdown_timeout 2 s: the stop waits it out for the sink that never connects
    b = mqtt_bridge(sim, 'uri = "%s"; username = "%s"; password_file = "%s";'
                    % (auth.uri, e["KB_MQTT_USER"], wrong), "kbtest-0205-wrong", shutdown_timeout=2)
    # the line comes from the client library's thread: the thread name is not part of the check
    refusal = " mqtt: sink=mqtt connect to %s refused by the broker: " % auth.uri
    wait_for(lambda: refusal in b.logtext(), 60, 0.2, "%r in the kbridge log" % refusal)
    log = b.logtext()
    check("ERROR " in [l for l in log.splitlines() if refusal in l][0], "the refusal is an ERROR: %s" % log[-500:])
    why = log.split(refusal, 1)[1].split("\n", 1)[0]
    check(why.startswith(("Not authorized", "Bad user name or password")) and "password_file" in why,
          "the error says why and what to check: %s" % why)
    wait_for(lambda: auth.logtext().count("Client <unknown> disconnected, not authorised") >= 3, 60, 0.3,
             "the broker to see at least three attempts (retries with backoff)")
    check(b.alive(), "a wrong password is not fatal: kbridge keeps running and retrying")
    check("not-the-password" not in b.logtext(), "the (wrong) password is never logged")
    b.stop()
    check(b.proc.returncode in (0, 1), "kbridge stops on SIGTERM without crashing (rc %d)" % b.proc.returncode)

    missing = "/nonexistent/kbtest-ca.crt"
    bad_config(sim, 'uri = "%s"; ca_file = "%s";' % (tls.uri, missing), "ca_file")
    bad_config(sim, 'uri = "%s"; ca_file = "%s"; cert_file = "%s";' % (tls.uri, tls.env["KB_MQTT_CA"],
                                                                      tls.env["KB_MQTT_CERT"]), "key_file")
    bad_config(sim, 'uri = "%s"; username = "u"; password_file = "/nonexistent/pw";' % auth.uri, "password_file")
    bad_config(sim, 'uri = "%s"; ca_file = "%s";' % (auth.uri, tls.env["KB_MQTT_CA"]), "ca_file")
    # a password in clear text to a broker off this machine: refused before any connection is tried
    # (192.0.2.1 is TEST-NET-1; nothing is sent to it)
    bad_config(sim, 'uri = "tcp://192.0.2.1:1883"; username = "u"; password_file = "%s";'
               % e["KB_MQTT_PASSWORD_FILE"], "password_file")
    sim.stop()


run(test)
