"""http.token_file rotates without a restart: when the file is replaced
(written to a new file and renamed over it) or its Secret volume swaps
..data to a new generation, the new token is accepted and the old one is
refused (401), with an INFO line naming the file and never the token. A
new content that is empty keeps the last good token (the API never opens)
and says so with a WARN; the probes stay open throughout."""
from kbtest import *


def code(url, token):
    return http_request(url + "/v1/informers", token=token)[0]


def test():
    work = tempfile.mkdtemp(prefix="kb0916-")
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p1"]))

    # A plain file replaced by rename.
    tok = work + "/token"
    with open(tok, "w") as f:
        f.write("old-t0ken-0916\n")
    b = Bridge(sim, workdir=work, http='listen = "127.0.0.1:0"; token_file = "%s";' % tok)
    url = b.http_url()
    check(code(url, "old-t0ken-0916") == 200, "the first token works")
    with open(tok + ".new", "w") as f:
        f.write("new-t0ken-0916\n")
    os.rename(tok + ".new", tok)
    wait_for(lambda: code(url, "new-t0ken-0916") == 200, 60, 0.2, "the new token to be accepted")
    check(code(url, "old-t0ken-0916") == 401, "the old token is refused once the new one works")
    log = b.logtext()
    check(any("INFO" in l and tok in l for l in log.splitlines()), "an INFO line names the file: %s" % log[-1500:])
    check("t0ken-0916" not in log, "no token is logged")

    # Empty new content: the last good token stays, a WARN says why.
    with open(tok + ".new", "w") as f:
        f.write("\n")
    os.rename(tok + ".new", tok)
    wait_for(lambda: any("WARN" in l and tok in l for l in b.logtext().splitlines()), 60, 0.2, "a WARN about it")
    check(code(url, "new-t0ken-0916") == 200, "an empty file keeps the last good token")
    check(code(url, None) == 401 and code(url, "") == 401, "the API did not open")
    check(http_request(url + "/healthz")[0] == 200, "the probes stay open")
    check(b.stop() == 0, "clean stop")

    # A Secret volume: token -> ..data/token, ..data swapped to a new generation.
    vol = work + "/vol"
    secret_volume(vol, {"token": "gen1-t0ken-0916"}, "gen1")
    os.makedirs(work + "/b2")
    b = Bridge(sim, workdir=work + "/b2", http='listen = "127.0.0.1:0"; token_file = "%s/token";' % vol)
    url = b.http_url()
    check(code(url, "gen1-t0ken-0916") == 200, "the volume's token works")
    secret_volume(vol, {"token": "gen2-t0ken-0916"}, "gen2")
    wait_for(lambda: code(url, "gen2-t0ken-0916") == 200, 60, 0.2, "the swapped-in token to be accepted")
    check(code(url, "gen1-t0ken-0916") == 401, "the swapped-out token is refused")
    check("t0ken-0916" not in b.logtext(), "no token is logged")
    check(b.stop() == 0, "clean stop")
    sim.stop()


run(test)
