"""Time one training step of PI-DKL and of DKL in the same process.

For each case (N training points, m collocation points, the 1-D heat equation with second
derivatives, d = 2 inputs) a fresh process builds both models on the same data, warms up,
and times the step :func:`pyro_pidkl.fit` takes (its default ELBO, ``default_elbo``, and its
Adam: loss, gradients, update), the models' steps interleaved (each with its own parameter
store) and the median over ``repeats`` kept; it prints a JSON line with both median times,
their ratio, and the process's peak resident memory (``ru_maxrss``) minus its resident
memory after the imports (on a GPU, ``device="cuda"``: the peak memory allocated on the
device, ``peak_cuda_mib``, with the device synchronised around every timed step).
``pidkl_plain_step_s`` times PI-DKL's plain Pyro step (``Trace_ELBO`` and
``pyro.optim.Adam``) in the same process, ``pidkl_autograd_step_s`` / ``ratio_autograd``
PI-DKL with ``derivatives="autograd"`` (autograd through the posterior for the physics
term's derivatives), for comparison with the defaults.

    python benchmarks/step_time.py --N 250,500,1000,2000 --m 10,100 [--device cuda]
"""

import argparse
import os
import functools
import json
import multiprocessing
import resource
import time

__all__ = ["interleaved_medians", "run_benchmark", "time_case"]


def _rss_mib():
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2 ** 20


def interleaved_medians(steps, repeats, device="cpu", warmup=2):
    """Median seconds per call of each step function in ``steps`` (``{name: callable}``).

    Each step runs in a parameter-store scope of its own (so several models can be timed in
    one process), ``warmup`` times untimed, then ``repeats`` times with the steps
    interleaved, so that machine noise hits every step alike; on a GPU the device is
    synchronised around each timed call.
    """
    import numpy as np
    import pyro
    import torch

    cuda = torch.device(device).type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    store = pyro.get_param_store()
    states = {}
    for name, step in steps.items():
        with store.scope() as state:
            for _ in range(warmup):
                step()
        states[name] = state
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            with store.scope(state=states[name]):
                sync()
                start = time.perf_counter()
                step()
                sync()
                times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def _data(N, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, (N, 2))
    y = np.exp(-np.pi ** 2 * 0.1 * X[:, 1]) * np.sin(np.pi * X[:, 0])
    return X, y + 0.01 * rng.standard_normal(N)


def gpytorch_dkl(X, y, device="cpu", seed=0):
    """GPyTorch's exact DKL on the same standardised data, the paper's feature map (MLP 4 x 20,
    tanh, 20 features, float64) and an SE kernel on its features: ``(step, fit)``, where
    ``step()`` is one Adam step of the negative exact marginal log likelihood and
    ``fit(n)`` runs ``n`` of them."""
    import gpytorch
    import torch

    from pyro_pidkl.kernels import MLP

    torch.manual_seed(seed)
    dt = torch.float64
    Xt = torch.as_tensor(X, dtype=dt, device=device)
    yt = torch.as_tensor(y, dtype=dt, device=device)
    Xt = (Xt - Xt.mean(0)) / Xt.std(0)
    yt = (yt - yt.mean()) / yt.std()

    class Model(gpytorch.models.ExactGP):
        def __init__(self, likelihood):
            super().__init__(Xt, yt, likelihood)
            self.features = MLP(Xt.shape[1], 20, dtype=dt)
            self.mean = gpytorch.means.ZeroMean()
            self.covar = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())

        def forward(self, x):
            z = self.features(x)
            return gpytorch.distributions.MultivariateNormal(self.mean(z), self.covar(z))

    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(device, dt)
    model = Model(likelihood).to(device, dt)
    model.train()
    likelihood.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad()
        loss = -mll(model(Xt), yt)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    def fit(n):
        for _ in range(n):
            step()
    return step, fit


def fit_times(N=100, m=100, num_steps=1000, threads=0, seed=0, device="cpu", warmup=20):
    """Wall seconds of a ``num_steps``-step fit at ``N``: PI-DKL (``m`` collocation points),
    this library's DKL and GPyTorch's exact DKL, in one process, each after an untimed
    ``warmup``-step fit of its own (the process's first calls into torch, MKL and either
    library cost about a second, whoever comes first); a dict."""
    import torch

    from pyro_pidkl import PIDKL, fit, physics
    from pyro_pidkl.models import DKL

    if threads:
        torch.set_num_threads(threads)
        os.environ["PIDKL_THREADS"] = str(threads)   # pk.fit's own default is one thread
    X, y = _data(N, seed)
    out = {"fit_steps": num_steps, "N": N, "m": m, "device": str(device),
           "threads": torch.get_num_threads()}
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    for name, build in (("pidkl", lambda: PIDKL(X, y, physics.heat_1d(alpha=0.5),
                                                 input_names=("x", "t"), m=m, seed=seed)),
                        ("dkl", lambda: DKL(X, y, input_names=("x", "t"), seed=seed))):
        if warmup:
            fit(build().to(device), num_steps=warmup, lr=1e-3, seed=seed, progress=False)
        model = build().to(device)
        sync()
        start = time.perf_counter()
        fit(model, num_steps=num_steps, lr=1e-3, seed=seed, progress=False)
        sync()
        out[f"{name}_fit_s"] = time.perf_counter() - start
    if warmup:
        gpytorch_dkl(X, y, device, seed)[1](warmup)
    _, gp_fit = gpytorch_dkl(X, y, device, seed)
    sync()
    start = time.perf_counter()
    gp_fit(num_steps)
    sync()
    out["gpytorch_fit_s"] = time.perf_counter() - start
    out["pidkl_over_gpytorch_fit"] = out["pidkl_fit_s"] / out["gpytorch_fit_s"]
    return out


def time_case(N, m, repeats=15, threads=0, seed=0, device="cpu", autograd=True, anchor=None):
    """Median seconds per training step of PI-DKL and DKL at ``(N, m)``; a dict.

    :param str device: ``"cpu"`` or ``"cuda"`` (the models are moved there with ``.to``).
    :param bool autograd: also time PI-DKL with ``derivatives="autograd"``.
    :param str anchor: ``"gpytorch"``: also GPyTorch's exact DKL step, interleaved with ours
        (``gpytorch_step_s`` and the ratios ``pidkl_over_gpytorch``, ``dkl_over_gpytorch``).
    """
    import pyro
    import torch
    from pyro.infer import Trace_ELBO

    from pyro_pidkl import PIDKL, physics
    from pyro_pidkl.models import DKL
    from pyro_pidkl.infer.svi import _TorchAdam, default_elbo, svi_step

    if threads:
        torch.set_num_threads(threads)
    base = _rss_mib()
    X, y = _data(N, seed)
    pyro.set_rng_seed(seed)
    models = {"pidkl": PIDKL(X, y, physics.heat_1d(alpha=0.5), input_names=("x", "t"), m=m),
              "dkl": DKL(X, y, input_names=("x", "t"))}
    if autograd:
        models["pidkl_autograd"] = PIDKL(X, y, physics.heat_1d(alpha=0.5),
                                         input_names=("x", "t"), m=m, derivatives="autograd")
    models = {name: model.to(device) for name, model in models.items()}
    cuda = torch.device(device).type == "cuda"
    out = {"N": N, "m": m, "d": 2, "equation": "heat_1d", "device": str(device),
           "threads": torch.get_num_threads()}
    if cuda:
        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
        out["torch"] = torch.__version__
    # the step fit() takes (default ELBO, one Adam over all parameters); and the plain Pyro
    # step of PI-DKL for comparison
    steps = {name: functools.partial(svi_step, model, default_elbo(model), _TorchAdam(1e-3))
             for name, model in models.items()}
    steps["pidkl_plain"] = functools.partial(svi_step, models["pidkl"], Trace_ELBO(),
                                             pyro.optim.Adam({"lr": 1e-3}))
    if anchor == "gpytorch":
        steps["gpytorch"], _ = gpytorch_dkl(X, y, device, seed)
    elif anchor is not None:
        raise ValueError(f"Expected anchor None or 'gpytorch'; got {anchor!r}")
    for name, seconds in interleaved_medians(steps, repeats, device, warmup=2).items():
        out[f"{name}_step_s"] = seconds
    out["ratio"] = out["pidkl_step_s"] / out["dkl_step_s"]
    if anchor == "gpytorch":
        import gpytorch
        out["gpytorch"] = gpytorch.__version__
        out["pidkl_over_gpytorch"] = out["pidkl_step_s"] / out["gpytorch_step_s"]
        out["dkl_over_gpytorch"] = out["dkl_step_s"] / out["gpytorch_step_s"]
    if autograd:
        out["ratio_autograd"] = out["pidkl_autograd_step_s"] / out["dkl_step_s"]
    if cuda:
        out["peak_cuda_mib"] = torch.cuda.max_memory_allocated(torch.device(device)) / 2 ** 20
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["peak_minus_import_mib"] = out["peak_rss_mib"] - base
    return out


def _case(args):
    return time_case(*args)


def _fit_case(args):
    return fit_times(*args)


def run_benchmark(Ns=(250, 500, 1000, 2000), ms=(10, 100), repeats=15, threads=0, echo=print,
                  device="cpu", autograd=True, anchor=None, fit_steps=0):
    """Run every case in its own process; returns the list of dicts (also echoed as JSON).
    With ``fit_steps``, one more line per ``m``: the wall time of a ``fit_steps``-step fit at
    N = 100 of PI-DKL, DKL and GPyTorch's exact DKL."""
    ctx = multiprocessing.get_context("spawn")
    rows = []

    def emit(row):
        rows.append(row)
        echo(json.dumps({k: (round(v, 5) if isinstance(v, float) else v)
                         for k, v in row.items()}))
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        for N in Ns:
            for m in ms:
                emit(pool.apply(_case, ((N, m, repeats, threads, 0, device, autograd, anchor),)))
        if fit_steps:
            for m in ms:
                emit(pool.apply(_fit_case, ((100, m, fit_steps, threads, 0, device),)))
    return rows


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--N", default="250,500,1000,2000")
    p.add_argument("--m", default="10,100")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-autograd", action="store_true")
    p.add_argument("--anchor", choices=("gpytorch",), default=None,
                   help="also time GPyTorch's exact DKL (pip install -e '.[bench]')")
    p.add_argument("--fit-steps", type=int, default=0,
                   help="also the wall time of a fit of this many steps at N = 100 "
                        "(with --anchor gpytorch: GPyTorch's too)")
    a = p.parse_args()
    run_benchmark([int(v) for v in a.N.split(",")], [int(v) for v in a.m.split(",")],
                  a.repeats, a.threads, device=a.device, autograd=not a.no_autograd,
                  anchor=a.anchor, fit_steps=a.fit_steps)
