"""Small helpers the Python benchmarks (and the tests that print figures) share, so a figure means the
same thing in every table.

percentile(xs, p) is the nearest-rank percentile: the smallest sample that at least p % of the samples are
less than or equal to — always one of the measured values, never an interpolation between two. With 100
samples p99 is the second largest; with fewer than 100 it is the largest. Empty: NaN.

pid_of(cp, name) is the pid of a process a tests/integration ControlPlane started (kube-apiserver, etcd),
from the pid file it writes beside its logs."""
import math
import os


def percentile(xs, p):
    """The nearest-rank p-th percentile (0 < p <= 100) of the samples xs; NaN when there are none."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(math.ceil(p / 100.0 * len(xs))) - 1))]


def pid_of(cp, name):
    """The pid of ControlPlane cp's process name ("kube-apiserver", "etcd")."""
    with open(os.path.join(cp.dir, name + ".pid")) as f:
        return int(f.read().strip())
