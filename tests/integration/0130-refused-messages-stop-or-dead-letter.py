"""A message a sink can never deliver: loud and held with "stop", passed on with "dead_letter",
and no sink gets again what it already acknowledged.

The pods informer (with state_dir) goes to a file sink and to a broker sink that cannot take one
30 KB Pod: Kafka with the producer's message.max.bytes = 20000, then Mosquitto with
max_packet_size 20000. For each broker:

1. on_refused = "stop" (the default): within seconds /readyz answers 503 naming the sink, the
   object and the reason; kbridge_sink_refused_total and kbridge_sink_stopped say so; the file
   sink keeps taking new changes; /v1/informers shows the file sink's watermark past the broker
   sink's.
2. A clean stop and a start with no server change: the file sink gets nothing twice (per-sink
   watermarks); the broker sink refuses the same Pod again and stops again. With the window of
   unacknowledged changes made small (KB_TEST_MAX_WINDOW), more changes fill it and reading stops:
   /readyz says "reading paused" instead of the journal growing.
3. SIGHUP with on_refused = "dead_letter": the refused Pod lands in the dead-letter file sink as
   the normal envelope plus "deadLetter": {sink, reason, at}; the broker's consumer gets every
   other change, including those made while the sink was stopped; /readyz is 200 again; the
   broker sink's watermark passes the refused change.
4. A clean restart: nothing is delivered again to any sink.
"""
from kbtest import *

BIG = {"metadata": {"annotations": {"blob": "x" * 30000}}}


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def informer_sinks(url):
    st, _, body = http_request(url + "/v1/informers")
    check(st == 200, "/v1/informers: %d" % st)
    inf = json.loads(body)["informers"][0]
    return inf["seq"], {s["name"]: s["watermark"] for s in inf["sinks"]}


def readyz(url):
    st, _, body = http_request(url + "/readyz")
    return st, body.decode()


def metric(url, name, **labels):
    _, _, body = http_request(url + "/metrics")
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for l in body.decode().splitlines():
        if l.startswith(name + "{"):
            lab = l[len(name) + 1:l.index("}")]
            if all(('%s="%s"' % kv) in lab for kv in labels.items()):
                return float(l.rsplit(" ", 1)[1])
    return None


def scenario(kind):
    print("---", kind)
    sim = Sim()
    small = ["web-%02d" % i for i in range(20)]
    sim.bulk(pod_ops("create", "team-a", small))
    sim.bulk(pod_ops("create", "team-a", ["big"], extra=BIG))
    wd = tempfile.mkdtemp(prefix="kbtest-0130-")
    out, dl = os.path.join(wd, "out.jsonl"), os.path.join(wd, "dl.jsonl")
    if kind == "kafka":
        kafka = KafkaBroker()
        brokers = kafka.start()
        sink = ('{ name = "k"; type = "kafka"; brokers = "%s"; properties = { "message.max.bytes" = "20000"; }; %%s }'
                % brokers)
        topic = "pods-0130"

        def consumer():
            return {r[2]: r[4] for r in kafka_records(brokers, topic, read_committed=False)}
    else:
        os.environ["KB_MQTT_MAX_PACKET"] = "20000"
        broker = Mosquitto()
        del os.environ["KB_MQTT_MAX_PACKET"]
        sink = '{ name = "k"; type = "mqtt"; uri = "%s"; client_id = "kbtest-0130"; qos = 1; %%s }' % broker.uri
        topic = "pods/{namespace}/{name}"
        sub = MqttSub(broker, ["pods/#"], qos=1, client_id="kbtest-0130-sub")

        def consumer():
            got = {}
            for m in sub.messages():
                e = parse_mqtt_line(m) if isinstance(m, str) else m
                if isinstance(e, dict) and "payload" in e:
                    e = e["payload"]
                got[m["topic"].split("/", 1)[1] if isinstance(m, dict) and "topic" in m else key_of(e)] = e
            return got

    def bridge(policy):
        return Bridge(sim, workdir=wd, out=out, http='listen = "127.0.0.1:0";',
                      extra='state_dir = "%s";' % os.path.join(wd, "state"),
                      sinks=['{ name = "out"; type = "file"; path = "%s"; }' % out, sink % policy,
                             '{ name = "dl"; type = "file"; path = "%s"; }' % dl],
                      routes=['{ informer = "pods"; sink = "out"; }',
                              '{ informer = "pods"; sink = "k"; topic = "%s"; }' % topic])

    # 1. stop: loud, held, the others go on.
    b = bridge("")
    b.wait_converged(sim)
    url = b.http_url()
    st, why = wait_for(lambda: (lambda r: r if r[0] == 503 and "sink k: stopped" in r[1] else None)(readyz(url)),
                       30, 0.1, "/readyz to name the stopped sink")
    check("team-a/big" in why and "refused" in why, "readyz names the object: %r" % why)
    check("sink=k stopped" in b.logtext() and "team-a/big" in b.logtext(), "one ERROR line names sink and object")
    check((metric(url, "kbridge_sink_refused_total", sink="k") or 0) >= 1, "kbridge_sink_refused_total counts it")
    check(metric(url, "kbridge_sink_stopped", sink="k") == 1, "kbridge_sink_stopped{sink=k} is 1")
    sim.bulk(pod_ops("update", "team-a", small[:5], extra={"spec": {"round": 1}}))
    b.wait_converged(sim)  # the file sink keeps flowing
    seq, wm = wait_for(lambda: (lambda s: s if s[1].get("out") == s[0] else None)(informer_sinks(url)), 30, 0.1,
                       "the file sink's watermark to reach the newest change")
    check(wm["k"] < wm["out"], "the stopped sink holds its own watermark: %r" % wm)
    check(b.stop() == 0, "a clean stop with state_dir exits 0")
    n_out = len(lines(out))

    # 2. A clean restart: the file sink gets nothing twice.
    os.environ["KB_TEST_MAX_WINDOW"] = "40"
    b = bridge("")
    del os.environ["KB_TEST_MAX_WINDOW"]
    url = b.http_url()
    wait_for(lambda: "sink k: stopped" in readyz(url)[1], 30, 0.1, "the sink to refuse the Pod again")
    wait_for(lambda: (lambda s: s[1].get("out") == s[0])(informer_sinks(url)), 30, 0.1, "the file sink to be current")
    check(len(lines(out)) == n_out, "a clean restart re-delivered %d message(s) to the file sink, which had them all"
          % (len(lines(out)) - n_out))

    for r in range(3):
        sim.bulk(pod_ops("update", "team-a", small, extra={"spec": {"round": 10 + r}}))
    wait_for(lambda: "reading paused" in readyz(url)[1], 60, 0.1, "reading to pause behind the stopped sink")
    check("paused reading" in b.logtext(), "the pause is logged")

    # 3. dead_letter on SIGHUP: the refused Pod goes to dl, everything else reaches the broker.
    with open(b.config) as f:
        text = f.read()
    with open(b.config, "w") as f:
        f.write(text.replace(sink % "", sink % 'on_refused = "dead_letter"; dead_letter = "dl";'))
    b.proc.send_signal(signal.SIGHUP)
    dead = wait_for(lambda: [e for e in lines(dl) if e.get("name") == "big"], 60, 0.1, "the dead letter")
    check(dead[0]["deadLetter"]["sink"] == "k" and dead[0]["deadLetter"]["reason"], "deadLetter: %r" % dead[0].get(
        "deadLetter"))
    check(dead[0]["type"] in ("ADDED", "MODIFIED") and dead[0]["object"]["metadata"]["name"] == "big",
          "the dead letter is the normal envelope")
    wait_for(lambda: readyz(url)[0] == 200, 60, 0.1, "/readyz to be 200 again")
    b.wait_converged(sim)
    want = {"team-a/" + n: sim.state()["team-a/" + n]["metadata"]["resourceVersion"] for n in small} \
        if isinstance(sim.state(), dict) and "team-a/web-00" in sim.state() else None
    wait_for(lambda: (lambda s: s[1].get("k") == s[0])(informer_sinks(url)), 60, 0.1,
             "the broker sink's watermark to pass the refused change")
    got = wait_for(lambda: (lambda c: c if len([k for k in c if "web-" in k]) >= len(small) else None)(consumer()),
                   60, 0.5, "the broker's consumer to have every small Pod")
    check(not any("big" in k for k in got), "the refused Pod is not at the broker")
    if want:
        for k, rv in want.items():
            v = got.get(k) or got.get(k.replace("/", "/", 1))
            ev = json.loads(v) if isinstance(v, str) else v
            check(ev and ev["resourceVersion"] == rv, "%s at the broker is %s, the server has %s" % (
                k, ev and ev.get("resourceVersion"), rv))
    check(metric(url, "kbridge_dead_letters_total", sink="k") >= 1, "kbridge_dead_letters_total counts it")
    check(b.stop() == 0, "clean stop")

    # 4. A clean restart delivers nothing again, to any sink.
    n_out, n_dl, n_k = len(lines(out)), len(lines(dl)), len(consumer())
    b = bridge('on_refused = "dead_letter"; dead_letter = "dl";')
    url = b.http_url()
    wait_for(lambda: (lambda s: s[1] and all(v == s[0] for v in s[1].values()))(informer_sinks(url)), 30, 0.1,
             "every watermark to be current")
    check(len(lines(out)) == n_out and len(lines(dl)) == n_dl, "nothing delivered twice to the file sinks")
    check(b.stop() == 0, "clean stop")


def test():
    scenario("kafka")
    scenario("mqtt")


run(test)
