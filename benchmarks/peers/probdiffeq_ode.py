"""The probabilistic-numerics peer for ``benchmarks/systems.py``: probdiffeq's parameter
estimation (Tronarp, Bosch & Hennig 2022, "Fenrir"; probdiffeq's own tutorial on it) of the
systems benchmark's ODEs, run in its own environment (``PIDKL_PEER_PD_PYTHON``: an
interpreter with ``probdiffeq``, ``jax``, ``equinox`` and ``scipy``; this library is not
imported here).

Reads the problem as ``numpyro_ode.py`` does (JSON on stdin, plus ``"start"``: the rates'
starting values, the library's generic guess) and writes JSON on stdout. The fit: an
integrated Wiener prior of order 2 per component (blockwise), the ODE as a zeroth-order
Taylor constraint, adaptive steps saved at the data's times (and the predictions'), the log
marginal likelihood of the data (``loss_lml_timeseries``; an output not measured at a time
enters with a standard deviation of 10^6, so it adds a constant), maximised over the log
rates, the initial state and each measured output's log noise by L-BFGS (scipy, on JAX's
value and gradient) through diffusion tempering (output scales 100, 10, 1, each stage from
the last; Beck et al. 2024), Laplace intervals (the Hessian by differences of JAX's gradient). Times are the process's
CPU seconds, JIT included, one thread.
"""

import json
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")
began = time.process_time()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jax_odes import SYSTEMS  # noqa: E402
from probdiffeq_fit import SCALES, fenrir_fit  # noqa: E402


def main():
    spec = json.load(sys.stdin)
    rhs = SYSTEMS[spec["system"]]
    outputs, names = spec["outputs"], spec["coefficients"]
    obs = spec["observations"]
    P, C = len(names), len(outputs)
    measured = [c for c, o in enumerate(outputs) if o in obs]
    t0 = float(spec["t0"])
    predict = [float(t) for t in spec["predict"]]
    times = sorted({float(t) for o in obs.values() for t in o[0]} | set(predict))
    times = [t for t in times if t > t0]
    u = np.zeros((len(times), C))
    seen = np.zeros((len(times), C), dtype=bool)
    for c, o in enumerate(outputs):
        if o in obs:
            idx = [times.index(float(t)) if float(t) > t0 else None for t in obs[o][0]]
            for i, y in zip(idx, obs[o][1]):
                if i is not None:
                    u[i, c], seen[i, c] = y, True
    x0_start = []
    for o in outputs:
        if o in obs:
            x0_start.append(float(np.asarray(obs[o][1])[np.argmin(obs[o][0])]))
        else:
            x0_start.append(float(spec["hidden"][o][0]))
    sd_start = [0.1 * float(np.std(obs[outputs[c]][1])) + 1e-3 for c in measured]
    start = np.r_[np.log([spec["start"][n] for n in names]), x0_start, np.log(sd_start)]
    x, cov, solve, nit = fenrir_fit(rhs, names, start, t0, times, u, seen, measured)
    prob = float(spec.get("prob", 0.95))
    z = 1.959963984540054 if prob == 0.95 else float(spec.get("z"))
    out = {"coefficients": {}, "outputs": {}, "iterations": int(nit),
           "error": None if np.isfinite(cov).all() else "singular Hessian"}
    for k, n in enumerate(names):
        sd = float(np.sqrt(cov[k, k])) if np.isfinite(cov[k, k]) and cov[k, k] > 0 else np.inf
        out["coefficients"][n] = {"mean": float(np.exp(x[k])), "sd_log": sd,
                                  "lower": float(np.exp(x[k] - z * sd)),
                                  "upper": float(np.exp(x[k] + z * sd))}
    sol = solve(jnp.asarray(x), SCALES[-1])
    mean = np.asarray(sol.u.mean[0])[1:]                     # (T, C) at the grid
    std = np.asarray(sol.u.std[0])[1:]
    keep = [times.index(t) if t > t0 else None for t in predict]
    for c, o in enumerate(outputs):
        out["outputs"][o] = {
            "mean": [float(mean[i, c]) if i is not None else float(x[P + c]) for i in keep],
            "var": [float(std[i, c] ** 2) if i is not None else 0.0 for i in keep]}
    out["seconds"] = time.process_time() - began
    import importlib.metadata as md
    out["versions"] = {"probdiffeq": md.version("probdiffeq"), "jax": jax.__version__}
    out["settings"] = {"prior": "integrated Wiener, order 2, blockwise", "constraint": "ts0",
                       "steps": "adaptive, atol 1e-4, rtol 1e-3", "output_scales": SCALES}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
