#!/usr/bin/env python3
"""High availability with a transactional Kafka sink, on a real kube-apiserver and a real Kafka 4.0:
both replicas run the same sink, so the same transactional.id. Configmaps churn all along (patches,
deletes, names deleted and created again).

- While replica-a leads, the standby (replica-b) must not touch the producer id: it initialises no
  transactions (that would fence the leader), and the leader keeps committing.
- SIGSTOP the leader past its lease: replica-b takes over, initialises transactions (the broker fences
  replica-a's producer and aborts its open transaction), reads the committed checkpoint back and goes on
  from exactly there. SIGCONT replica-a: whatever it still tries to commit is refused by the broker as
  fenced, and none of it becomes visible to read_committed; its /healthz fails (only a restart helps),
  and is 200 again after the restart.
- Restart replica-a (it stands by), SIGKILL replica-b: replica-a takes over the same way. Restart
  replica-b and partition replica-a as before. (The SIGSTOPs come while the leader has changes in its
  open transaction, by kbridge_events_inflight; the replicas keep each transaction open 3 s
  (KB_TEST_KAFKA_TXN_MS) so a commit can hardly slip in between the look and the signal; at least one
  of the two must be refused as fenced.)

Then a read_committed consumer (kcat) holds, per key, exactly the API server's history of that key
(the test's own list + watch): every (resourceVersion, DELETED?) once, in the server's order, none
missing, none repeated, none invented."""
import signal

from kbtest import check, ControlPlane, Failure, KafkaBroker, http_request, kafka_records, run, wait_for
from kbha import History, caught_up, knows_holder, leads, settled, start_pair

# Each transaction stays open this long (ms): a SIGSTOP seen to land in an open one does.
TXN_ENV = {"KB_TEST_KAFKA_TXN_MS": "3000"}

LEASE, RENEW = 4, 1
TOPIC = "k8s.ha.cms"


def sinks(brokers):
    return ('sinks = ( { name = "kafka"; type = "kafka"; brokers = "%s"; transactional = true; '
            'properties = { "linger.ms" = "5"; }; } );\n'
            'routes = ( { informer = "cms"; sink = "kafka"; topic = "%s"; } );\n' % (brokers, TOPIC))


def committed(brokers):
    """{key: [(rv, deleted?1:0), ...]} as a read_committed consumer sees it, in log order."""
    out = {}
    for p, o, k, h, v in kafka_records(brokers, TOPIC):
        if "k8s-resource-version" in h:
            out.setdefault(k, []).append((int(h["k8s-resource-version"]), 1 if h.get("k8s-type") == "DELETED" else 0))
    return out


def compare(want, got):
    """Keys whose committed sequence is not the server's, with both."""
    return [(k, want.get(k), got.get(k)) for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)]


def partition(old, new, nth, churn):
    """SIGSTOP old (the leader) while it has changes in its open transaction, until new leads; SIGCONT.
    True if the broker then refused old's transaction as fenced (logged)."""
    wait_for(lambda: old.metric("kbridge_events_inflight", informer="cms") > 0, 60, 0.005,
             "changes in the leader's open transaction")
    old.proc.send_signal(signal.SIGSTOP)
    wait_for(lambda: leads(new, nth), 120, 0.05, "the standby to take over")
    wait_for(lambda: new.logtext().count("transactional producer ready") >= nth, 120, 0.1, "the new leader's producer")
    churn.more(10)  # the new leader has changes of its own before the old one runs again
    mark = len(old.logtext())
    old.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: "no longer leading" in old.logtext()[mark:], 120, 0.1, "the old leader to step down")
    # Its transaction, open for longer than it may stay, is committed at once: the broker refuses it. Only
    # a transaction committed just before the SIGSTOP leaves nothing to refuse (then this wait fails).
    try:
        wait_for(lambda: "fenced by a newer instance" in old.logtext()[mark:], 30, 0.1, "the fenced commit")
    except Failure:
        pass
    after = old.logtext()[mark:]
    print("the old leader after SIGCONT:\n" + "\n".join(l for l in after.splitlines() if "fenced" in l)[-800:])
    fenced = "fenced by a newer instance" in after
    if fenced:  # only a restart helps: /healthz says so, for the liveness probe
        status, _, body = http_request(old.http_url() + "/healthz")
        check(status == 503 and b"sink kafka: its producer failed for good" in body,
              "/healthz of the fenced replica: %d %r" % (status, body[:300]))
    return fenced


def restart(cp, b, holder):
    """Restart b (SIGKILL; a fenced producer stays fatal); wait until it is a warm standby."""
    b.kill()
    b.start()
    wait_for(lambda: "standby until leading" in b.logtext()[b.log_start:], 60, 0.1, "the restart")
    knows_holder(b, holder)  # it has read the Lease
    caught_up(cp, b)  # and resumed its watch from its checkpoint
    status, _, body = http_request(b.http_url() + "/healthz")
    check(status == 200, "/healthz after the restart: %d %r" % (status, body[:300]))


def kubelet(replicas):
    """Restart, as the kubelet's liveness probe would, each replica whose /healthz says its producer
    failed for good. The fenced old leader always says so. Once, in a run beside a busy loop per core,
    the new leader's producer also failed for good half a second after it took over, just after the old
    leader's fenced produce (librdkafka: a fatal out-of-order sequence, PID epoch 9, base seq 113); why
    the broker answered so is not known. Only a new producer helps; nothing waits for an operator."""
    for name, r in replicas:
        status, _, body = http_request(r.http_url() + "/healthz")
        if status == 503 and b"its producer failed for good" in body:
            print("kubelet: restarting %s (/healthz: %r)" % (name, body[:200]))
            r.kill()
            r.start()
            wait_for(lambda: "standby until leading" in r.logtext()[r.log_start:] or
                     "leading" in r.logtext()[r.log_start:], 60, 0.1, "the restart of " + name)


def test():
    kafka = KafkaBroker()
    brokers = kafka.start()
    cp = ControlPlane()
    history = History(cp)
    a, b, churn = start_pair(cp, "t", LEASE, RENEW, sinks=sinks(brokers), before=history.start,
                          informer_opts="shards = 1;", env=TXN_ENV)
    wait_for(lambda: "transactional producer ready" in a.logtext(), 60, 0.1, "the leader's producer")
    churn.start()
    churn.more(20)
    settled(cp, a)  # the leader committed the churn so far
    caught_up(cp, b)  # the standby has it in hand too
    check("transactional producer ready" not in b.logtext(),
          "the standby initialised transactions (it fences the leader):\n" + b.logtext()[-2000:])
    check("fenced" not in a.logtext().lower(), "the leader was fenced by its standby:\n" + a.logtext()[-2000:])

    first = partition(a, b, 1, churn)
    restart(cp, a, "replica-b")
    b.kill()  # a crash this time
    wait_for(lambda: leads(a, 2), 120, 0.05, "replica-a to take over from the SIGKILLed one")
    restart(cp, b, "replica-a")
    second = partition(a, b, 2, churn)
    check(first or second, "the old leader's open transaction was never refused as fenced after SIGCONT")
    churn.more(20)
    churn.stop()
    want = {}
    for k, t, rv in history.stop():
        want.setdefault(k, []).append((rv, 1 if t == "DELETED" else 0))
    kubelet([("replica-a", a), ("replica-b", b)])
    try:
        wait_for(lambda: not compare(want, committed(brokers)), 180, 1, "the committed records to match the server")
    except Failure:
        bad = compare(want, committed(brokers))
        raise Failure("%d key(s) differ from the server's history (key, server, committed), e.g.\n%s\n"
                      "--- replica-a ---\n%s\n--- replica-b ---\n%s" % (
                          len(bad), "\n".join(map(str, bad[:6])), a.logtext()[-3000:], b.logtext()[-3000:]))
    got = committed(brokers)
    n = sum(len(v) for v in got.values())
    deletes = sum(d for v in got.values() for _, d in v)
    check(deletes > 0, "no DELETED was committed")
    recreated = sum(1 for v in got.values() if any(d for _, d in v[:-1]))
    aborted = len([1 for r in kafka_records(brokers, TOPIC, read_committed=False) if "k8s-resource-version" in r[3]]) - n
    check(b.stop(signal.SIGTERM) == 0, "replica-b's exit status on SIGTERM")
    a.stop(signal.SIGTERM)  # fenced (its sink stopped), unless the kubelet restarted it
    print("%d changes of %d keys exactly once to read_committed (%d deletes, %d names created again); "
          "%d records of aborted transactions hidden" % (n, len(got), deletes, recreated, aborted))


run(test)
