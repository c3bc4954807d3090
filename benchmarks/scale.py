"""Scale benchmark: exact vs sparse variational PI-DKL on the synthetic 2-D heat equation.

For each N (default 1e3, 1e4, 1e5, 1e6) a fresh process generates ``simulate_heat_2d(N)`` (our exact
Fourier solver, noise sd 0.05), trains, and prints one JSON line:

* ``sparse``: SparsePIDKL (M inducing points, minibatch B, m collocation points, gamma 1)
  for ``max(min_steps, epochs * N / B)`` steps; measured seconds per step, seconds per epoch
  (``N / B`` steps, measured over the run), test RMSE on 2000 noise-free points, learned
  alpha, peak resident memory of the process;
* ``exact``: PIDKL for ``min_steps`` steps where ``N <= --exact-max``; above it, one step
  is timed if ``N <= --exact-time-max`` (no RMSE: it cannot be trained here).

    python benchmarks/scale.py [--N 1000,10000,100000,1000000] [--device cpu|cuda]
                               [--methods sparse,exact] [--out docs/results/scale.jsonl]
"""

import argparse
import json
import math
import multiprocessing
import platform
import resource
import time


def _peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(N, method, steps=None, epochs=1, min_steps=500, M=128, B=1000, m=10, lr=0.01,
             lr_final=None, device="cpu", threads=0, seed=0, time_only=False):
    """Train one model on ``simulate_heat_2d(N)``; returns a dict of measurements."""
    import pyro
    import torch

    from pyro_pidkl import PIDKL, physics
    from pyro_pidkl.infer.svi import decaying_adam, default_elbo, svi_step
    from pyro_pidkl.datasets import simulate_heat_2d
    from pyro_pidkl.diagnostics import predictive_scores
    from pyro_pidkl.physics.domain import Box
    from pyro_pidkl.models import SparsePIDKL

    if threads:
        torch.set_num_threads(threads)
    data = simulate_heat_2d(n_train=N, n_test=2000, seed=seed)
    pyro.set_rng_seed(seed)
    common = dict(input_names=("x", "y", "t"), gamma=1.0, m=m,
                  domain=Box(x=(0, 2 * math.pi), y=(0, 2 * math.pi), t=(0, 1)))
    eq = physics.diffusion_2d(alpha=1.0)
    if method == "sparse":
        model = SparsePIDKL(data.X_train, data.y_train, eq, num_inducing=M, batch_size=B,
                            **common)
        per_epoch = math.ceil(N / B)
    else:
        model = PIDKL(data.X_train, data.y_train, eq, **common)
        per_epoch = 1
    model = model.to(device)
    steps = 1 if time_only else (steps or max(min_steps, epochs * per_epoch))
    pyro.clear_param_store()
    elbo = default_elbo(model)
    optim = pyro.optim.Adam({"lr": lr}) if lr_final is None else decaying_adam(lr, lr_final, steps)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    start = time.perf_counter()
    for _ in range(steps):
        loss = svi_step(model, elbo, optim)
    sync()
    seconds = time.perf_counter() - start
    out = {"N": N, "method": method, "device": str(device), "steps": steps,
           "step_s": seconds / steps, "epoch_s": seconds / steps * per_epoch,
           "steps_per_epoch": per_epoch, "train_s": seconds, "final_loss": float(loss),
           "peak_rss_mib": _peak_mib(), "threads": torch.get_num_threads()}
    if method == "sparse":
        out.update(M=M, B=B)
    out.update(lr=lr, lr_final=lr_final)
    out["torch"] = torch.__version__
    if str(device).startswith("cuda"):
        out["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2 ** 20
        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
    if not time_only:
        mean, var = model(data.X_test, noiseless=False)
        scores = predictive_scores(mean.cpu(), var.cpu(), data.y_test)
        out.update(rmse=scores["rmse"], coverage95=scores["coverage"][0.95],
                   alpha=model.equation_parameters()["alpha"], alpha_true=data.truth["alpha"])
    return out


def _case(kwargs):
    return run_case(**kwargs)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--N", default="1000,10000,100000,1000000")
    p.add_argument("--device", default="cpu")
    p.add_argument("--methods", default="sparse,exact", help="which of sparse,exact to run")
    p.add_argument("--exact-max", type=int, default=1000, help="largest N trained exactly")
    p.add_argument("--exact-time-max", type=int, default=10000,
                   help="largest N whose exact step is timed once")
    p.add_argument("--min-steps", type=int, default=500)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--M", type=int, default=128)
    p.add_argument("--B", type=int, default=1000)
    p.add_argument("--lr-final", type=float, default=None,
                   help="decay the learning rate (0.01) geometrically to this value")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", default=None, help="append the JSON lines to this file")
    args = p.parse_args(argv)
    machine = {"machine": platform.machine(), "cpus": multiprocessing.cpu_count(),
               "python": platform.python_version()}
    methods = set(args.methods.split(","))
    if not methods <= {"sparse", "exact"}:
        p.error(f"--methods: expected a subset of sparse,exact; got {args.methods!r}")
    cases = []
    for N in (int(float(n)) for n in args.N.split(",")):
        common = dict(N=N, device=args.device, threads=args.threads,
                      min_steps=args.min_steps, lr_final=args.lr_final)
        if "sparse" in methods:
            cases.append(dict(common, method="sparse", epochs=args.epochs, M=args.M, B=args.B))
        if "exact" not in methods:
            continue
        if N <= args.exact_max:
            cases.append(dict(common, method="exact"))
        elif N <= args.exact_time_max:
            cases.append(dict(common, method="exact", time_only=True))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        for kwargs in cases:
            row = {**pool.apply(_case, (kwargs,)), **machine}
            line = json.dumps({k: (round(v, 5) if isinstance(v, float) else v)
                               for k, v in row.items()})
            print(line, flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(line + "\n")


if __name__ == "__main__":
    main()
