"""The million-object benchmark's harness works end to end at a small size:
bench/million.py, on a bench_feed of 1,200 Pods and 400 watch events, syncs
kbridge (without and with state_dir) and the client-go informer (without and
with the managedFields transform) from the same feed, once with streamed lists
(both clients' default) and once with paged lists; every client ends with the
feed's final set of objects, took every watch event, and answers the labelled
query with the same number of Pods. No figure is judged: speed lives in the
benchmark's own table."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from kbtest import *
from kbclientgo import binary as clientgo_binary

CLIENTS = ["kbridge", "kbridge+state_dir", "client-go", "client-go+transform"]
PODS, EVENTS = 1200, 400  # paged: three list pages of 500 (a full page and a short one)


def million(work, paged):
    out = os.path.join(work, "million-%s.json" % ("paged" if paged else "streamed"))
    cmd = [sys.executable, os.path.join(SOURCE, "bench", "million.py"), "--kbridge", KBRIDGE,
           "--feed", os.path.join(BUILD, "bench", "bench_feed"), "--clientgo", clientgo_binary(),
           "--pods", str(PODS), "--events", str(EVENTS), "--timeout", "120", "--no-feed-rate", "--settle", "0",
           "--only", ",".join(CLIENTS), "--json", out, "--state-parent", work] + (["--paged"] if paged else [])
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text = p.communicate(timeout=800)[0]
    except subprocess.TimeoutExpired:
        p.terminate()  # million.py stops its feed and client on SIGTERM
        text = p.communicate()[0]
    check(p.returncode == 0, "million.py exited %d:\n%s" % (p.returncode, text[-4000:]))
    check("| time to synced |" in text, "the table is printed:\n%s" % text[-4000:])
    with open(out) as f:
        return json.load(f), text


def test():
    work = tempfile.mkdtemp(prefix="kb0860-")
    try:
        check_both(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_both(work):
    for paged in (False, True):
        data, text = million(work, paged)
        # million.py keys its feeds by size and its results by "client@size" (--pods takes a list)
        feed = data["feeds"][str(PODS)]
        res = {k.rsplit("@", 1)[0]: v for k, v in data["results"].items() if k.endswith("@%d" % PODS)}
        check(feed["pods"] == PODS and feed["events"] == EVENTS, "feed sizes: %s" % feed)
        matched = set()
        for name in CLIENTS:
            r = res.get(name)
            check(r is not None and "skipped" not in r, "%s ran (paged=%s): %s\n%s" % (name, paged, r, text[-3000:]))
            check(r["watch_ok"], "%s took all %d watch events (paged=%s)" % (name, feed["events"], paged))
            check(r["q_n"] > 0 and r["q0_n"] == 0, "%s: labelled query matched %d, absent %d" %
                  (name, r["q_n"], r["q0_n"]))
            matched.add(r["q_n"])
        check(len(matched) == 1, "every client matched the same Pods (paged=%s): %s" % (paged, matched))
        check(res["kbridge"]["cache_per_obj"] > 0, "kbridge reports its cache bytes")


run(test)
