"""Speed benchmark: one training step of PI-DKL and of DKL in the same process.

For each case (N training points, m collocation points, the 1-D heat equation with second
derivatives, d = 2 inputs) a fresh process builds both models on the same data, warms up,
and times ``Trace_ELBO.loss_and_grads`` plus the Adam update, the models' steps interleaved
(each with its own parameter store) and the median over ``repeats`` kept; it prints a JSON line with
both median times, their ratio, and the process's peak resident memory (``ru_maxrss``) minus
its resident memory after the imports. ``pidkl_autograd_step_s`` / ``ratio_autograd`` time
PI-DKL with ``derivatives="autograd"`` (autograd through the posterior for the physics
term's derivatives) in the same process, for comparison with the closed-form default.
"""

import functools
import json
import multiprocessing
import resource
import time

__all__ = ["run_benchmark", "time_case"]


def _rss_mib():
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2 ** 20


def time_case(N, m, repeats=15, threads=0, seed=0):
    """Median seconds per training step of PI-DKL and DKL at ``(N, m)``; a dict."""
    import numpy as np
    import pyro
    import torch
    from pyro.infer import Trace_ELBO

    from . import DKL, PIDKL, physics
    from .infer import svi_step

    if threads:
        torch.set_num_threads(threads)
    base = _rss_mib()
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, (N, 2))
    y = np.exp(-np.pi ** 2 * 0.1 * X[:, 1]) * np.sin(np.pi * X[:, 0])
    y = y + 0.01 * rng.standard_normal(N)
    pyro.set_rng_seed(seed)
    models = {"pidkl": PIDKL(X, y, physics.heat_1d(alpha=0.5), input_names=("x", "t"), m=m),
              "dkl": DKL(X, y, input_names=("x", "t")),
              "pidkl_autograd": PIDKL(X, y, physics.heat_1d(alpha=0.5), input_names=("x", "t"),
                                      m=m, derivatives="autograd")}
    out = {"N": N, "m": m, "d": 2, "equation": "heat_1d", "threads": torch.get_num_threads()}
    store = pyro.get_param_store()
    steps, states = {}, {}
    for name, model in models.items():
        elbo, optim = Trace_ELBO(), pyro.optim.Adam({"lr": 1e-3})
        steps[name] = functools.partial(svi_step, model, elbo, optim)
        with store.scope() as state:      # each model its own parameter store
            steps[name]()
            steps[name]()
        states[name] = state
    times = {name: [] for name in models}
    for _ in range(repeats):              # interleaved: machine noise hits every model alike
        for name in models:
            with store.scope(state=states[name]):
                start = time.perf_counter()
                steps[name]()
                times[name].append(time.perf_counter() - start)
    for name in models:
        out[f"{name}_step_s"] = float(np.median(times[name]))
    out["ratio"] = out["pidkl_step_s"] / out["dkl_step_s"]
    out["ratio_autograd"] = out["pidkl_autograd_step_s"] / out["dkl_step_s"]
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["peak_minus_import_mib"] = out["peak_rss_mib"] - base
    return out


def _case(args):
    return time_case(*args)


def run_benchmark(Ns=(250, 500, 1000, 2000), ms=(10, 100), repeats=15, threads=0, echo=print):
    """Run every case in its own process; returns the list of dicts (also echoed as JSON)."""
    ctx = multiprocessing.get_context("spawn")
    rows = []
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        for N in Ns:
            for m in ms:
                row = pool.apply(_case, ((N, m, repeats, threads),))
                rows.append(row)
                echo(json.dumps({k: (round(v, 5) if isinstance(v, float) else v)
                                 for k, v in row.items()}))
    return rows
