"""The probabilistic-numerics peer for ``benchmarks/random_odes.py``: probdiffeq's Fenrir fit
(``probdiffeq_fit.py``) of one drawn problem, from the user's starting values, in its own
environment (``PIDKL_PEER_PD_PYTHON``; this library is not imported here).

Reads the problem as ``numpyro_random.py`` does (the generator's dict as JSON on stdin) and
writes per coefficient its estimate and central 90% Laplace interval (in the log), the
seconds (the process's CPU, JIT included) and the versions. Gaussian data only: an
epidemic's counts are refused. The initial state starts at the first datum (a hidden
species at its known value, an oscillator's velocity at 0); the datum at the first time
sets that start only (the prior's state there is exact).
"""

import json
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")
began = time.process_time()

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jax_odes import random_vector_field  # noqa: E402
from probdiffeq_fit import fenrir_fit  # noqa: E402

Z90 = 1.6448536269514722


def main():
    spec = json.load(sys.stdin)
    if spec["family"] == "epidemic":
        json.dump({"refused": "counts: probdiffeq's likelihood is Gaussian"}, sys.stdout)
        return
    field = random_vector_field(spec)
    held = {k: float(v) for k, v in spec.get("held", {}).items()}
    names = list(spec["truth"])

    def rhs(s, t, k):
        return field(s, t, {**held, **k})
    t = np.asarray(spec["t"], dtype=float)
    Y = np.asarray(spec["y"], dtype=float)
    observed = list(spec["observed"])
    C = len(spec["x0"])
    t0 = float(t[0])
    times = t[1:]
    u = np.zeros((len(times), C))
    seen = np.zeros((len(times), C), dtype=bool)
    for j, c in enumerate(observed):
        u[:, c], seen[:, c] = Y[j][1:], True
    x0 = []
    for c in range(C):
        if c in observed:
            x0.append(float(Y[observed.index(c)][0]))
        elif spec["family"] == "oscillator":
            x0.append(0.0)
        else:
            x0.append(float(spec["x0"][c]))
    sd0 = [0.1 * float(np.std(Y[j])) + 1e-3 for j in range(len(observed))]
    start = np.r_[np.log([spec["start"][n] for n in names]), x0, np.log(sd0)]
    x, cov, _, nit = fenrir_fit(rhs, names, start, t0, times, u, seen, observed)
    out = {"coefficients": {}, "iterations": int(nit)}
    for k, n in enumerate(names):
        sd = float(np.sqrt(cov[k, k])) if np.isfinite(cov[k, k]) and cov[k, k] > 0 else np.inf
        out["coefficients"][n] = {"mean": float(np.exp(x[k])),
                                  "lower": float(np.exp(x[k] - Z90 * sd)),
                                  "upper": float(np.exp(x[k] + Z90 * sd)),
                                  "sd_log": sd}
    out["seconds"] = time.process_time() - began
    import importlib.metadata as md
    out["versions"] = {"probdiffeq": md.version("probdiffeq"), "jax": jax.__version__}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
