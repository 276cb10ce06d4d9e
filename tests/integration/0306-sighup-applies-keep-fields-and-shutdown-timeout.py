"""SIGHUP decides from the config table's rows what a change needs, so no key is forgotten.

1. A reload that changed an informer's keep_fields used to keep the informer and ignore the
   change (reload equality was written by hand and missed the key). Now the informer is rebuilt
   (it lists again) and later changes carry only the kept fields; with state_dir the reload is
   refused, naming keep_fields, as for any changed definition of a stored informer.
2. A reloaded shutdown_timeout used to be ignored at SIGTERM. Now the new value applies: a bridge
   started with 600 s and reloaded to 1 s stops at that second (the log says it drains with
   shutdown_timeout=1s; the exit is awaited 90 s, far below 600) even though its file sink's reader
   is stalled.
3. A key that needs a restart (cluster.qps) is refused by name."""
import signal
import subprocess
from kbtest import *


def sighup_and_wait(b, word, n_before):
    b.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: b.logtext().count(word) > n_before, 90, what="%r after SIGHUP" % word)


def keep_fields():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["a"], extra={"spec": {"keep": "yes", "drop": "me"}}))
    inf = '{ name = "pods"; version = "v1"; resource = "pods"; keep_fields = []; }'
    b = Bridge(sim, informers=[inf])
    b.wait_converged(sim)
    check(b.events()[-1]["object"]["spec"].get("drop") == "me", "everything is kept at first")
    b.rewrite_config("keep_fields = [];", 'keep_fields = [ "spec.keep" ];')
    sighup_and_wait(b, "reloaded", 0)
    log = b.logtext()
    check("informer=pods is rebuilt (keep_fields changed" in log, "the rebuild names keep_fields:\n%s" % log[-2000:])
    sim.bulk(pod_ops("update", "ns1", ["a"], labels={"after": "reload"}))
    b.wait_converged(sim)
    spec = b.events()[-1]["object"]["spec"]
    check(spec == {"keep": "yes"}, "after the reload only the kept field is sent: %s" % spec)

    # 3. A key that needs a restart.
    b.rewrite_config('server = "%s"; };' % sim.url, 'server = "%s"; qps = 7.0; };' % sim.url)
    sighup_and_wait(b, "reload refused", 0)
    check("cluster.qps changed; it applies only on restart" in b.logtext(), "the refusal names cluster.qps:\n%s" %
          b.logtext()[-1500:])
    check(b.stop() == 0, "clean stop")

    # With state_dir the changed definition is refused, naming the key.
    d = tempfile.mkdtemp(prefix="kbtest-")
    b2 = Bridge(sim, informers=[inf], workdir=d, extra='state_dir = "%s/state";' % d)
    b2.wait_converged(sim)
    b2.rewrite_config("keep_fields = [];", 'keep_fields = [ "spec.keep" ];')
    sighup_and_wait(b2, "reload refused", 0)
    check("informers.pods: its definition changed (keep_fields)" in b2.logtext(),
          "with state_dir the refusal names keep_fields:\n%s" % b2.logtext()[-1500:])
    check(b2.stop() == 0, "clean stop")
    sim.stop()


def shutdown_timeout():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%03d" % i for i in range(200)], extra={"spec": {"pad": "x" * 4000}}))
    b, fifo = bridge_on_fifo(sim, 600)
    b.start()
    wait_for(lambda: "listed items=200" in b.logtext() and fifo.full(), 60, what="the list to fill the FIFO")
    b.rewrite_config("shutdown_timeout = 600;", "shutdown_timeout = 1;")
    sighup_and_wait(b, "reloaded", 0)
    check("other settings changed in place" in b.logtext(), "the reload applies shutdown_timeout in place")
    b.proc.send_signal(signal.SIGTERM)
    try:
        rc = b.proc.wait(90)
    except subprocess.TimeoutExpired:
        raise Failure("the reloaded shutdown_timeout = 1 was not used: still running 90 s after SIGTERM\n%s" %
                      b.logtext()[-2000:])
    check("shutdown_timeout=1s" in b.logtext(), "the drain uses the reloaded value")
    check(rc == 1, "messages left in the stalled FIFO without state_dir: exit 1 (rc %s)" % rc)
    fifo.close()
    sim.stop()


def test():
    keep_fields()
    shutdown_timeout()


run(test)
