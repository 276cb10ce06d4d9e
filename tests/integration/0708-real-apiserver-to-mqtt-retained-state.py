#!/usr/bin/env python3
"""Real kube-apiserver -> kbridge -> real Mosquitto, mode = "state": after kubectl creates,
patches, deletes and a delete + re-create (new uid) of configmaps, a subscriber arriving later to
k8s/real/configmaps/# receives, retained, exactly the API server's current state — one message
per live configmap with its uid and resourceVersion, nothing for the deleted ones."""
import json
import signal

from kbtest import Failure, check, ConfigBridge, ControlPlane, Mosquitto, key_of, run, wait_for


def retained_state(broker):
    got = {}
    for topic, m in broker.retained("k8s/real/configmaps/#").items():
        env = json.loads(m["payload"])
        check(topic == "k8s/real/configmaps/" + key_of(env), "topic %s" % topic)
        got[key_of(env)] = (env["uid"], env["resourceVersion"])
    return got


def server_state(cp):
    status, body = cp.request("GET", "/api/v1/namespaces/m/configmaps")
    check(status == 200, "list configmaps -> %d" % status)
    return {"m/" + i["metadata"]["name"]: (i["metadata"]["uid"], i["metadata"]["resourceVersion"])
            for i in body["items"]}


def test():
    broker = Mosquitto()
    cp = ControlPlane()
    k = cp.kubectl
    k("create", "namespace", "m")
    names = ["cm-%02d" % i for i in range(20)]
    k("apply", "-f", "-", input="\n---\n".join(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: m}\ndata: {v: '0'}" % n for n in names))
    b = ConfigBridge("""
cluster = { name = "real"; kubeconfig = "%s"; };
http = { listen = ""; };
shutdown_timeout = 20;
log = { level = "info"; };
informers = ( { name = "cms"; version = "v1"; resource = "configmaps"; namespaces = [ "m" ]; } );
sinks = ( { name = "mqtt"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0708"; qos = 1; } );
routes = ( { informer = "cms"; sink = "mqtt"; mode = "state"; } );
""" % (cp.kubeconfig, broker.uri))

    def converge(what):
        try:
            wait_for(lambda: retained_state(broker) == server_state(cp), 180, 0.5, what)
        except Failure:
            want, got = server_state(cp), retained_state(broker)
            raise Failure("%s: missing=%s extra=%s differ=%s\n--- log ---\n%s" % (
                what, sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5],
                [k for k in want if k in got and want[k] != got[k]][:5], b.logtext()[-3000:]))

    converge("the retained messages to equal the listed configmaps")
    for n in names[:8]:
        k("patch", "configmap", "-n", "m", n, "-p", '{"data":{"v":"1"}}')
    k("delete", "configmap", "-n", "m", *names[15:])
    old_uid = server_state(cp)["m/cm-03"][0]
    k("delete", "configmap", "-n", "m", "cm-03")
    k("create", "configmap", "-n", "m", "cm-03", "--from-literal=v=new")
    converge("the retained messages to follow the watch")
    got = retained_state(broker)
    check(len(got) == 15 and not any("m/" + n in got for n in names[15:]), "deleted configmaps left no message")
    check(got["m/cm-03"][0] != old_uid, "the re-created configmap's message carries its new uid")
    check(b.stop(signal.SIGTERM) == 0, "exit status on SIGTERM")


run(test)
