"""/metrics follows the Prometheus conventions an SRE expects, read with the
real prometheus_client parser: process_* as the client libraries export them
(CPU, resident memory, open and maximum fds, start time; equal to what
/proc says about the kbridge process), kbridge_build_info{version} 1,
API-server requests by verb, resource and code counted exactly as the server
logged them (a 500 injected on the first list shows up as code="500"), a
duration histogram for lists, the time of the newest change per informer,
and every family named <kbridge|process>_… with _total on counters only."""
import re
import subprocess
from kbtest import *

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # CI has PyPI; tests/deps.sh installs it too
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "prometheus-client"], check=True, timeout=300)
    from prometheus_client.parser import text_string_to_metric_families


def scrape(url):
    code, _, body = http_request(url + "/metrics")
    check(code == 200, "/metrics -> %d" % code)
    text = body.decode()
    return text, {f.name: f for f in text_string_to_metric_families(text)}


def samples(fams, family, sample=None, **labels):
    f = fams.get(family)
    check(f is not None, "family %s is exposed" % family)
    return [s for s in f.samples
            if (sample is None or s.name == sample) and all(s.labels.get(k) == v for k, v in labels.items())]


def one(fams, family, sample=None, **labels):
    got = samples(fams, family, sample, **labels)
    check(len(got) == 1, "one sample of %s %r, got %r" % (family, labels, got))
    return got[0].value


def check_names(text):
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            types[name] = typ
    for name, typ in types.items():
        check(re.fullmatch(r"(kbridge|process)_[a-z][a-z0-9_]*", name), "name %s has the kbridge_/process_ prefix" % name)
        check(name.endswith("_total") == (typ == "counter"), "%s (%s): _total exactly on counters" % (name, typ))
        check(not re.search(r"_(ms|milliseconds|us|kb|mb|percent)(_|$)", name), "%s: base units only" % name)
    return types


def test():
    sim = Sim()
    sim.bulk(pod_ops("create", "ns1", ["p%02d" % i for i in range(5)]))
    sim.fault(kind="status", verb="list", resource="pods", code=500, count=1)
    work = tempfile.mkdtemp(prefix="kbops-")
    before = time.time()
    b = Bridge(sim, informers=['{ name = "pods"; version = "v1"; resource = "pods"; page_size = 100; list_mode = "paged"; }'], workdir=work, http='listen = "127.0.0.1:0";')
    url = b.http_url()
    b.wait_converged(sim)
    text, fams = scrape(url)
    check(one(fams, "kbridge_informer_last_change_timestamp_seconds", informer="pods") >= int(before),
          "the initial list's changes set the last-change time")
    t_change = time.time()
    time.sleep(1.1)  # a later change must carry a visibly later wall time (seconds resolution of time())
    sim.bulk(pod_ops("update", "ns1", ["p00"], labels={"v": "2"}))
    b.wait_converged(sim)

    def settled():
        t, f = scrape(url)
        last = one(f, "kbridge_informer_last_change_timestamp_seconds", informer="pods")
        return last > t_change and (t, f, last)
    text, fams, last = wait_for(settled, 30, 0.1, "the last-change time to move past the update")
    check(last <= time.time() + 1, "last change %s is not in the future" % last)
    types = check_names(text)

    # process_*: the same figures /proc gives for the bridge's pid.
    pid = b.proc.pid
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "process_max_fds", "process_start_time_seconds", "process_virtual_memory_bytes"):
        check(any(n == name or n + "_total" == name for n in fams) or name in types, "%s exposed" % name)
    check(types["process_cpu_seconds_total"] == "counter", "cpu is a counter")
    cpu = one(fams, "process_cpu_seconds", "process_cpu_seconds_total")
    check(cpu > 0, "some CPU used: %s" % cpu)
    with open("/proc/%d/status" % pid) as f:
        vmrss = [int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:")][0]
    rss = one(fams, "process_resident_memory_bytes")
    check(0.5 * vmrss < rss < 2 * vmrss, "resident memory %s near VmRSS %s" % (rss, vmrss))
    fds = one(fams, "process_open_fds")
    nfd = len(os.listdir("/proc/%d/fd" % pid))
    check(abs(fds - nfd) <= 3, "open fds %s near /proc count %d" % (fds, nfd))
    with open("/proc/%d/limits" % pid) as f:
        soft = [l.split()[3] for l in f if l.startswith("Max open files")][0]
    check(one(fams, "process_max_fds") == float(soft), "max fds = soft limit %s" % soft)
    start = one(fams, "process_start_time_seconds")
    check(before - 2 <= start <= time.time(), "start time %s within the test (%s..now)" % (start, before))

    # Build info: the version --version prints.
    ver = subprocess.run([KBRIDGE, "--version"], capture_output=True, text=True, timeout=30).stdout
    bi = samples(fams, "kbridge_build_info")
    check(len(bi) == 1 and bi[0].value == 1, "one kbridge_build_info sample of 1: %r" % bi)
    check(bi[0].labels["version"] and bi[0].labels["version"] in ver,
          "build_info version %r in --version %r" % (bi[0].labels.get("version"), ver))

    # API-server requests: what the simulator logged, by verb and code.
    log = [r for r in sim.requests() if r["path"] == "/api/v1/pods"]
    def server_count(verb, status):
        return sum(1 for r in log if (r["query"].get("watch") in ("true", "1")) == (verb == "watch")
                   and r["status"] == status)
    req = samples(fams, "kbridge_apiserver_requests", "kbridge_apiserver_requests_total")
    check(types["kbridge_apiserver_requests_total"] == "counter", "requests is a counter")
    got = {(s.labels["verb"], s.labels["resource"], s.labels["code"]): s.value for s in req}
    check(got.get(("list", "pods", "500")) == 1, "the injected 500 counted once: %r" % got)
    check(got.get(("list", "pods", "200")) == server_count("list", 200) >= 1,
          "lists with 200 = the server's log (%d): %r" % (server_count("list", 200), got))
    check(got.get(("watch", "pods", "200")) == server_count("watch", 200) >= 1,
          "watches = the server's log (%d): %r" % (server_count("watch", 200), got))
    check(types["kbridge_apiserver_request_duration_seconds"] == "histogram", "duration is a histogram")
    h = samples(fams, "kbridge_apiserver_request_duration_seconds", verb="list", resource="pods")
    count = [s.value for s in h if s.name.endswith("_count")][0]
    check(count == got[("list", "pods", "500")] + got[("list", "pods", "200")],
          "the list histogram counts every list: %s" % count)
    check(not samples(fams, "kbridge_apiserver_request_duration_seconds", verb="watch"),
          "watches are not in the duration histogram")
    check(b.stop() == 0, "SIGTERM exits 0")
    sim.stop()


run(test)
