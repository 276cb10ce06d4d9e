"""`kbridge --demo` needs no cluster and no broker: it streams envelopes from
the bundled simulator to stdout and stops cleanly on SIGINT."""
import json
import signal
import subprocess
import threading
from kbtest import *


def test():
    p = subprocess.Popen([KBRIDGE, "--demo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []

    def reader():
        for line in p.stdout:
            lines.append(line)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        wait_for(lambda: len(lines) >= 20, 30, what="20 envelopes on stdout")
    finally:
        p.send_signal(signal.SIGINT)
        rc = p.wait(30)
    t.join(5)
    check(rc == 0, "SIGINT exits 0")
    evs = [json.loads(l) for l in lines]
    check(all(e["cluster"] == "demo" and e["kind"] == "Pod" for e in evs), "demo envelopes are pods")
    check({"ADDED"} <= {e["type"] for e in evs}, "the initial list arrives as ADDED")


run(test)
